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
from onnxtool_test import Checker, ort_session, run  # noqa: E402


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


def cpu_matches_ort(c, model, feeds, tmp, label):
    """The cpu executor's int8 kernels (on every ISA path: ONNXTOOL_ISA) give ONNX Runtime's outputs
    on the same quantized model, within a small fraction of one activation quantization step."""
    want = ort_session(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    names = [o.name for o in onnx.load(model, load_external_data=False).graph.output]
    args = []
    for k, v in feeds.items():
        f = os.path.join(tmp, f"feed_{k}.npy")
        np.save(f, v)
        args += ["-i", f"{k}={f}"]
    for isa in ("", "avx2", "portable"):
        out = os.path.join(tmp, f"cpu_out_{isa or 'best'}")
        env = dict(os.environ, ONNXTOOL_ISA=isa)
        r = run(["run", model, "--executor", "cpu", "-O", out] + args, env=env)
        if not c.check(r.returncode == 0, f"{label}: run --executor cpu (ISA {isa or 'best'}): {r.stderr}"):
            continue
        for name, w in zip(names, want):
            got = np.load(os.path.join(out, name.replace("/", "_") + ".npy"))
            err = float(np.abs(got - w).max())
            tol = 1e-3 * float(np.abs(w).max()) + 1e-6
            c.check(got.shape == w.shape and err <= tol, f"{label} (ISA {isa or 'best'}): output {name} vs ONNX Runtime: max diff {err} > {tol}")


SMALL = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "models", "small_cnn.onnx")


def static_checks(c, tmp):
    rng = np.random.default_rng(11)
    npz = os.path.join(tmp, "calib.npz")
    np.savez(npz, input=rng.random((6, 2, 1, 28, 28)).astype(np.float32))  # 6 samples of [2,1,28,28]
    sets = os.path.join(tmp, "calib_sets")
    for s in range(3):  # the ONNX test-data layout
        d = os.path.join(sets, f"test_data_set_{s}")
        os.makedirs(d)
        t = numpy_helper.from_array(rng.random((1, 1, 28, 28)).astype(np.float32), "input")
        with open(os.path.join(d, "input_0.pb"), "wb") as f:
            f.write(t.SerializeToString())
    a = ort_session(SMALL, providers=["CPUExecutionProvider"])
    held_out = {"input": rng.random((16, 1, 28, 28)).astype(np.float32)}
    want = a.run(None, held_out)[0]
    for data, count in ((npz, 6), (sets, 3)):
        dst = os.path.join(tmp, "cnn.qdq.onnx")
        r = run(["quantize", SMALL, "-o", dst, "--int8", "--static", "--calibration", data, "--json"])
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        c.check(r.returncode == 0 and doc.get("mode") == "int8-static-qdq" and doc.get("nodes_quantized") == 3,
                f"--static --calibration {os.path.basename(data)}: {r.stderr} {doc.get('nodes_quantized')}")
        m = onnx.load(dst)
        try:
            onnx.checker.check_model(m, full_check=True)
            c.check(True, "")
        except Exception as e:  # noqa: BLE001
            c.check(False, f"static: onnx.checker: {e}")
        ops = [n.op_type for n in m.graph.node]
        c.check(ops.count("QuantizeLinear") == 3 and ops.count("DequantizeLinear") == 9,
                f"static: 3 Q/DQ pairs on activations, 3 DQ on weights, 3 on int32 biases: {ops}")
        per_axis = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and any(at.name == "axis" for at in n.attribute)]
        c.check(len(per_axis) == 6, "weights and biases dequantize per output channel")
        got = ort_session(dst, providers=["CPUExecutionProvider"]).run(None, held_out)[0]
        cpu_matches_ort(c, dst, held_out, tmp, f"static ({os.path.basename(data)})")
        cs = cosine(want, got)
        c.check(cs >= 0.999 and (want.argmax(1) == got.argmax(1)).mean() >= 0.9,
                f"static ({os.path.basename(data)}): held-out cosine {cs:.6f}")
        acc = doc.get("evaluation", {})
        c.check(acc.get("input_sets") == 2 and not acc.get("random") and acc["outputs"][0]["cosine_similarity"] >= 0.999,
                f"static: the report is on calibration samples: {acc}")
        # the optimizer keeps the QDQ structure
        opt = os.path.join(tmp, "cnn.qdq.opt.onnx")
        r = run(["optimize", dst, "-o", opt, "-O3", "--verify"])
        kept = [n.op_type for n in onnx.load(opt).graph.node] if r.returncode == 0 else []
        c.check(kept.count("DequantizeLinear") == 9 and kept.count("QuantizeLinear") == 3,
                f"optimize -O3 keeps the QDQ pairs: {r.stderr[-300:]}")
    # --format qoperator: QLinearConv with calibrated output scales (the Gemm with a bias stays QDQ)
    dst = os.path.join(tmp, "cnn.qop.onnx")
    r = run(["quantize", SMALL, "-o", dst, "--int8", "--static", "--calibration", npz, "--format", "qoperator", "--json"])
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    if c.check(r.returncode == 0 and doc.get("mode") == "int8-static-qoperator" and doc.get("qoperator_nodes") == 2,
               f"--format qoperator: {r.stderr} {doc.get('qoperator_nodes')}"):
        m = onnx.load(dst)
        try:
            onnx.checker.check_model(m, full_check=True)
            c.check(True, "")
        except Exception as e:  # noqa: BLE001
            c.check(False, f"qoperator: onnx.checker: {e}")
        ops = [n.op_type for n in m.graph.node]
        c.check(ops.count("QLinearConv") == 2 and "Conv" not in ops and ops.count("Gemm") == 1, f"qoperator ops: {ops}")
        used = {i for n in m.graph.node for i in n.input}
        c.check(all(t.name in used for t in m.graph.initializer), "no unused initializers left")
        c.check(len(doc.get("kept_qdq", [])) == 1 and "Gemm" in doc["kept_qdq"][0], f"kept QDQ: {doc.get('kept_qdq')}")
        got = ort_session(dst, providers=["CPUExecutionProvider"]).run(None, held_out)[0]
        c.check(cosine(want, got) >= 0.999 and (want.argmax(1) == got.argmax(1)).mean() >= 0.9,
                f"qoperator: held-out cosine to float {cosine(want, got):.6f}")
        # ours (reference and cpu executors) vs ONNX Runtime on the same QOperator model: requantized
        # outputs may differ by one rounding step, which stays far below 2% of the output
        np.save(os.path.join(tmp, "qop_in.npy"), held_out["input"])
        for ex in ("ref", "cpu"):
            out = os.path.join(tmp, f"qop_{ex}")
            r = run(["run", dst, "--executor", ex, "-i", "input=" + os.path.join(tmp, "qop_in.npy"), "-O", out])
            if c.check(r.returncode == 0, f"qoperator run --executor {ex}: {r.stderr}"):
                ours = np.load(os.path.join(out, "probs.npy"))
                err = float(np.abs(ours - got).max())
                c.check(err <= 0.02 * float(np.abs(got).max()) and cosine(ours, got) >= 0.9999,
                        f"qoperator {ex} vs ONNX Runtime: max diff {err}, cosine {cosine(ours, got)}")
    r = run(["quantize", SMALL, "-o", dst, "--int8", "--dynamic", "--format", "qoperator"])
    c.check(r.returncode == 2 and "applies to --static" in r.stderr, f"--dynamic --format qoperator: exit 2: {r.stderr}")
    r = run(["quantize", SMALL, "-o", dst, "--int8", "--static", "--calibration", npz, "--format", "qop"])
    c.check(r.returncode == 2, f"--format qop: exit 2: {r.stderr}")
    # percentile: one outlier no longer stretches the input's scale (minmax: 1000/255)
    spiky = rng.random((4, 1, 1, 28, 28)).astype(np.float32)
    spiky[0, 0, 0, 3, 3] = 1000.0
    np.savez(os.path.join(tmp, "spiky.npz"), input=spiky)
    scales = {}
    for method in ("minmax", "percentile:99.9", "mse"):
        out = os.path.join(tmp, f"spiky_{method[:3]}.onnx")
        r = run(["quantize", SMALL, "-o", out, "--int8", "--static", "--calibration", os.path.join(tmp, "spiky.npz"),
                 "--method", method, "--eval-sets", "0"])
        if c.check(r.returncode == 0, f"--method {method}: {r.stderr}"):
            inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
            scales[method] = float(inits["input_scale"])
    c.check(abs(scales.get("minmax", 0) - 1000 / 255) < 1e-3 and 0 < scales.get("percentile:99.9", 1) < 0.01,
            f"input scales: {scales}")
    # mse: with 3136 values, clipping the one at 1000 would cost more squared error than rounding
    # the rest to steps of 3.9 does: the full range stays (tests/unit/test_quant_calibration.cpp
    # has a case where clipping wins)
    c.check(abs(scales.get("mse", 0) - 1000 / 255) < 1e-3, f"mse input scale: {scales.get('mse')}")
    # entropy on a smooth (uniform) input keeps the whole range, and the model its accuracy
    out = os.path.join(tmp, "entropy.onnx")
    r = run(["quantize", SMALL, "-o", out, "--int8", "--static", "--calibration", npz, "--method", "entropy", "--json"])
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    if c.check(r.returncode == 0, f"--method entropy: {r.stderr}"):
        inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
        c.check(abs(float(inits["input_scale"]) * 255 - 1.0) < 0.05, f"entropy input range: {float(inits['input_scale']) * 255}")
        got = ort_session(out, providers=["CPUExecutionProvider"]).run(None, held_out)[0]
        c.check(cosine(want, got) >= 0.999, f"entropy: held-out cosine {cosine(want, got):.6f}")
    r = run(["quantize", SMALL, "-o", os.path.join(tmp, "x.onnx"), "--int8", "--static", "--calibration", npz,
             "--calibration-samples", "2", "--json"])
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check(doc.get("evaluation", {}).get("input_sets") == 2, f"--calibration-samples 2: {r.stderr}")
    for args, code in ((["--int8", "--static"], 2), (["--int8", "--static", "--dynamic"], 2),
                       (["--int8", "--static", "--calibration", os.path.join(tmp, "nope.npz")], 2),
                       (["--int8", "--dynamic", "--calibration", npz], 2),
                       (["--int8", "--static", "--calibration", npz, "--method", "kl"], 2),
                       (["--int8", "--static", "--calibration", npz, "--method", "percentile:20"], 2)):
        r = run(["quantize", SMALL, "-o", os.path.join(tmp, "y.onnx")] + args)
        c.check(r.returncode == code and r.stderr.startswith("onnxtool: error:"), f"quantize {args}: exit {r.returncode}: {r.stderr}")
    old = os.path.join(tmp, "mlp12.onnx")
    onnx.save(mlp(opset=12), old)
    np.savez(os.path.join(tmp, "mlp_calib.npz"), x=rng.standard_normal((2, 3, 64)).astype(np.float32),
             other=rng.standard_normal((2, 96, 8)).astype(np.float32))
    r = run(["quantize", old, "-o", os.path.join(tmp, "y.onnx"), "--int8", "--static", "--calibration",
             os.path.join(tmp, "mlp_calib.npz"), "-v"])
    # below opset 13 (per-channel DequantizeLinear): converted up first, as ONNX Runtime's quantizer does
    if c.check(r.returncode == 0 and "converted opset 12 -> 13" in r.stderr, f"static from opset 12: exit 0: {r.returncode} {r.stderr}"):
        got = {o.domain or "": o.version for o in onnx.load(os.path.join(tmp, "y.onnx")).opset_import}.get("")
        c.check(got == 13, f"static from opset 12: written at opset {got}")


def dequantized_w1(variant, inits):
    """w1 [64, 128] as the quantized model computes it (blocks of 16 along K = axis 0)."""
    if variant == "nbits":  # MatMulNBits: B [N=128, blocks=4, 8 bytes], scales [N*4], zero points [N*2]
        b = numpy_helper.to_array(inits["w1_q4"]).reshape(128, -1)
        codes = np.stack([b & 15, b >> 4], axis=-1).reshape(128, 64).astype(np.float32)  # [N, K]
        s = numpy_helper.to_array(inits["w1_scales"]).reshape(128, 4)
        z = numpy_helper.to_array(inits["w1_zero_points"]).reshape(128, 2)
        zp = np.stack([z & 15, z >> 4], axis=-1).reshape(128, 4).astype(np.float32)
        deq = (codes - np.repeat(zp, 16, axis=1)) * np.repeat(s, 16, axis=1)
        return deq.T, np.repeat(s, 16, axis=1).T, codes
    s = numpy_helper.to_array(inits["w1_scale"])  # [blocks, N]
    if variant == "symmetric":
        q = numpy_helper.to_array(inits["w1_int4"]).astype(np.float32)
        return q * np.repeat(s, 16, axis=0), np.repeat(s, 16, axis=0), q + 8
    q = numpy_helper.to_array(inits["w1_uint4"]).astype(np.float32)
    zp = numpy_helper.to_array(inits["w1_zero_point"]).astype(np.float32)
    return (q - np.repeat(zp, 16, axis=0)) * np.repeat(s, 16, axis=0), np.repeat(s, 16, axis=0), q


def int4_checks(c, tmp):
    """--int4: 4-bit weights in blocks of 16 along K: uint4 + zero point (default) or int4
    (--symmetric) behind a blocked DequantizeLinear at opset 21 (an opset-17 model is converted
    up), or com.microsoft MatMulNBits (--target ort). Each runs in ONNX Runtime, passes the
    checker, reproduces the weight within half a step and gives ONNX Runtime's outputs on our
    executors."""
    src17 = os.path.join(tmp, "mlp17.onnx")
    onnx.save(mlp(opset=17), src17)
    src21 = os.path.join(tmp, "mlp21.onnx")
    onnx.save(mlp(opset=21), src21)
    w = numpy_helper.to_array(onnx.load(src21).graph.initializer[0])  # w1 [64, 128]
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal((5, 64)).astype(np.float32), "other": rng.standard_normal((96, 8)).astype(np.float32)}
    want = ort_session(src21, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.save(os.path.join(tmp, "i4x.npy"), feeds["x"])
    np.save(os.path.join(tmp, "i4o.npy"), feeds["other"])
    for variant, src, extra, mode in (("default", src21, [], "int4-weight-only"),
                                      ("symmetric", src21, ["--symmetric"], "int4-weight-only"),
                                      ("from-opset-17", src17, [], "int4-weight-only"),
                                      ("nbits", src17, ["--target", "ort"], "int4-matmulnbits")):
        dst = os.path.join(tmp, f"mlp.int4.{variant}.onnx")
        r = run(["quantize", src, "-o", dst, "--int4", "--block-size", "16", "--min-elements", "256", "--json"] + extra)
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        if not c.check(r.returncode == 0 and doc.get("mode") == mode, f"--int4 {variant}: {r.stderr}"):
            continue
        c.check(doc.get("nodes_quantized") == 4 and doc.get("weights_quantized") == 3, f"int4 {variant}: 4 nodes, 3 weights: {doc}")
        c.check(doc["int8_weight_bytes"] <= 0.3 * doc["float_weight_bytes"],
                f"int4 {variant} weights <= 0.3x float: {doc['int8_weight_bytes']} / {doc['float_weight_bytes']}")
        m = onnx.load(dst)
        try:
            onnx.checker.check_model(m, full_check=True)
            c.check(True, "")
        except Exception as e:  # noqa: BLE001
            c.check(False, f"int4 {variant}: onnx.checker: {e}")
        opsets = {o.domain: o.version for o in m.opset_import}
        inits = {t.name: t for t in m.graph.initializer}
        c.check("w1" not in inits, f"int4 {variant}: the float w1 is gone: {sorted(inits)}")
        if variant == "nbits":
            nb = [n for n in m.graph.node if n.op_type == "MatMulNBits"]
            c.check(len(nb) == 4 and all(n.domain == "com.microsoft" for n in nb) and opsets.get("") == 17
                    and opsets.get("com.microsoft") == 1, f"four MatMulNBits at opset 17 + com.microsoft 1: {opsets}")
            c.check(not any(n.op_type == "Gemm" for n in m.graph.node) and any(n.op_type == "Add" and "b2" in n.input for n in m.graph.node),
                    "the Gemm's C became an Add after its MatMulNBits")
        else:
            dqs = [n for n in m.graph.node if n.op_type == "DequantizeLinear"]
            c.check(len(dqs) == 3 and all({a.name: a.i for a in n.attribute}.get("block_size") == 16 for n in dqs)
                    and opsets.get("") == 21, f"{variant}: three blocked DequantizeLinear (block_size 16) at opset 21: {opsets}")
            want_type = TensorProto.INT4 if variant == "symmetric" else TensorProto.UINT4
            suffix = "_int4" if variant == "symmetric" else "_uint4"
            c.check(sorted(t.name for t in inits.values() if t.data_type == want_type and t.name.endswith(suffix))
                    == sorted(x + suffix for x in ("w1", "w2t", "w3")), f"{variant}: three 4-bit weights of type {want_type}")
            c.check(len([t for t in inits.values() if t.name.endswith("_zero_point")]) == (0 if variant == "symmetric" else 3),
                    f"{variant}: zero points only when asymmetric")
        deq, step, codes = dequantized_w1(variant, inits)
        lo = 1 if variant == "symmetric" else 0
        c.check(codes.min() >= lo and codes.max() <= 15 and np.all(np.abs(deq - w) <= step / 2 + 1e-6),
                f"int4 {variant}: w1 within half a step of the float weight (max err / step "
                f"{np.max(np.abs(deq - w) / step):.3f})")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no MatMulNBits rewrite: the float DQ path
        got = ort_session(dst, so, providers=["CPUExecutionProvider"]).run(None, feeds)
        for name, a, b in zip(["dyn", "small"], want, got):
            # four int4 layers in a row on 64..128-wide random weights: a few % of error per layer
            c.check(cosine(a, b) >= 0.98, f"int4 {variant} output {name}: cosine to float {cosine(a, b):.5f}")
        for ex in ("ref", "cpu"):
            out = os.path.join(tmp, f"i4_{variant}_{ex}")
            r = run(["run", dst, "--executor", ex, "-i", "x=" + os.path.join(tmp, "i4x.npy"), "-i",
                     "other=" + os.path.join(tmp, "i4o.npy"), "-O", out])
            if c.check(r.returncode == 0, f"int4 {variant} run --executor {ex}: {r.stderr}"):
                for name, b in zip(["dyn", "small"], got):
                    ours = np.load(os.path.join(out, name + ".npy"))
                    c.check(np.allclose(ours, b, rtol=1e-4, atol=1e-5),
                            f"int4 {variant} {ex} vs ONNX Runtime, {name}: {np.abs(ours - b).max()}")
    dst = os.path.join(tmp, "y.onnx")
    for args, code, text in ((["--int4", "--block-size", "24"], 2, "power of 2"), (["--int4", "--int8", "--dynamic"], 2, "weight-only"),
                             (["--int8", "--dynamic", "--symmetric"], 2, "--symmetric applies to --int4"),
                             (["--int4", "--per-channel"], 2, "apply to --int8")):
        r = run(["quantize", src21, "-o", dst] + args)
        c.check(r.returncode == code and text in r.stderr, f"quantize {args}: exit {r.returncode}: {r.stderr}")


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
        c.check(ops.count("MatMulInteger") == 4 and ops.count("ReduceMax") == 3 and "DynamicQuantizeLinear" not in ops,
                f"4 MatMulInteger, 3 per-row quantizers (t2's is shared): {ops}")
        inits = {t.name: t for t in m.graph.initializer}
        c.check(not any(n in inits for n in ("w1", "w2t", "w3")) and "tiny" in inits,
                f"float weights replaced, the small one kept: {sorted(inits)}")
        c.check(sum(1 for t in inits.values() if t.data_type == TensorProto.INT8 and len(t.dims) == 2) == 3, "three int8 matrices")
        c.check(os.path.getsize(dst) < 0.5 * os.path.getsize(src), f"smaller: {os.path.getsize(src)} -> {os.path.getsize(dst)}")
        # ONNX Runtime runs it with the float model's outputs (cosine similarity)
        a = ort_session(src, providers=["CPUExecutionProvider"])
        b = ort_session(dst, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(5)
        got = {"dyn": ([], []), "small": ([], [])}
        for n in (1, 7, 32):
            feeds = {"x": rng.standard_normal((n, 64)).astype(np.float32), "other": rng.standard_normal((96, 8)).astype(np.float32)}
            for name, ya, yb in zip(["dyn", "small"], a.run(None, feeds), b.run(None, feeds)):
                c.check(ya.shape == yb.shape, f"batch {n}, output {name}: shapes {ya.shape} {yb.shape}")
                got[name][0].append(ya.ravel())
                got[name][1].append(yb.ravel())
        cpu_matches_ort(c, dst, feeds, tmp, "dynamic")
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
        # --activation-scales tensor: the per-tensor form, DynamicQuantizeLinear shared the same way
        tensor = os.path.join(tmp, "mlp.tensor.onnx")
        r = run(["quantize", src, "-o", tensor, "--int8", "--dynamic", "--min-elements", "256", "--activation-scales", "tensor"])
        ops = [n.op_type for n in onnx.load(tensor).graph.node] if r.returncode == 0 else []
        c.check(ops.count("MatMulInteger") == 4 and ops.count("DynamicQuantizeLinear") == 3 and "ReduceMax" not in ops,
                f"--activation-scales tensor: 4 MatMulInteger, 3 DynamicQuantizeLinear: {r.stderr} {ops}")
        if r.returncode == 0:
            cpu_matches_ort(c, tensor, feeds, tmp, "dynamic per tensor")
        r = run(["-q", "quantize", src, "-o", dst, "--int8", "--dynamic"])
        c.check(r.returncode == 0 and r.stderr == "", f"-q: {r.stderr!r}")
        # --static: QDQ around MatMul/Gemm activations with calibrated ranges, int8 per-channel weights
        static_checks(c, tmp)
        int4_checks(c, tmp)
        # exit codes
        old = os.path.join(tmp, "op10.onnx")
        onnx.save(mlp(opset=10), old)
        r = run(["quantize", old, "-o", dst, "--int8", "--dynamic", "-v"])
        c.check(r.returncode == 0 and "converted opset 10 -> 11" in r.stderr, f"opset 10: converted, exit 0: {r.returncode} {r.stderr}")
        # a model that cannot reach the opset a form needs: exit 3 naming the node, nothing written
        rng = np.random.default_rng(5)
        t = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)  # noqa: E731
        g = helper.make_graph([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn", spatial=0),
                               helper.make_node("MatMul", ["y", "w"], ["z"])], "bn7",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 2, 64])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3, 2, 32])],
                              [t("s", 3, 2, 64), t("b", 3, 2, 64), t("m", 3, 2, 64),
                               numpy_helper.from_array(np.ones((3, 2, 64), np.float32), "v"), t("w", 64, 32)])
        stuck = os.path.join(tmp, "bn7.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)], ir_version=3), stuck)
        out7 = os.path.join(tmp, "bn7_q.onnx")
        r = run(["quantize", stuck, "-o", out7, "--int8", "--dynamic"])
        c.check(r.returncode == 3 and "needs opset 11" in r.stderr and "'bn'" in r.stderr and not os.path.exists(out7),
                f"opset 7 with BatchNormalization spatial=0: exit 3 naming the node: {r.returncode} {r.stderr}")
        for args in (["--int8"], [], ["--int8", "--dynamic", "--eval-sets", "-1"]):
            r = run(["quantize", src, "-o", dst] + args)
            c.check(r.returncode == 2 and r.stderr.startswith("onnxtool: error:"), f"quantize {args}: exit 2: {r.stderr}")
    c.finish()


if __name__ == "__main__":
    main()
