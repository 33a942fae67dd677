"""onnxtool quantize --int8 --dynamic, default per-row activation scales: the model passes
onnx.checker (full), holds only standard ops, computes exactly the per-row quantization a numpy
oracle computes (ONNX Runtime, optimizations off), ONNX Runtime's optimized run gives the same
values (its MatMulIntegerToFloat fusion assumes a scalar activation scale and must not take the
pattern), our reference and cpu executors (every ISA path, the cpu one on its fused int8 kernel)
agree with ONNX Runtime, and on a token with outliers per-row scales beat the per-tensor form
(--activation-scales tensor, DynamicQuantizeLinear)."""
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import Checker, ort_session, run  # noqa: E402
from test_quantize import cosine, cpu_matches_ort  # noqa: E402


def ffn(opset):
    """x [1, S, 64] -> MatMul + bias -> GELU (erf, as BERT exports spell it) -> MatMul + bias: a
    transformer's feed-forward block, whose second MatMul reads GELU's skewed outputs."""
    rng = np.random.default_rng(1)
    w = lambda name, *shape: numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)  # noqa: E731
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    inits = [w("w1", 64, 128), w("b1", 128), w("w2", 128, 64), w("b2", 64), c("sqrt2", 1.4142135), c("one", 1.0), c("half", 0.5)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Div", ["hb", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["hb", "e1"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["g"]),
             helper.make_node("MatMul", ["g", "w2"], ["o"]), helper.make_node("Add", ["o", "b2"], ["y"])]
    g = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "S", 64])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def tokens(rng, s=16):
    """Normal tokens, one of them (like BERT's [SEP]) with outliers a hundred times the rest."""
    x = rng.standard_normal((1, s, 64)).astype(np.float32)
    x[0, 3, ::7] *= 100
    return x


def row_quantized_matmul(x, wq, ws, colsum):
    """The per-row form's value, by numpy in float32 where the graph is float32: lo/hi per row
    (with 0), scale = max((hi - lo) / 255, FLT_MIN), zero = round(clip(-lo / scale, 0, 255)),
    q = clip(round(x / scale) + zero, 0, 255), (float(q @ wq - zero * colsum) * ws) * scale."""
    f = np.float32
    lo = np.minimum(x.min(-1, keepdims=True), f(0))
    hi = np.maximum(x.max(-1, keepdims=True), f(0))
    scale = np.maximum((hi - lo) / f(255), np.finfo(np.float32).tiny).astype(f)
    zero = np.round(np.clip(-lo / scale, f(0), f(255))).astype(f)
    q = np.clip(np.round(x / scale) + zero, 0, 255).astype(np.int64)
    acc = q @ wq.astype(np.int64) - zero.astype(np.int64) * colsum.astype(np.int64)
    return (acc.astype(f) * ws) * scale


def main():
    c = Checker("quantize rows")
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(7)
        for opset in (13, 17, 18):
            src, dst = os.path.join(tmp, f"ffn{opset}.onnx"), os.path.join(tmp, f"ffn{opset}.int8.onnx")
            onnx.save(ffn(opset), src)
            r = run(["quantize", src, "-o", dst, "--int8", "--dynamic", "--json", "--eval-sets", "0"])
            if not c.check(r.returncode == 0, f"opset {opset}: quantize: {r.stderr}"):
                continue
            doc = json.loads(r.stdout)
            c.check(doc["scheme"].get("activation_scales") == "row" and doc["nodes_quantized"] == 2,
                    f"opset {opset}: json scheme {doc['scheme']}, {doc['nodes_quantized']} nodes")
            m = onnx.load(dst)
            try:
                onnx.checker.check_model(m, full_check=True)
                c.check(True, "")
            except Exception as e:  # noqa: BLE001
                c.check(False, f"opset {opset}: onnx.checker: {e}")
            ops = [n.op_type for n in m.graph.node]
            c.check(all(n.domain in ("", "ai.onnx") for n in m.graph.node) and "DynamicQuantizeLinear" not in ops
                    and ops.count("ReduceMax") == 2 and ops.count("MatMulInteger") == 2, f"opset {opset}: ops {ops}")
            x = tokens(rng)
            plain = ort.SessionOptions()
            plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            exact = ort_session(dst, plain, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            fused = ort_session(dst, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            # numpy: the first layer exactly as the graph should compute it, the rest in float
            q = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
            f = {t.name: numpy_helper.to_array(t) for t in ffn(opset).graph.initializer}
            c.check(np.array_equal(q["w1_column_sum"], q["w1_quantized"].astype(np.int64).sum(0)), "w1 column sums")
            h = row_quantized_matmul(x, q["w1_quantized"], q["w1_scale"], q["w1_column_sum"]) + f["b1"]
            from math import erf
            g = (h * (np.vectorize(erf)(h.astype(np.float64) / np.sqrt(2)) + 1) * 0.5).astype(np.float32)
            want = row_quantized_matmul(g, q["w2_quantized"], q["w2_scale"], q["w2_column_sum"]) + f["b2"]
            # (GELU computed in float64 here: a rare one-step flip of a second-layer value is allowed)
            step = float(np.abs(want).max()) / 127
            err = float(np.abs(exact - want).max())
            c.check(err <= step and np.mean(np.abs(exact - want) > 1e-4 * step) < 0.01,
                    f"opset {opset}: ONNX Runtime (unoptimized) vs the numpy per-row oracle: max diff {err:.3g}")
            err = float(np.abs(fused - exact).max())
            c.check(err <= 1e-5 * float(np.abs(exact).max()),
                    f"opset {opset}: ONNX Runtime optimized vs unoptimized: max diff {err:.3g} (a fusion that drops the row scales?)")
            cpu_matches_ort(c, dst, {"x": x}, tmp, f"rows opset {opset}")
            for ex in ("ref",):
                out = os.path.join(tmp, f"out_{ex}")
                np.save(os.path.join(tmp, "x.npy"), x)
                r = run(["run", dst, "--executor", ex, "-i", f"x={os.path.join(tmp, 'x.npy')}", "-O", out])
                if c.check(r.returncode == 0, f"run --executor {ex}: {r.stderr}"):
                    got = np.load(os.path.join(out, "y.npy"))
                    err = float(np.abs(got - exact).max())
                    c.check(err <= 1e-5 * float(np.abs(exact).max()), f"opset {opset}: {ex} vs ONNX Runtime: max diff {err:.3g}")
            # inspect: two per-channel weight scales, two activations quantized at run time
            r = run(["inspect", dst, "--json"])
            sc = json.loads(r.stdout).get("quantization", {}).get("scales", {}) if r.returncode == 0 else {}
            c.check(sc.get("per_channel") == 2 and sc.get("runtime") == 2 and sc.get("per_tensor") == 0,
                    f"opset {opset}: inspect scales {sc} {r.stderr}")
            # the cpu executor runs both MatMuls on its fused per-row int8 kernel, nothing on reference kernels
            r = run(["bench", dst, "--executor", "cpu", "--shape", "x=1,16,64", "--iterations", "2", "--warmup", "1", "--profile"])
            c.check(r.returncode == 0 and r.stdout.count("cpu.dynqmatmul.rows.u8s8.fused") == 2 and "fallback nodes (reference kernels): 0 of" in r.stdout,
                    f"opset {opset}: bench --profile: {r.stdout[-1500:]} {r.stderr}")
            if opset != 17:
                continue
            # per row vs per tensor, against the float model, on the token with outliers
            tensor = os.path.join(tmp, "ffn.tensor.onnx")
            r = run(["quantize", src, "-o", tensor, "--int8", "--dynamic", "--activation-scales", "tensor", "--json", "--eval-sets", "0"])
            if c.check(r.returncode == 0, f"--activation-scales tensor: {r.stderr}"):
                c.check(json.loads(r.stdout)["scheme"].get("activation_scales") == "tensor", "json: activation_scales tensor")
                ref = ort_session(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                per_tensor = ort_session(tensor, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                rows = [cosine(ref[0, i], exact[0, i]) for i in range(x.shape[1])]
                tens = [cosine(ref[0, i], per_tensor[0, i]) for i in range(x.shape[1])]
                print(f"worst token cosine to float: per row {min(rows):.5f}, per tensor {min(tens):.5f}")
                c.check(min(rows) >= 0.999 and min(tens) < 0.99,
                        f"per-row scales keep every token (worst {min(rows):.5f}); per-tensor loses the others (worst {min(tens):.5f})")
        # usage errors: exit 2 with a one-line message
        calib = os.path.join(tmp, "c.npz")
        np.savez(calib, x=rng.standard_normal((2, 1, 4, 64)).astype(np.float32))
        for args, text in ((["--int8", "--static", "--calibration", calib, "--activation-scales", "row"], "applies to --dynamic"),
                           (["--int8", "--dynamic", "--activation-scales", "column"], "activation-scales")):
            r = run(["quantize", os.path.join(tmp, "ffn17.onnx"), "-o", os.path.join(tmp, "bad.onnx")] + args)
            c.check(r.returncode == 2 and text in r.stderr and r.stderr.count("\n") == 1, f"{args}: exit 2: {r.returncode} {r.stderr}")
    c.finish()


if __name__ == "__main__":
    main()
