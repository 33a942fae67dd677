"""onnxtool quantize --int8 --dynamic: int8 weights with standard ops only (DynamicQuantizeLinear +
MatMulInteger), checked with onnx.checker (full) and ONNX Runtime against the float model (cosine
similarity, since one rounding step of the activation quantizer propagates), plus its own accuracy
report, sizes, what stays float, and the exit codes."""
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import Checker, run  # noqa: E402


def mlp(opset=17):
    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)  # noqa: E731
    inits = [w("w1", 64, 128), w("b1", 128), w("w2t", 96, 128), w("b2", 96), w("w3", 96, 96), w("tiny", 96, 2)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]), helper.make_node("Add", ["h1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Gemm", ["r1", "w2t", "b2"], ["g2"], transB=1),
             helper.make_node("Tanh", ["g2"], ["t2"]),
             helper.make_node("MatMul", ["t2", "w3"], ["m3"]),      # shares t2's quantizer with the next
             helper.make_node("MatMul", ["t2", "w3"], ["m3b"]),
             helper.make_node("MatMul", ["m3", "other"], ["dyn"]),  # a non-constant weight stays float
             helper.make_node("MatMul", ["m3b", "tiny"], ["small"])]  # under --min-elements: float
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64]),
                                         helper.make_tensor_value_info("other", TensorProto.FLOAT, [96, 8])],
                          [helper.make_tensor_value_info("dyn", TensorProto.FLOAT, ["N", 8]),
                           helper.make_tensor_value_info("small", TensorProto.FLOAT, ["N", 2])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def main():
    c = Checker("quantize")
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "mlp.onnx"), os.path.join(tmp, "mlp.int8.onnx")
        onnx.save(mlp(), src)
        r = run(["quantize", src, "-o", dst, "--int8", "--dynamic", "--min-elements", "256", "--json"])
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        c.check(r.returncode == 0, f"quantize: {r.stderr}")
        c.check(doc.get("nodes_quantized") == 4 and doc.get("weights_quantized") == 3,
                f"4 nodes, 3 distinct weights quantized: {doc.get('nodes_quantized')}, {doc.get('weights_quantized')}")
        skipped = " ".join(doc.get("skipped", []))
        c.check("'dyn'" in skipped or "dyn" in skipped, f"the MatMul with a non-constant weight is reported as kept float: {skipped}")
        m = onnx.load(dst)
        try:
            onnx.checker.check_model(m, full_check=True)
            c.check(True, "")
        except Exception as e:  # noqa: BLE001
            c.check(False, f"onnx.checker: {e}")
        ops = [n.op_type for n in m.graph.node]
        c.check(all(n.domain in ("", "ai.onnx") for n in m.graph.node), "standard ops only")
        c.check(ops.count("MatMulInteger") == 4 and ops.count("DynamicQuantizeLinear") == 3,
                f"4 MatMulInteger, 3 DynamicQuantizeLinear (t2's is shared): {ops}")
        inits = {t.name: t for t in m.graph.initializer}
        c.check(not any(n in inits for n in ("w1", "w2t", "w3")) and "tiny" in inits,
                f"float weights replaced, the small one kept: {sorted(inits)}")
        c.check(sum(1 for t in inits.values() if t.data_type == TensorProto.INT8 and len(t.dims) == 2) == 3, "three int8 matrices")
        c.check(os.path.getsize(dst) < 0.5 * os.path.getsize(src), f"smaller: {os.path.getsize(src)} -> {os.path.getsize(dst)}")
        # ONNX Runtime runs it with the float model's outputs (cosine similarity)
        a = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
        b = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(5)
        got = {"dyn": ([], []), "small": ([], [])}
        for n in (1, 7, 32):
            feeds = {"x": rng.standard_normal((n, 64)).astype(np.float32), "other": rng.standard_normal((96, 8)).astype(np.float32)}
            for name, ya, yb in zip(["dyn", "small"], a.run(None, feeds), b.run(None, feeds)):
                c.check(ya.shape == yb.shape, f"batch {n}, output {name}: shapes {ya.shape} {yb.shape}")
                got[name][0].append(ya.ravel())
                got[name][1].append(yb.ravel())
        for name, (ya, yb) in got.items():  # over all batches: 'small' has 2 values a row
            cs = cosine(np.concatenate(ya), np.concatenate(yb))
            c.check(cs >= 0.999, f"output {name}: cosine similarity to the float model {cs:.6f}")
        # our own accuracy report says the same
        acc = doc.get("evaluation", {}).get("outputs", [])
        c.check(len(acc) == 2 and all(o["cosine_similarity"] >= 0.999 and o["max_abs_diff"] > 0 for o in acc),
                f"accuracy report: {acc}")
        # over the input file, atomically, is allowed; stdout text report
        over = os.path.join(tmp, "over.onnx")
        onnx.save(mlp(), over)
        r = run(["quantize", over, "-o", over, "--int8", "--dynamic"])
        c.check(r.returncode == 0 and "cosine similarity" in r.stderr and "quantized 5 nodes" in r.stderr,
                f"quantize m -o m: {r.returncode} {r.stderr}")
        r = run(["-q", "quantize", src, "-o", dst, "--int8", "--dynamic"])
        c.check(r.returncode == 0 and r.stderr == "", f"-q: {r.stderr!r}")
        # exit codes
        old = os.path.join(tmp, "op10.onnx")
        onnx.save(mlp(opset=10), old)
        r = run(["quantize", old, "-o", dst, "--int8", "--dynamic"])
        c.check(r.returncode == 3 and "opset 11" in r.stderr, f"opset 10: exit 3: {r.returncode} {r.stderr}")
        for args in (["--int8"], [], ["--int8", "--dynamic", "--eval-sets", "-1"]):
            r = run(["quantize", src, "-o", dst] + args)
            c.check(r.returncode == 2 and r.stderr.startswith("onnxtool: error:"), f"quantize {args}: exit 2: {r.stderr}")
    c.finish()


if __name__ == "__main__":
    main()
