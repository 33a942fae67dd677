"""onnxtool quantize scheme options: --per-channel/--per-tensor, --weight-type, --activation-type
(8 and 16 bits), --symmetric-activations, --reduce-range, --op-types, --exclude, --target
generic|ort|trt, int32 biases, --smooth-quant, --weight-rounding gptq, --bias-correction empirical. Scales and zero points are checked against values
computed here by hand from the float weights and the calibration data; every model written passes
onnx.checker (full) and runs in ONNX Runtime, and our executors (ref, cpu) agree with ONNX Runtime
within one quantization step of each output."""
import itertools
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import Checker, ort_session, run  # noqa: E402
from test_quantize import SMALL, cosine, mlp  # noqa: E402


def inits_of(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def checked(c, path, label):
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
        return c.check(True, "")
    except Exception as e:  # noqa: BLE001
        return c.check(False, f"{label}: onnx.checker: {e}")


def quantize(args, label, c):
    r = run(["quantize"] + args + ["--json"])
    ok = c.check(r.returncode == 0, f"{label}: quantize {args}: {r.stderr}")
    return json.loads(r.stdout) if ok else None


def ours_vs_ort(c, model, feeds, tmp, label, executors=("ref", "cpu")):
    """ONNX Runtime runs the model. Our executors give the outputs of its unfused run (graph
    optimizations off: the QDQ semantics exactly) within one 8-bit quantization step of each
    output's range ((max - min) / 255), and those of its default run within two: its fused int8
    kernels requantize intermediates with their own rounding, one step of an intermediate that the
    next layer carries forward (three). Returns the unfused outputs."""
    try:
        plain = ort.SessionOptions()
        plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        exact = ort_session(model, plain, providers=["CPUExecutionProvider"]).run(None, feeds)
        fused = ort_session(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception as e:  # noqa: BLE001
        c.check(False, f"{label}: ONNX Runtime: {str(e)[:300]}")
        return None
    names = [o.name for o in onnx.load(model, load_external_data=False).graph.output]
    args = []
    for k, v in feeds.items():
        f = os.path.join(tmp, f"feed_{k}.npy")
        np.save(f, v)
        args += ["-i", f"{k}={f}"]
    for ex in executors:
        out = os.path.join(tmp, f"out_{ex}")
        r = run(["run", model, "--executor", ex, "-O", out] + args)
        if not c.check(r.returncode == 0, f"{label}: run --executor {ex}: {r.stderr}"):
            continue
        for name, w, wf in zip(names, exact, fused):
            got = np.load(os.path.join(out, name + ".npy")).astype(np.float64)
            step = (float(w.max()) - float(w.min())) / 255 + 1e-6
            err, errf = float(np.abs(got - w).max()), float(np.abs(got - wf).max())
            # (ONNX Runtime's fused run itself strays up to 2.14 steps from its unfused one on the
            # mlp's 'small' output, three requantized layers deep with 7-bit weights: 3 steps)
            c.check(got.shape == w.shape and err <= step and errf <= 3 * step,
                    f"{label}: {ex} vs ONNX Runtime, {name}: max diff {err:.3g} (fused run: {errf:.3g}), step {step:.3g}")
    return exact


def hand_checks(c, tmp):
    """Per-channel and per-tensor weight scales, uint8 weights, 7-bit weights, activation scales
    and zero points, int32 biases: all against numpy."""
    src = os.path.join(tmp, "mlp.onnx")
    onnx.save(mlp(opset=17), src)
    w = {t.name: numpy_helper.to_array(t) for t in mlp().graph.initializer}
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 64)).astype(np.float32)
    calib = os.path.join(tmp, "mlp_calib.npz")
    np.savez(calib, x=x, other=rng.standard_normal((3, 96, 8)).astype(np.float32))
    out = os.path.join(tmp, "h.onnx")
    # (the biases as they are: bias_correction_checks covers the correction; nearest rounding:
    # rounding_checks covers GPTQ)
    base = [src, "-o", out, "--int8", "--static", "--calibration", calib, "--min-elements", "256", "--eval-sets", "0",
            "--no-bias-correction", "--weight-rounding", "nearest"]
    # per channel (default): MatMul w1 [64, 128] along axis 1, Gemm w2t [96, 128] with transB along axis 0
    if quantize(base, "per-channel", c):
        q = inits_of(out)
        s1, s2 = q["w1_scale"], q["w2t_scale"]
        c.check(s1.shape == (128,) and np.allclose(s1, np.abs(w["w1"]).max(axis=0) / 127, rtol=1e-6),
                f"w1 per-column scales = max|w1[:, n]| / 127: {s1[:3]}")
        c.check(s2.shape == (96,) and np.allclose(s2, np.abs(w["w2t"]).max(axis=1) / 127, rtol=1e-6),
                f"w2t (transB) per-row scales = max|w2t[n, :]| / 127: {s2[:3]}")
        c.check(np.array_equal(q["w1_quantized"], np.clip(np.round(w["w1"] / s1), -127, 127).astype(np.int8)),
                "w1 int8 = round(w1 / scale)")
        c.check(q["w1_zero_point"].dtype == np.int8 and not q["w1_zero_point"].any(), "int8 weights: zero points 0")
        axes = {n.input[0]: {a.name: a.i for a in n.attribute}.get("axis") for n in onnx.load(out).graph.node
                if n.op_type == "DequantizeLinear"}
        c.check(axes.get("w1_quantized") == 1 and axes.get("w2t_quantized") == 0, f"weight DequantizeLinear axes: {axes}")
        # activation x: uint8 over [min(0, x), max(0, x)]
        lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
        sc = np.float32((hi - lo) / 255)
        c.check(np.isclose(q["x_scale"], sc, rtol=1e-6) and q["x_zero_point"] == np.uint8(round(-lo / sc)),
                f"x: uint8 scale {q['x_scale']} zero point {q['x_zero_point']}")
        # the Gemm bias: int32 with scale = x scale * w scale (float32 product), zero point 0
        bs = q.get("b2_scale")
        g_in = [n for n in onnx.load(out).graph.node if n.op_type == "Gemm"][0].input[0]
        xs = q[g_in.replace("_dequantized", "_scale")] if g_in.endswith("_dequantized") else None
        if c.check(bs is not None and xs is not None, f"Gemm bias quantized: {sorted(q)}"):
            c.check(np.array_equal(bs, (np.float32(xs) * s2).astype(np.float32)), "bias scale == x scale * w scale")
            c.check(q["b2_quantized"].dtype == np.int32 and np.array_equal(q["b2_quantized"], np.round(w["b2"] / bs).astype(np.int32))
                    and not q["b2_zero_point"].any(), "bias int32 = round(b / scale), zero point 0")
        checked(c, out, "per-channel")
    # per tensor: one scale per weight, no axis
    if quantize(base + ["--per-tensor"], "per-tensor", c):
        q = inits_of(out)
        c.check(q["w1_scale"].shape == () and np.isclose(q["w1_scale"], np.abs(w["w1"]).max() / 127, rtol=1e-6),
                f"per-tensor w1 scale: {q['w1_scale']}")
        c.check(q["b2_scale"].shape == () and q["b2_scale"] == np.float32(q[[k for k in q if k.endswith("_scale") and k.startswith("r1")][0]]) * q["w2t_scale"],
                "per-tensor bias scale = x scale * w scale")
        checked(c, out, "per-tensor")
    # uint8 weights: asymmetric per channel over [min(0, w), max(0, w)]
    if quantize(base + ["--weight-type", "uint8"], "uint8 weights", c):
        q = inits_of(out)
        lo, hi = np.minimum(w["w1"].min(axis=0), 0), np.maximum(w["w1"].max(axis=0), 0)
        s = ((hi - lo) / 255).astype(np.float32)
        z = np.clip(np.round(-lo / s), 0, 255).astype(np.uint8)
        c.check(np.allclose(q["w1_scale"], s, rtol=1e-6) and np.array_equal(q["w1_zero_point"], z)
                and q["w1_quantized"].dtype == np.uint8, "uint8 w1: scale (hi - lo) / 255, zero point round(-lo / scale)")
    # 7-bit weights: int8 in [-64, 64], scale max|w| / 64
    if quantize(base + ["--reduce-range"], "reduce-range", c):
        q = inits_of(out)
        c.check(np.allclose(q["w1_scale"], np.abs(w["w1"]).max(axis=0) / 64, rtol=1e-6) and np.abs(q["w1_quantized"]).max() == 64,
                "--reduce-range: w1 scale max|w| / 64, values within [-64, 64]")
    # activation types: int8 asymmetric, symmetric int8/uint8, 16 bits (opset raised to 21)
    xm = max(abs(float(x.min())), abs(float(x.max())))
    lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
    cases = {("int8",): (np.int8, (hi - lo) / 255, round(-128 - lo / ((hi - lo) / 255))),
             ("int8", "--symmetric-activations"): (np.int8, xm / 127, 0),
             ("uint8", "--symmetric-activations"): (np.uint8, xm / 127, 128),
             ("int16",): (np.int16, (hi - lo) / 65535, round(-32768 - lo / ((hi - lo) / 65535))),
             ("uint16", "--symmetric-activations"): (np.uint16, xm / 32767, 32768)}
    for key, (dt, scale, zp) in cases.items():
        args = ["--activation-type", key[0]] + list(key[1:])
        doc = quantize(base + args, f"activations {key}", c)
        if not doc:
            continue
        q = inits_of(out)
        c.check(q["x_zero_point"].dtype == dt and np.isclose(q["x_scale"], scale, rtol=1e-5) and int(q["x_zero_point"]) == zp,
                f"activations {key}: scale {q['x_scale']} (want {scale}), zero point {q['x_zero_point']} {q['x_zero_point'].dtype} (want {zp})")
        m = onnx.load(out)
        opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")][0]
        c.check(opset == (21 if "16" in key[0] else 17), f"activations {key}: opset {opset}")
        checked(c, out, f"activations {key}")
    # dynamic: per-tensor, uint8 and 7-bit weights of MatMulInteger (w1 [K, N] as it is)
    dyn = [src, "-o", out, "--int8", "--dynamic", "--min-elements", "256", "--eval-sets", "0"]
    if quantize(dyn + ["--per-tensor", "--reduce-range"], "dynamic per-tensor 7-bit", c):
        q = inits_of(out)
        # (symmetric int8 weights: the per-row form's MatMulInteger takes no b_zero_point)
        c.check(q["w1_scale"].shape == () and np.isclose(q["w1_scale"], np.abs(w["w1"]).max() / 64, rtol=1e-6)
                and "w1_zero_point" not in q and np.abs(q["w1_quantized"]).max() == 64,
                f"dynamic --per-tensor --reduce-range: w1 scale {q['w1_scale']}")
        checked(c, out, "dynamic per-tensor")
    if quantize(dyn + ["--weight-type", "uint8"], "dynamic uint8", c):
        q = inits_of(out)
        lo, hi = np.minimum(w["w2t"].T.min(axis=0), 0), np.maximum(w["w2t"].T.max(axis=0), 0)
        s = ((hi - lo) / 255).astype(np.float32)
        c.check(q["w2t_quantized"].shape == (128, 96) and q["w2t_quantized"].dtype == np.uint8 and np.allclose(q["w2t_scale"], s, rtol=1e-6)
                and np.array_equal(q["w2t_zero_point"], np.clip(np.round(-lo / s), 0, 255).astype(np.uint8)),
                "dynamic uint8: the transposed Gemm weight per column, asymmetric")
        checked(c, out, "dynamic uint8")
    # --op-types and --exclude: what they leave out stays float and is listed
    src2 = os.path.join(tmp, "mlp_ops.onnx")
    onnx.save(mlp(opset=17), src2)
    for args, float_nodes, quantized in ((["--op-types", "Gemm"], {"m3", "m3b", "h1"}, 1),
                                         (["--exclude", "MatMul"], {"m3", "m3b", "h1"}, 1),
                                         (["--exclude", "gemm_node,mm_b"], {"g2", "m3b"}, 2)):
        m = mlp(opset=17)
        for n in m.graph.node:  # names to exclude by
            n.name = {"g2": "gemm_node", "m3b": "mm_b"}.get(n.output[0], n.output[0] + "_node")
        onnx.save(m, src2)
        doc = quantize([src2, "-o", out, "--int8", "--static", "--calibration", calib, "--min-elements", "256",
                        "--eval-sets", "0"] + args, f"selection {args}", c)
        if not doc:
            continue
        g = onnx.load(out).graph
        producers = {o: n.op_type for n in g.node for o in n.output}
        for n in g.node:
            if n.op_type in ("MatMul", "Gemm") and n.output[0] in float_nodes:
                c.check(producers.get(n.input[0]) != "DequantizeLinear" and producers.get(n.input[1]) != "DequantizeLinear",
                        f"{args}: node {n.name} stays float")
        c.check(doc["nodes_quantized"] == quantized, f"{args}: {doc['nodes_quantized']} quantized, want {quantized}")
        skipped = " ".join(doc["skipped"])
        c.check(("excluded" in skipped) if "--exclude" in args else ("not in --op-types" in skipped), f"{args}: skipped {skipped}")
        c.check(all(i.type.tensor_type.elem_type == TensorProto.FLOAT for i in list(g.input) + list(g.output)),
                "graph inputs and outputs stay float (--keep-io-float)")
    # a NaN weight quantizes to the zero point (casting NaN to an integer is undefined behaviour)
    m = mlp(opset=17)
    w1 = numpy_helper.to_array(m.graph.initializer[0]).copy()
    w1[5, 7] = np.nan
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w1, "w1"))
    nan_src = os.path.join(tmp, "mlp_nan.onnx")
    onnx.save(m, nan_src)
    for mode in (["--dynamic"], ["--static", "--calibration", calib]):
        if quantize([nan_src, "-o", out, "--int8", "--min-elements", "256", "--eval-sets", "0"] + mode, f"NaN weight {mode[0]}", c):
            q = inits_of(out)
            c.check(q["w1_quantized"][5, 7] == 0 and np.isclose(q["w1_scale"][7], np.nanmax(np.abs(w1[:, 7])) / 127, rtol=1e-6),
                    f"NaN weight {mode[0]}: quantized to 0, the column's scale from the other values")
            checked(c, out, f"NaN weight {mode[0]}")
    r = run(["quantize", src2, "-o", out, "--int8", "--dynamic", "--exclude", "no_such_node"])
    c.check(r.returncode == 0 and "no_such_node" in r.stderr, f"--exclude of an unknown name warns: {r.stderr}")


def bias_correction_checks(c, tmp):
    """--static (default bias correction): each bias takes back the mean shift its int8 weight
    causes, b - (dequantized W - W) . E[x] with E[x] per input channel over the calibration samples
    (numpy here): a MatMul's Add bias (float), a Gemm's (int32 after it), a depthwise Conv's (groups)
    and a 1x1 Conv's; --no-bias-correction leaves them as they are."""
    rng = np.random.default_rng(17)
    src, out = os.path.join(tmp, "bc_mlp.onnx"), os.path.join(tmp, "bc_mlp.int8.onnx")
    onnx.save(mlp(opset=17), src)
    w = {t.name: numpy_helper.to_array(t) for t in mlp().graph.initializer}
    x = (rng.standard_normal((3, 4, 64)) + 0.5).astype(np.float32)  # a mean away from 0
    calib = os.path.join(tmp, "bc_mlp.npz")
    np.savez(calib, x=x, other=rng.standard_normal((3, 96, 8)).astype(np.float32))

    def deq(t, axis):  # int8 symmetric per output channel, as quantize writes it
        r = np.abs(t).max(axis=1 - axis, keepdims=True)
        s = np.where(r > 0, r / 127, 1).astype(np.float32)
        return (np.clip(np.round(t / s), -127, 127) * s).astype(np.float32)

    analytic = ["--bias-correction", "analytic", "--weight-rounding", "nearest"]
    doc = quantize([src, "-o", out, "--int8", "--static", "--calibration", calib, "--min-elements", "256", "--eval-sets", "0"] + analytic,
                   "bias correction mlp", c)
    if doc:
        q = inits_of(out)
        c.check(doc.get("biases_corrected") == 2, f"two biases corrected (MatMul+Add, Gemm): {doc.get('biases_corrected')}")
        mx = x.reshape(-1, 64).mean(0)
        want1 = w["b1"] - (deq(w["w1"], 1) - w["w1"]).T @ mx  # W [K, N]
        c.check(np.allclose(q["b1"], want1, rtol=1e-5, atol=1e-6), f"b1 corrected: {q['b1'][:3]} want {want1[:3]}")
        r1 = np.maximum(x.reshape(-1, 64) @ w["w1"] + w["b1"], 0)  # the float model's Gemm input
        want2 = w["b2"] - (deq(w["w2t"], 0) - w["w2t"]) @ r1.mean(0)  # W [N, K] (transB)
        got2 = q["b2_quantized"].astype(np.float64) * q["b2_scale"]
        c.check(np.all(np.abs(got2 - want2) <= q["b2_scale"] * 0.5 + 1e-7), f"b2 corrected (int32): {got2[:3]} want {want2[:3]}")
        checked(c, out, "bias correction mlp")
    if quantize([src, "-o", out, "--int8", "--static", "--calibration", calib, "--min-elements", "256", "--eval-sets", "0",
                 "--no-bias-correction", "--json"], "no bias correction", c):
        q = inits_of(out)
        c.check(np.array_equal(q["b1"], w["b1"]), "--no-bias-correction: b1 as it was")
    # a depthwise (group 4) 3x3 Conv and a 1x1 Conv
    k = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    k2 = rng.standard_normal((3, 4, 1, 1)).astype(np.float32)
    kb, k2b = rng.standard_normal(4).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "k", "kb"], ["d"], group=4, pads=[1, 1, 1, 1]), helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Conv", ["r", "k2", "k2b"], ["y"])]
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [numpy_helper.from_array(v, n) for v, n in ((k, "k"), (k2, "k2"), (kb, "kb"), (k2b, "k2b"))])
    src = os.path.join(tmp, "bc_dw.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), src)
    xs = (rng.standard_normal((5, 1, 4, 6, 6)) + np.arange(4).reshape(1, 1, 4, 1, 1)).astype(np.float32)
    np.savez(os.path.join(tmp, "bc_dw.npz"), x=xs)
    doc = quantize([src, "-o", out, "--int8", "--static", "--calibration", os.path.join(tmp, "bc_dw.npz"), "--min-elements", "1",
                    "--eval-sets", "0"] + analytic, "bias correction convs", c)
    if doc:
        q = inits_of(out)
        c.check(doc.get("biases_corrected") == 2, f"two Conv biases corrected: {doc.get('biases_corrected')}")

        def deq4(t):
            r = np.abs(t).reshape(t.shape[0], -1).max(1).reshape(-1, 1, 1, 1)
            s = np.where(r > 0, r / 127, 1).astype(np.float32)
            return (np.clip(np.round(t / s), -127, 127) * s).astype(np.float32)
        mean_x = xs.mean(axis=(0, 1, 3, 4))
        want_kb = kb - (deq4(k) - k).reshape(4, 9).sum(1) * mean_x  # channel m reads input channel m
        import onnxruntime as ort_
        sess = ort_session(src, providers=["CPUExecutionProvider"])
        m = onnx.load(src)
        m.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
        rr = np.concatenate([ort_session(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(["r"], {"x": s})[0]
                             for s in xs])
        del sess
        want_k2b = k2b - (deq4(k2) - k2).reshape(3, 4) @ rr.mean(axis=(0, 2, 3))
        for name, want in (("kb", want_kb), ("k2b", want_k2b)):
            got = q[f"{name}_quantized"].astype(np.float64) * q[f"{name}_scale"]
            c.check(np.all(np.abs(got - want) <= q[f"{name}_scale"] * 0.5 + 1e-6), f"{name} corrected: {got} want {want}")
        checked(c, out, "bias correction convs")


def ort_sweep(c, tmp):
    """--target ort: every combination it writes runs in ONNX Runtime, and ours match it; --target
    trt: QDQ only, int8 symmetric, per channel, float bias."""
    rng = np.random.default_rng(21)
    src = os.path.join(tmp, "mlp_s.onnx")
    onnx.save(mlp(opset=17), src)
    mlp_calib = os.path.join(tmp, "mlp_s.npz")
    np.savez(mlp_calib, x=rng.standard_normal((3, 4, 64)).astype(np.float32), other=rng.standard_normal((3, 96, 8)).astype(np.float32))
    cnn_calib = os.path.join(tmp, "cnn_s.npz")
    np.savez(cnn_calib, input=rng.random((3, 2, 1, 28, 28)).astype(np.float32))
    models = {src: (mlp_calib, {"x": rng.standard_normal((5, 64)).astype(np.float32), "other": rng.standard_normal((96, 8)).astype(np.float32)}),
              SMALL: (cnn_calib, {"input": rng.random((2, 1, 28, 28)).astype(np.float32)})}
    out = os.path.join(tmp, "sweep.onnx")
    written = 0
    for model, (calib, feeds) in models.items():
        tag = os.path.basename(model)
        combos = [["--dynamic", "--weight-type", wt, gran] + rr + (["--op-types", "Conv,Gemm"] if model == SMALL else [])
                  for wt, gran, rr in itertools.product(["int8", "uint8"], ["--per-channel", "--per-tensor"], [[], ["--reduce-range"]])]
        combos += [["--static", "--calibration", calib, "--weight-type", wt, "--activation-type", at, gran, "--format", fm] + sym
                   for wt, at, gran, fm, sym in itertools.product(["int8", "uint8"], ["uint8", "int8", "uint16", "int16"],
                                                                  ["--per-channel", "--per-tensor"], ["qdq", "qoperator"],
                                                                  [[], ["--symmetric-activations"]])]
        combos += [["--static", "--calibration", calib, "--weight-type", wt, "--reduce-range", "--format", fm]
                   for wt, fm in itertools.product(["int8", "uint8"], ["qdq", "qoperator"])]
        for combo in combos:
            args = [model, "-o", out, "--int8", "--target", "ort", "--eval-sets", "0"] + combo
            r = run(["quantize"] + args)
            if r.returncode != 0:
                # refused combinations name the reason: 16-bit QOperator, or int8 x uint8 QOperator
                c.check(r.returncode == 2 and ("qlinear" in r.stderr.lower()), f"--target ort {combo}: {r.stderr}")
                continue
            written += 1
            label = f"{tag} --target ort {' '.join(combo[2:] if combo[0] == '--static' else combo)}"
            if checked(c, out, label):
                ours_vs_ort(c, out, feeds, tmp, label)
        # TensorRT
        doc = quantize([model, "-o", out, "--int8", "--static", "--calibration", calib, "--target", "trt", "--eval-sets", "0"],
                       f"{tag} trt", c)
        if doc:
            m = onnx.load(out)
            q = inits_of(out)
            ops = [n.op_type for n in m.graph.node]
            zps = [q[n.input[2]] for n in m.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
            c.check("DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops and "ConvInteger" not in ops, f"trt ops: {ops}")
            c.check(all(z.dtype == np.int8 and not z.any() for z in zps), "trt: every zero point int8 and 0 (symmetric)")
            wdq = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in q and q[n.input[0]].ndim >= 2]
            c.check(wdq and all(any(a.name == "axis" for a in n.attribute) and q[n.input[1]].ndim == 1 for n in wdq),
                    "trt: weights per channel")
            c.check(not any(t.dtype == np.int32 for t in q.values()), "trt: biases stay float")
            checked(c, out, f"{tag} trt")
            ours_vs_ort(c, out, feeds, tmp, f"{tag} trt")
    c.check(written >= 100, f"--target ort wrote {written} models")
    for args, text in ((["--int8", "--dynamic", "--target", "trt"], "DynamicQuantizeLinear"),
                       (["--int8", "--static", "--calibration", mlp_calib, "--target", "trt", "--per-tensor"], "per channel"),
                       (["--int8", "--static", "--calibration", mlp_calib, "--target", "trt", "--activation-type", "uint8"], "int8"),
                       (["--int8", "--dynamic", "--activation-type", "int8"], "uint8 only"),
                       (["--int8", "--dynamic", "--symmetric-activations"], "--static"),
                       (["--int8", "--dynamic", "--op-types", "Relu"], "Relu"),
                       (["--int4", "--per-tensor"], "apply to --int8"),
                       (["--int8", "--dynamic", "--smooth-quant"], "--calibration"),
                       (["--int8", "--dynamic", "--calibration", mlp_calib], "--smooth-quant"),
                       (["--int8", "--static", "--calibration", mlp_calib, "--smooth-quant", "--alpha", "1.5"], "alpha"),
                       (["--int8", "--static", "--calibration", mlp_calib, "--format", "qoperator", "--activation-type", "int16"], "8-bit"),
                       (["--int8", "--dynamic", "--per-channel", "--per-tensor"], "excludes")):
        r = run(["quantize", src, "-o", out] + args)
        c.check(r.returncode == 2 and r.stderr.startswith("onnxtool: error:") and text in r.stderr and r.stderr.count("\n") <= 2,
                f"quantize {args}: exit {r.returncode}: {r.stderr}")


def outlier_model(opset=17):
    """x [B, T, 64] -> LayerNormalization (gamma with three channels 30-60x the others: the outlier
    channels of transformer activations) -> MatMul 64x64 (+ bias Add) -> Relu -> MatMul 64x32."""
    rng = np.random.default_rng(5)
    k, n = 64, 32
    gamma = np.ones(k, np.float32)
    gamma[[3, 17, 40]] = [40.0, -60.0, 30.0]
    beta = (0.1 * rng.standard_normal(k)).astype(np.float32)
    inits = [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(beta, "beta"),
             numpy_helper.from_array((rng.standard_normal((k, k)) / 8).astype(np.float32), "w1"),
             numpy_helper.from_array((0.1 * rng.standard_normal(k)).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((k, n)) / 8).astype(np.float32), "w2")]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1),
             helper.make_node("MatMul", ["ln", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "outliers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "T", n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def smooth_checks(c, tmp):
    """--smooth-quant on an outlier-heavy model: folded into the LayerNorm, a Mul before the
    second MatMul, and a smaller error than plain static quantization (figures printed)."""
    src = os.path.join(tmp, "outliers.onnx")
    onnx.save(outlier_model(), src)
    rng = np.random.default_rng(8)
    calib = os.path.join(tmp, "outliers.npz")
    np.savez(calib, x=rng.standard_normal((4, 2, 16, 64)).astype(np.float32))
    held = {"x": rng.standard_normal((4, 16, 64)).astype(np.float32)}
    want = ort_session(src, providers=["CPUExecutionProvider"]).run(None, held)[0]
    errs = {}
    for label, extra in (("plain", []), ("smooth", ["--smooth-quant"]), ("smooth alpha 0.8", ["--smooth-quant", "--alpha", "0.8"])):
        out = os.path.join(tmp, f"outliers_{label.replace(' ', '_')}.onnx")
        doc = quantize([src, "-o", out, "--int8", "--static", "--calibration", calib, "--per-tensor"] + extra, label, c)
        if not doc or not checked(c, out, label):
            continue
        got = ours_vs_ort(c, out, held, tmp, f"smooth-quant {label}")
        if got is None:
            continue
        got = got[0]
        errs[label] = (float(np.abs(got - want).max()), cosine(want, got), float(np.sqrt(np.mean((got - want) ** 2))))
        if extra:
            sq = doc["smooth_quant"]
            c.check(sq["layers"] == 2 and sq["folded_into_layer_norm"] == 1 and sq["muls"] == 1, f"{label}: {sq}")
            ops = [n.op_type for n in onnx.load(out).graph.node]
            c.check(ops.count("Mul") == 1 and ops.count("LayerNormalization") == 1, f"{label}: ops {ops}")
    print("smooth-quant on the outlier model (held-out, vs float, per-tensor weights): " +
          ", ".join(f"{k}: max abs {v[0]:.4f}, rms {v[2]:.4f}, cosine {v[1]:.6f}" for k, v in errs.items()))
    if c.check("plain" in errs and "smooth" in errs, f"errors: {errs}"):
        # (max abs alone is one element: a noisy figure; the rms and the cosine are the whole output)
        c.check(errs["smooth"][2] < 0.5 * errs["plain"][2] and 1 - errs["smooth"][1] < (1 - errs["plain"][1]) / 3
                and errs["smooth"][0] < errs["plain"][0], f"smooth-quant at least halves the rms error: {errs}")


def dynamic_smooth_checks(c, tmp):
    """--dynamic --smooth-quant --calibration: only activations a LayerNormalization writes are
    smoothed (there transformer outliers sit in fixed channels; the second MatMul's Relu input is
    left alone), the 1/s folds into gamma/beta, and the error of run-time per-tensor activation
    quantization (--activation-scales tensor) drops: measured against the float model in ONNX
    Runtime on held-out inputs."""
    src = os.path.join(tmp, "outliers_dyn.onnx")
    onnx.save(outlier_model(), src)
    rng = np.random.default_rng(9)
    calib = os.path.join(tmp, "outliers_dyn.npz")
    np.savez(calib, x=rng.standard_normal((4, 2, 16, 64)).astype(np.float32))
    held = {"x": rng.standard_normal((4, 16, 64)).astype(np.float32)}
    want = ort_session(src, providers=["CPUExecutionProvider"]).run(None, held)[0]
    errs = {}
    for label, extra in (("plain", []), ("smooth", ["--smooth-quant", "--calibration", calib])):
        out = os.path.join(tmp, f"outliers_dyn_{label}.onnx")
        doc = quantize([src, "-o", out, "--int8", "--dynamic", "--activation-scales", "tensor"] + extra, f"dynamic {label}", c)
        if not doc or not checked(c, out, f"dynamic {label}"):
            continue
        m = onnx.load(out)
        ops = [n.op_type for n in m.graph.node]
        c.check(ops.count("MatMulInteger") == 2 and ops.count("DynamicQuantizeLinear") == 2, f"dynamic {label}: ops {ops}")
        got = ours_vs_ort(c, out, held, tmp, f"dynamic {label}")
        if got is None:
            continue
        got = got[0]
        errs[label] = (cosine(want, got), float(np.sqrt(np.mean((got - want) ** 2))))
        if extra:
            sq = doc["smooth_quant"]
            c.check(sq["enabled"] and sq["layers"] == 1 and sq["folded_into_layer_norm"] == 1 and sq["muls"] == 0,
                    f"dynamic smooth: only the LayerNormalization's reader, folded: {sq}")
            q = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
            ln = next(n for n in m.graph.node if n.op_type == "LayerNormalization")
            gamma = q[ln.input[1]]
            # the outlier channels (40, -60, 30 among ones) come out flattened: s_j grows with max|X_j|
            c.check(np.abs(gamma).max() / np.median(np.abs(gamma)) < 12, f"gamma smoothed: {gamma[[3, 17, 40]]}")
    print("dynamic smooth-quant on the outlier model (held-out, vs float): " +
          ", ".join(f"{k}: rms {v[1]:.4f}, cosine {v[0]:.6f}" for k, v in errs.items()))
    if c.check("plain" in errs and "smooth" in errs, f"errors: {errs}"):
        c.check(errs["smooth"][1] < 0.5 * errs["plain"][1] and 1 - errs["smooth"][0] < (1 - errs["plain"][0]) / 3,
                f"dynamic smooth-quant at least halves the rms error: {errs}")


def control_input_checks(c, tmp):
    """-i files are held in every random evaluation set: a control input (here the target shape
    of a Reshape; a sample rate in an audio model) with one valid value fails on random values."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Reshape", ["y", "shape"], ["z"])],
                          "control", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64]),
                                      helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, "M", 16])], [w])
    src = os.path.join(tmp, "control.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), src)
    shape = os.path.join(tmp, "shape.npy")
    np.save(shape, np.array([2, -1, 16], np.int64))
    x = os.path.join(tmp, "x.npy")
    np.save(x, rng.standard_normal((4, 64)).astype(np.float32))
    for args, sets in ((["-i", f"shape={shape}", "--eval-sets", "3"], 3), (["-i", f"shape={shape}", "-i", f"x={x}"], 1)):
        rep = quantize([src, "-o", os.path.join(tmp, "control_q.onnx"), "--int8", "--dynamic", "--shape", "x=4,64"] + args,
                       f"control input {args}", c)
        if rep is not None:
            ev = rep.get("evaluation", {})
            c.check(ev.get("input_sets") == sets and ev["outputs"][0]["cosine_similarity"] > 0.99,
                    f"control input {args}: {sets} evaluation set(s) expected: {ev}")


def old_opset_checks(c, tmp):
    """A model below the opset a form needs (tf2onnx's and old exports are opset 9) is converted up
    first, as ONNX Runtime's quantizer does, not refused: --static to 13 (per-channel
    DequantizeLinear), --dynamic to 11 (DynamicQuantizeLinear, MatMulInteger)."""
    rng = np.random.default_rng(9)
    src = os.path.join(tmp, "mlp_op9.onnx")
    onnx.save(mlp(opset=9), src)
    calib = os.path.join(tmp, "op9_calib.npz")
    np.savez(calib, x=rng.standard_normal((4, 1, 64)).astype(np.float32),
             other=rng.standard_normal((4, 96, 8)).astype(np.float32))
    feeds = {"x": rng.standard_normal((3, 64)).astype(np.float32), "other": rng.standard_normal((96, 8)).astype(np.float32)}
    for mode, want in ((["--static", "--calibration", calib], 13), (["--dynamic"], 11)):
        dst = os.path.join(tmp, f"mlp_op9_{mode[0][2:]}.onnx")
        rep = quantize([src, "-o", dst, "--int8"] + mode, f"opset 9 {mode[0]}", c)
        if rep is None or not checked(c, dst, f"opset 9 {mode[0]}"):
            continue
        got = {o.domain or "": o.version for o in onnx.load(dst).opset_import}.get("")
        c.check(got == want, f"opset 9 {mode[0]}: written at opset {got}, expected {want}")
        c.check(rep.get("nodes_quantized", 0) > 0, f"opset 9 {mode[0]}: nothing quantized: {rep}")
        ours_vs_ort(c, dst, feeds, tmp, f"opset 9 {mode[0]}")


def cnn_model():
    """x [1, 4, 12, 12] -> Conv 3x3 (4 -> 8) -> Relu -> depthwise Conv 3x3 -> Clip(0, 6) -> Conv 1x1
    (8 -> 6) -> y: the MobileNet pattern, every Conv with a bias."""
    rng = np.random.default_rng(23)
    w = {"wa": rng.standard_normal((8, 4, 3, 3)) * 0.3, "ba": rng.standard_normal(8) * 0.1,
         "wb": rng.standard_normal((8, 1, 3, 3)) * 0.5, "bb": rng.standard_normal(8) * 0.1,
         "wc": rng.standard_normal((6, 8, 1, 1)) * 0.4, "bc": rng.standard_normal(6) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wb", "bb"], ["b"], group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["b", "lo", "hi"], ["bc6"]), helper.make_node("Conv", ["bc6", "wc", "bc"], ["y"])]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()]
    inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32), "hi")]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 12, 12])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def smooth_images(rng, n):
    """Images whose neighbouring pixels correlate (as photos' do): a few plane waves per channel."""
    yy, xx = np.mgrid[0:12, 0:12]
    out = np.empty((n, 1, 4, 12, 12), np.float32)
    for i in range(n):
        for ch in range(4):
            f1, f2, p1, p2 = rng.uniform(0, 1, 4) * [1, 1, 6.28, 6.28]
            out[i, 0, ch] = np.sin(f1 * yy + p1) + np.cos(f2 * xx + p2) + 0.05 * rng.standard_normal((12, 12)) + 0.3 * ch
    return out


def conv_outputs(path, names, xs, optimize=False):
    """The named values of the model on each sample, in ONNX Runtime (unfused: QDQ exactly)."""
    m = onnx.load(path)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort_session(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = [s.run(names, {"x": x}) for x in xs]
    return {n: np.concatenate([o[i] for o in outs]) for i, n in enumerate(names)}


def dequantized(path, name):
    """The float weight a quantized model's DequantizeLinear gives (int8 per output channel)."""
    q = inits_of(path)
    s = q[name + "_scale"].reshape(-1, *([1] * (q[name + "_quantized"].ndim - 1)))
    return q[name + "_quantized"].astype(np.float64) * s, q[name + "_scale"], q[name + "_quantized"]


def int4_rounding_checks(c, tmp, rng):
    """--int4 --calibration: GPTQ on the blocks' scales and zero points (the same as nearest
    rounding's, codes differ), each layer's output on the calibration inputs closer to the float
    one than with nearest rounding (ONNX Runtime); without --calibration, or with --weight-rounding
    nearest, the codes of nearest rounding."""
    w1 = (rng.standard_normal((64, 48)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((32, 48)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["hr"]),
             helper.make_node("Gemm", ["hr", "w2"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "int4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    src = os.path.join(tmp, "int4_mlp.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), src)
    mix = rng.standard_normal((6, 64))  # correlated inputs: 6 latent factors plus a little noise
    xs = np.stack([rng.standard_normal((8, 6)) @ mix + 0.05 * rng.standard_normal((8, 64)) for _ in range(64)]).astype(np.float32)
    calib = os.path.join(tmp, "int4_calib.npz")
    np.savez(calib, x=xs)
    near, gq = os.path.join(tmp, "int4_near.onnx"), os.path.join(tmp, "int4_gptq.onnx")
    dn = quantize([src, "-o", near, "--int4", "--eval-sets", "0"], "int4 nearest", c)
    dg = quantize([src, "-o", gq, "--int4", "--calibration", calib, "--eval-sets", "0"], "int4 gptq", c)
    if not (dn and dg and checked(c, gq, "int4 gptq")):
        return
    c.check(dg["weight_rounding"]["method"] == "gptq" and dg["weight_rounding"]["layers"] == 2 and dn["weight_rounding"]["method"] == "nearest",
            f"int4: {dn['weight_rounding']} / {dg['weight_rounding']}")
    qn, qg = inits_of(near), inits_of(gq)
    scales = [k for k in qn if "scale" in k]
    c.check(len(scales) == 2 and all(np.array_equal(qn[k], qg[k]) for k in scales), f"int4 GPTQ keeps the scales: {scales}")
    codes = [k for k in qn if k.endswith("_uint4")]
    c.check(len(codes) == 2 and all(not np.array_equal(qn[k].astype(np.int8), qg[k].astype(np.int8)) for k in codes),
            f"int4 GPTQ moved some codes: {codes}")

    def outs(path, name):
        m = onnx.load(path)
        if name not in {o.name for o in m.graph.output}:
            m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
        sess = ort_session(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return np.concatenate([sess.run([name], {"x": x})[0] for x in xs])
    # The MatMul's output (float input) and the Gemm's on the float model's hidden layer: per layer,
    # GPTQ's weights against nearest rounding's.
    h_f, y_f = outs(src, "h"), outs(src, "y")
    e_h = [float(((outs(p, "h") - h_f) ** 2).sum()) for p in (near, gq)]
    c.check(e_h[1] < 0.8 * e_h[0], f"int4 MatMul output error: GPTQ {e_h[1]:.4g} vs nearest {e_h[0]:.4g}")
    e_y = [float(((outs(p, "y") - y_f) ** 2).sum()) for p in (near, gq)]
    c.check(e_y[1] < e_y[0], f"int4 model output error: GPTQ {e_y[1]:.4g} vs nearest {e_y[0]:.4g}")
    ours_vs_ort(c, gq, {"x": xs[0]}, tmp, "int4 gptq")
    r = run(["quantize", src, "-o", os.path.join(tmp, "bad4.onnx"), "--int4", "--weight-rounding", "gptq"])
    c.check(r.returncode == 2 and "--calibration" in r.stderr, f"--int4 --weight-rounding gptq without data: {r.returncode} {r.stderr.strip()[:120]}")
    dnn = quantize([src, "-o", os.path.join(tmp, "int4_nn.onnx"), "--int4", "--calibration", calib, "--weight-rounding", "nearest",
                    "--eval-sets", "0"], "int4 nearest with data", c)
    if dnn:
        q2 = inits_of(os.path.join(tmp, "int4_nn.onnx"))
        c.check(all(np.array_equal(qn[k].astype(np.int8), q2[k].astype(np.int8)) for k in codes), "--weight-rounding nearest: nearest rounding's codes")


def rounding_checks(c, tmp):
    """--weight-rounding gptq keeps nearest rounding's scales, changes integers, and each layer's
    output on the calibration inputs (ONNX Runtime, the float model's inputs, the dequantized
    weight) moves less from the float output than with nearest rounding; --bias-correction
    empirical leaves each layer's per-channel output mean in the quantized model (ONNX Runtime,
    unfused) within a bias step or so of the float model's, much closer than the weight-only
    correction does. Both write models that pass onnx.checker and that ONNX Runtime and our
    executors run alike."""
    rng = np.random.default_rng(5)
    src = os.path.join(tmp, "cnn.onnx")
    onnx.save(cnn_model(), src)
    xs = smooth_images(rng, 16)
    calib = os.path.join(tmp, "cnn_calib.npz")
    np.savez(calib, x=xs)
    base = [src, "--int8", "--static", "--calibration", calib, "--min-elements", "1", "--eval-sets", "0"]
    near, gptq = os.path.join(tmp, "cnn_near.onnx"), os.path.join(tmp, "cnn_gptq.onnx")
    dn = quantize(base + ["-o", near, "--weight-rounding", "nearest", "--bias-correction", "analytic"], "nearest", c)
    dg = quantize(base + ["-o", gptq, "--bias-correction", "analytic"], "gptq", c)
    if dn and dg:
        c.check(dg["weight_rounding"]["method"] == "gptq" and dg["weight_rounding"]["layers"] == 3,
                f"gptq by default, three layers rounded: {dg['weight_rounding']}")
        c.check(dn["weight_rounding"]["method"] == "nearest", f"nearest when asked: {dn['weight_rounding']}")
        checked(c, gptq, "gptq")
        float_in = conv_outputs(src, ["x", "ar", "bc6"], xs)
        for w, b, inp, group in (("wa", "ba", "x", 1), ("wb", "bb", "ar", 8), ("wc", "bc", "bc6", 1)):
            wn, sn, qn = dequantized(near, w)
            wg, sg, qg = dequantized(gptq, w)
            c.check(np.array_equal(sn, sg), f"{w}: GPTQ keeps nearest rounding's scales")
            c.check(np.any(qn != qg) and np.abs(qg).max() <= 127, f"{w}: GPTQ moved some integers, within [-127, 127]")
            wf = numpy_helper.to_array({t.name: t for t in cnn_model().graph.initializer}[w]).astype(np.float64)
            pads = [0, 0, 0, 0] if wf.shape[2] == 1 else [1, 1, 1, 1]

            def layer_err(wq):
                node = helper.make_node("Conv", ["i", "w"], ["o"], group=group, pads=pads)
                g = helper.make_graph([node], "l", [helper.make_tensor_value_info("i", TensorProto.FLOAT, None)],
                                      [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
                                      [numpy_helper.from_array(wq.astype(np.float32), "w")])
                sess = ort_session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString(),
                                            providers=["CPUExecutionProvider"])
                ref = ort_session(helper.make_model(helper.make_graph([node], "l", g.input, g.output,
                                                                               [numpy_helper.from_array(wf.astype(np.float32), "w")]),
                                                             opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString(),
                                           providers=["CPUExecutionProvider"])
                xin = float_in[inp]
                return float(((sess.run(None, {"i": xin})[0].astype(np.float64) - ref.run(None, {"i": xin})[0]) ** 2).sum())
            en, eg = layer_err(wn), layer_err(wg)
            c.check(eg < 0.9 * en, f"{w}: GPTQ output error {eg:.4g} vs nearest {en:.4g}")
        ours_vs_ort(c, gptq, {"x": xs[0]}, tmp, "gptq")
    emp = os.path.join(tmp, "cnn_emp.onnx")
    de = quantize(base + ["-o", emp, "--weight-rounding", "nearest"], "empirical", c)
    if de and dn:
        c.check(de["bias_correction"] == {"method": "empirical", "empirical_layers": 3}, f"empirical by default: {de['bias_correction']}")
        checked(c, emp, "empirical")
        names = ["a", "b", "y"]
        fl = conv_outputs(src, names, xs)
        for label, path in (("analytic", near), ("empirical", emp)):
            q = conv_outputs(path, names, xs)
            shift = {n: np.abs(q[n].mean(axis=(0, 2, 3)) - fl[n].mean(axis=(0, 2, 3))).max() for n in names}
            if label == "analytic":
                analytic = shift
                continue
            for n in names:
                step = float(np.abs(fl[n]).max()) / 255
                c.check(shift[n] <= 0.05 * step + 1e-4 or shift[n] < 0.25 * analytic[n],
                        f"empirical: '{n}' mean shift {shift[n]:.3g} (analytic {analytic[n]:.3g}, an output step {step:.3g})")
        ours_vs_ort(c, emp, {"x": xs[1]}, tmp, "empirical")
    # Biases the way exporters write them: one all-zero bias shared by two Convs through an
    # Identity (deduplicated constants), and a Conv with none: each gets its own, corrected.
    rs = np.random.default_rng(8)
    wa, wb, wc = (rs.standard_normal(s_).astype(np.float32) * 0.4 for s_ in ((6, 4, 3, 3), (6, 6, 1, 1), (5, 6, 3, 3)))
    nodes = [helper.make_node("Identity", ["zero"], ["zb"]), helper.make_node("Conv", ["x", "wa", "zb"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]), helper.make_node("Conv", ["ar", "wb", "zb"], ["b"]),
             helper.make_node("Relu", ["b"], ["br"]), helper.make_node("Conv", ["br", "wc"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 12, 12])],
                          [numpy_helper.from_array(v, n) for v, n in ((wa, "wa"), (wb, "wb"), (wc, "wc"), (np.zeros(6, np.float32), "zero"))])
    shared = os.path.join(tmp, "shared_bias.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), shared)
    sq = os.path.join(tmp, "shared_bias.int8.onnx")
    ds = quantize([shared, "-o", sq, "--int8", "--static", "--calibration", calib, "--min-elements", "1", "--eval-sets", "0"],
                  "shared biases", c)
    if ds and checked(c, sq, "shared biases"):
        c.check(ds["bias_correction"]["empirical_layers"] == 3, f"shared biases: three layers corrected: {ds['bias_correction']}")
        m = onnx.load(sq)
        convs = [n for n in m.graph.node if n.op_type == "Conv"]
        c.check(all(len(n.input) == 3 for n in convs) and len({n.input[2] for n in convs}) == 3
                and not any(n.op_type == "Identity" for n in m.graph.node), "shared biases: each Conv its own bias, the Identity gone")
        fl, q = conv_outputs(shared, ["a", "b", "y"], xs), conv_outputs(sq, ["a", "b", "y"], xs)
        for n in ("a", "b", "y"):
            shift = float(np.abs(q[n].mean(axis=(0, 2, 3)) - fl[n].mean(axis=(0, 2, 3))).max())
            c.check(shift <= 0.05 * float(np.abs(fl[n]).max()) / 255 + 1e-4, f"shared biases: '{n}' mean shift {shift:.3g}")
        ours_vs_ort(c, sq, {"x": xs[2]}, tmp, "shared biases")
    int4_rounding_checks(c, tmp, rs)
    for args, label in ((["--dynamic", "--weight-rounding", "gptq"], "gptq with --dynamic"),
                        (["--dynamic", "--bias-correction", "empirical"], "--bias-correction with --dynamic"),
                        (["--static", "--calibration", calib, "--no-bias-correction", "--bias-correction", "empirical"],
                         "--no-bias-correction with --bias-correction empirical")):
        r = run(["quantize", src, "-o", os.path.join(tmp, "bad.onnx"), "--int8"] + args)
        c.check(r.returncode == 2 and "error" in r.stderr and not os.path.exists(os.path.join(tmp, "bad.onnx")),
                f"{label}: exit {r.returncode}, {r.stderr.strip()[:200]}")


def main():
    c = Checker("quantize options")
    with tempfile.TemporaryDirectory() as tmp:
        old_opset_checks(c, tmp)
        control_input_checks(c, tmp)
        hand_checks(c, tmp)
        bias_correction_checks(c, tmp)
        rounding_checks(c, tmp)
        smooth_checks(c, tmp)
        dynamic_smooth_checks(c, tmp)
        ort_sweep(c, tmp)
    c.finish()


if __name__ == "__main__":
    main()
