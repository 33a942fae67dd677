"""Control flow on the cpu executor: If (torchvision's batched NMS, the offset trick) and Loop
bodies run as cpu sub-plans with the fast NonMaxSuppression; outputs equal ONNX Runtime's and
the reference executor's, and `bench --profile` names what ran."""
import atexit
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import Checker, run  # noqa: E402


def const(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr), name + "_v"))


def batched_nms_model(path):
    """keep = If(numel(boxes) == 0, [], NMS(boxes + label * (max + 1), scores)) as torchvision exports it."""
    then_g = helper.make_graph([const("t_out", np.zeros([0], np.int64))], "then_g", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.INT64, [0])])
    else_nodes = [
        helper.make_node("ReduceMax", ["boxes"], ["mx"], keepdims=0),
        helper.make_node("Cast", ["labels"], ["lf"], to=TensorProto.FLOAT),
        const("one", np.array(1, np.float32)),
        helper.make_node("Add", ["mx", "one"], ["mx1"]),
        helper.make_node("Mul", ["lf", "mx1"], ["off"]),
        const("ax1", np.array([1], np.int64)),
        helper.make_node("Unsqueeze", ["off", "ax1"], ["off2"]),
        helper.make_node("Add", ["boxes", "off2"], ["b2"]),
        const("ax0", np.array([0], np.int64)),
        helper.make_node("Unsqueeze", ["b2", "ax0"], ["b3"]),
        helper.make_node("Unsqueeze", ["scores", "ax0"], ["s2"]),
        helper.make_node("Unsqueeze", ["s2", "ax0"], ["s3"]),
        const("mo", np.array([2**62], np.int64)),
        const("th", np.array([0.5], np.float32)),
        helper.make_node("NonMaxSuppression", ["b3", "s3", "mo", "th"], ["sel"]),
        const("two", np.array([2], np.int64)),
        helper.make_node("Gather", ["sel", "two"], ["g2"], axis=1),
        helper.make_node("Squeeze", ["g2", "ax1"], ["e_out"]),
    ]
    else_g = helper.make_graph(else_nodes, "else_g", [], [helper.make_tensor_value_info("e_out", TensorProto.INT64, ["K"])])
    nodes = [
        helper.make_node("Shape", ["boxes"], ["s"]),
        helper.make_node("ReduceProd", ["s"], ["p"], keepdims=0),
        const("zero", np.array(0, np.int64)),
        helper.make_node("Equal", ["p", "zero"], ["empty"]),
        helper.make_node("If", ["empty"], ["keep"], then_branch=then_g, else_branch=else_g),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", 4]),
                                       helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N"]),
                                       helper.make_tensor_value_info("labels", TensorProto.INT64, ["N"])],
                          [helper.make_tensor_value_info("keep", TensorProto.INT64, ["K"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)


def loop_model(path):
    """A Loop whose body reads an outer activation and a constant: carried state and scan outputs."""
    body = helper.make_graph([
        helper.make_node("Identity", ["cin"], ["cout"]),
        helper.make_node("MatMul", ["vin", "w"], ["m"]),
        helper.make_node("Add", ["m", "h"], ["a"]),
        helper.make_node("Tanh", ["a"], ["vout"]),
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["vout", "fi"], ["sout"]),
    ], "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                helper.make_tensor_value_info("cin", TensorProto.BOOL, []),
                helper.make_tensor_value_info("vin", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("cout", TensorProto.BOOL, []),
         helper.make_tensor_value_info("vout", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("sout", TensorProto.FLOAT, [2, 4])])
    w = np.random.RandomState(3).randn(4, 4).astype(np.float32) * 0.5
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        const("t", np.array(True)),
        helper.make_node("Loop", ["n", "t", "x"], ["v", "scan"], body=body),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                                       helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 4]),
                           helper.make_tensor_value_info("scan", TensorProto.FLOAT, ["T", 2, 4])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)


def run_model(c, tmp, model, feeds, executor, tag):
    args = ["run", model, "--executor", executor]
    for k, v in feeds.items():
        f = os.path.join(tmp, f"{tag}_{k}.npy")
        np.save(f, v)
        args += ["-i", f"{k}={f}"]
    out = os.path.join(tmp, f"out_{tag}_{executor}")
    r = run(args + ["-O", out])
    c.check(r.returncode == 0, f"{tag}: run --executor {executor}: {r.stderr.strip()}")
    return out


def main():
    c = Checker("cpu_control_flow")
    tmp = tempfile.mkdtemp(prefix="onnxtool-cflow-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    nms = os.path.join(tmp, "batched_nms.onnx")
    batched_nms_model(nms)
    rs = np.random.RandomState(0)
    for n in (0, 1, 300, 2000):
        xy = rs.rand(n, 2).astype(np.float32) * 300
        wh = 5 + rs.rand(n, 2).astype(np.float32) * 60
        feeds = {"boxes": np.concatenate([xy, xy + wh], axis=1).astype(np.float32),
                 "scores": rs.rand(n).astype(np.float32),
                 "labels": rs.randint(0, 8, size=n).astype(np.int64)}
        want = ort.InferenceSession(nms, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        tag = f"nms{n}"
        for executor in ("cpu", "ref"):
            out = run_model(c, tmp, nms, feeds, executor, tag)
            f = os.path.join(out, "keep.npy")
            got = np.load(f) if os.path.exists(f) else None
            c.check(got is not None and got.dtype == np.int64 and np.array_equal(got, want),
                    f"{tag} on {executor}: the boxes kept equal onnxruntime's ({None if got is None else got.shape} vs {want.shape})")
    # bench --profile names what ran: the If's bodies on cpu sub-plans (at -O3 with the shapes
    # fixed the optimizer inlines the branch it can decide: -O1 keeps the If)
    r = run(["bench", nms, "--graph-opt", "1", "--iterations", "2", "--warmup", "1", "--profile", "--shape", "boxes=300,4", "--shape",
             "scores=300", "--shape", "labels=300"])
    c.check(r.returncode == 0 and "cpu.if (subgraphs on cpu)" in r.stdout and "ref.if" not in r.stdout,
            f"bench --profile: the If runs its bodies on cpu: {r.stdout[-800:]} {r.stderr}")

    loop = os.path.join(tmp, "loop.onnx")
    loop_model(loop)
    feeds = {"n": np.array(5, np.int64), "x": rs.randn(2, 4).astype(np.float32)}
    want = ort.InferenceSession(loop, providers=["CPUExecutionProvider"]).run(None, feeds)
    out = run_model(c, tmp, loop, feeds, "cpu", "loop")
    for name, w in zip(("v", "scan"), want):
        f = os.path.join(out, f"{name}.npy")
        got = np.load(f) if os.path.exists(f) else None
        c.check(got is not None and got.shape == w.shape and np.allclose(got, w, rtol=1e-4, atol=1e-5),
                f"loop output {name} equals onnxruntime's")
    r = run(["bench", loop, "--iterations", "2", "--warmup", "1", "--profile"])
    c.check(r.returncode == 0 and "cpu.loop (subgraphs on cpu)" in r.stdout, f"bench --profile names cpu.loop: {r.stdout[-600:]}")
    c.finish()


if __name__ == "__main__":
    main()
