"""Shape inference states only what is true: every dim `inspect --shapes --json` gives as a number,
for every value of the main graph, must be the dim ONNX Runtime computes for that value (all of
them exposed as outputs), at two input sizes for each symbolic input dim. Models: the bundled CNN,
an OCR-like model with a dynamic width and a lying output declaration, a tf2onnx-style model
slicing to 1000000000 / INT64_MAX on symbolic dims, and the Silero VAD models (real exports with
control flow)."""
import importlib.util
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import SOURCE_DIR, Checker, run  # noqa: E402


def ocr_model():
    rng = np.random.default_rng(0)

    def w(name, shape):
        return numpy_helper.from_array((0.1 * rng.standard_normal(shape)).astype(np.float32), name)

    inits = [w("w1", (8, 1, 3, 3)), w("b1", (8,)), w("w2", (16, 8, 3, 3)), w("b2", (16,)),
             numpy_helper.from_array(np.array([3], np.int64), "idx3"), numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 1]),
             helper.make_node("Shape", ["c2"], ["s"]),
             helper.make_node("Gather", ["s", "idx3"], ["wd"], axis=0),
             helper.make_node("Concat", ["wd", "one", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["c2", "target"], ["out"])]
    g = helper.make_graph(nodes, "ocr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 32, "width"])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, "seqlen"])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)], ir_version=7), {"width": [37, 100]}


def tf2onnx_slice_model():
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    inits = [c("s0", [1]), c("e_big", [1000000000]), c("e_max", [np.iinfo(np.int64).max]), c("ax0", [0]), c("ax1", [1]),
             c("s_neg", [-1000000000])]
    nodes = [helper.make_node("Slice", ["x", "s0", "e_big", "ax1"], ["a"]),
             helper.make_node("Slice", ["a", "s_neg", "e_max", "ax0"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"])]
    g = helper.make_graph(nodes, "tf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 214])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7), {"N": [1, 3], "T": [5, 9]}


def expose_all(model):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    known = {o.name for o in m.graph.output} | {i.name for i in m.graph.input}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in known:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                known.add(o)
    return m


def feeds(model, sizes, which, overrides):
    rng = np.random.default_rng(which)
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dims = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            else:
                dims.append(sizes.get(d.dim_param, [1, 3])[which])
        dt = helper.tensor_dtype_to_np_dtype(t.elem_type)
        out[i.name] = overrides[i.name](dims, which) if i.name in overrides else rng.standard_normal(dims).astype(dt)
    return out


def check_model(c, tmp, name, model, sizes, overrides=None):
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(model, path)
    r = run(["inspect", "--shapes", "--json", path])
    if not c.check(r.returncode == 0, f"{name}: inspect --shapes: {r.stderr}"):
        return
    stated = {v["name"]: v["shape"] for v in json.loads(r.stdout)["values"] if v["graph"] == ""}
    exposed = os.path.join(tmp, name + ".all.onnx")
    onnx.save(expose_all(model), exposed)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(exposed, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    checked = wrong = 0
    for which in (0, 1):
        outs = sess.run(None, feeds(model, sizes, which, overrides or {}))
        for n, v in zip(names, outs):
            shape = stated.get(n)
            if shape is None:
                continue
            real = list(np.shape(v))
            if len(shape) != len(real):
                wrong += 1
                c.check(False, f"{name}: '{n}' stated rank {len(shape)} ({shape}), real {real}")
                continue
            for k, (s, d) in enumerate(zip(shape, real)):
                if isinstance(s, int):
                    checked += 1
                    if s != d:
                        wrong += 1
                        c.check(False, f"{name}: '{n}' dim {k} stated {s}, real {d} (input set {which}: {real})")
    c.check(checked > 0, f"{name}: no dim stated as a number")
    print(f"{name}: {checked} stated dims checked at two input sizes, {wrong} wrong")


def main():
    c = Checker("shapes vs runtime")
    with tempfile.TemporaryDirectory() as tmp:
        check_model(c, tmp, "small_cnn", onnx.load(os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")),
                    {"batch": [1, 3]})
        check_model(c, tmp, "ocr_like", *ocr_model())
        check_model(c, tmp, "tf2onnx_slice", *tf2onnx_slice_model())
        spec = importlib.util.find_spec("silero_vad")
        if c.check(spec is not None, "silero-vad is installed (scripts/setup)"):
            d = os.path.join(os.path.dirname(spec.origin), "data")
            state = lambda dims, which: (0.1 * np.random.default_rng(which).standard_normal((2, [1, 3][which], 128))).astype(np.float32)  # noqa: E731
            sr = lambda dims, which: np.array(16000, np.int64)  # noqa: E731
            for m in ("silero_vad_16k_op15", "silero_vad_half", "silero_vad_op18_ifless"):
                model = onnx.load(os.path.join(d, m + ".onnx"))
                # the audio input's dims are unnamed: batch 1 and 3, 512 samples
                dt = helper.tensor_dtype_to_np_dtype([i for i in model.graph.input if i.name == "input"][0].type.tensor_type.elem_type)
                inp = lambda dims, which, dt=dt: np.random.default_rng(which).standard_normal(([1, 3][which], 512)).astype(dt)  # noqa: E731
                check_model(c, tmp, m, model, {}, {"state": state, "sr": sr, "input": inp})
    c.finish()


if __name__ == "__main__":
    main()
