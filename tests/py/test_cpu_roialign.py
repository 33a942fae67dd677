"""The cpu executor's RoiAlign kernel against onnx.reference (ReferenceEvaluator) on random maps
and boxes: opsets 10 and 16 (their default coordinate modes and both set explicitly), avg and max
pooling, fixed and adaptive sampling ratios, boxes partly outside the map, flipped corners, no box
at all, and a box count known only at run time (NonZero picks the boxes: a lazy kernel)."""
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import Checker, run  # noqa: E402


def model(opset, attrs, n, c, h, w, rois, dynamic):
    """RoiAlign(x, rois, batch); with `dynamic`, the boxes whose mask is set (NonZero -> Gather)."""
    nodes, inputs = [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])]
    if dynamic:
        inputs += [helper.make_tensor_value_info("all_rois", TensorProto.FLOAT, [rois, 4]),
                   helper.make_tensor_value_info("all_batch", TensorProto.INT64, [rois]),
                   helper.make_tensor_value_info("mask", TensorProto.BOOL, [rois])]
        nodes += [helper.make_node("NonZero", ["mask"], ["nz"]),
                  helper.make_node("Squeeze", ["nz", "zero"], ["idx"]) if opset >= 13 else
                  helper.make_node("Squeeze", ["nz"], ["idx"], axes=[0]),
                  helper.make_node("Gather", ["all_rois", "idx"], ["rois"]),
                  helper.make_node("Gather", ["all_batch", "idx"], ["batch"])]
    else:
        inputs += [helper.make_tensor_value_info("rois", TensorProto.FLOAT, [rois, 4]),
                   helper.make_tensor_value_info("batch", TensorProto.INT64, [rois])]
    nodes.append(helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs))
    inits = [helper.make_tensor("zero", TensorProto.INT64, [1], [0])] if dynamic and opset >= 13 else []
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def main():
    c = Checker("cpu_roialign")
    tmp = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    case = 0
    for opset in (10, 16):
        for mode in ("avg", "max"):
            for coord in (None, "half_pixel", "output_half_pixel"):
                if opset == 10 and coord is not None:
                    continue  # the attribute is new in opset 16
                for dynamic in (False, True):
                    case += 1
                    n, ch, h, w, rois = 1 + case % 2, 3 + case % 5, 6 + case % 9, 5 + case % 7, [0, 9, 31][case % 3]
                    scale = [1.0, 0.5, 0.25][case % 3]
                    attrs = dict(mode=mode, output_height=1 + case % 5, output_width=2 + case % 4,
                                 sampling_ratio=case % 3, spatial_scale=scale)
                    if coord:
                        attrs["coordinate_transformation_mode"] = coord
                    m = model(opset, attrs, n, ch, h, w, rois, dynamic)
                    path = os.path.join(tmp, f"roi{case}.onnx")
                    onnx.save(m, path)
                    x = rng.standard_normal((n, ch, h, w)).astype(np.float32)
                    x0 = rng.uniform(-0.2, 1.2, (rois, 2)) * [w / scale, h / scale]
                    size = rng.uniform(0, 0.8, (rois, 2)) * [w / scale, h / scale]
                    boxes = np.concatenate([x0, x0 + size], 1).astype(np.float32)
                    flip = rng.random(rois) < 0.2
                    boxes[flip, 0], boxes[flip, 2] = boxes[flip, 2].copy(), boxes[flip, 0].copy()
                    batch = rng.integers(0, n, rois).astype(np.int64)
                    feeds = {"x": x}
                    if dynamic:
                        feeds.update(all_rois=boxes, all_batch=batch, mask=rng.random(rois) < 0.6)
                    else:
                        feeds.update(rois=boxes, batch=batch)
                    # onnx.reference gives an opset-10 RoiAlign the opset-16 default (half_pixel); the
                    # opset-10 op is the output_half_pixel computation, which the oracle is asked for
                    oracle = m if opset == 16 else model(16, dict(attrs, coordinate_transformation_mode="output_half_pixel"),
                                                         n, ch, h, w, rois, dynamic)
                    want = ReferenceEvaluator(oracle).run(None, feeds)[0]
                    args = ["run", path, "--executor", "cpu", "-O", os.path.join(tmp, f"out{case}")]
                    for k, v in feeds.items():
                        f = os.path.join(tmp, f"{k}{case}.npy")
                        np.save(f, v)
                        args += ["-i", f"{k}={f}"]
                    r = run(args)
                    what = f"opset {opset} {mode} {coord} dynamic={dynamic} rois={rois} {attrs}"
                    if not c.check(r.returncode == 0, f"{what}: exit {r.returncode}: {r.stderr.strip()}"):
                        continue
                    got = np.load(os.path.join(tmp, f"out{case}", "y.npy"))
                    c.check(got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5),
                            f"{what}: max abs diff {np.max(np.abs(got - want)) if got.shape == want.shape and got.size else got.shape}")
    c.finish()


if __name__ == "__main__":
    main()
