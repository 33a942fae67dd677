"""onnxtool quantize --report/--report-layers/--reference/--eval/--min-cosine, and inspect's
quantization summary. The error figures are checked against hand-computed values (a model whose
output carries a known error), the per-layer SQNR of a static int8 model against the same figure
computed with ONNX Runtime on both models, and inspect's counts against a model built with known
contents."""
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import SOURCE_DIR, Checker, ort_session, run  # noqa: E402

SMALL = os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")


def pair(tmp):
    """ref: y = x * 1; cand: y = x + e (a known error), z = 2x in both (no error)."""
    e = np.array([0.5, -0.25, 0, 0.125, 1.0, -1.0], np.float32)

    def model(nodes, inits):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [6])], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    one = numpy_helper.from_array(np.array(1, np.float32), "one")
    two = numpy_helper.from_array(np.array(2, np.float32), "two")
    ref = model([helper.make_node("Mul", ["x", "one"], ["y"]), helper.make_node("Mul", ["x", "two"], ["z"])], [one, two])
    cand = model([helper.make_node("Add", ["x", "e"], ["y"]), helper.make_node("Mul", ["x", "two"], ["z"])],
                 [numpy_helper.from_array(e, "e"), two])
    paths = os.path.join(tmp, "ref.onnx"), os.path.join(tmp, "cand.onnx")
    onnx.save(ref, paths[0])
    onnx.save(cand, paths[1])
    return paths, e


def sqnr(ref, got):
    ref, got = ref.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    return 10 * np.log10((ref @ ref) / ((ref - got) @ (ref - got)))


def known_error_checks(c, tmp):
    (ref, cand), e = pair(tmp)
    x = np.array([1, 2, 3, -4, 0.5, 2], np.float32)
    xf = os.path.join(tmp, "x.npy")
    np.save(xf, x)
    y = x + e
    want = {"max_abs_diff": 1.0, "mean_abs_diff": float(np.abs(e).mean()),
            "cosine_similarity": float(x.astype(np.float64) @ y / np.linalg.norm(x.astype(np.float64)) / np.linalg.norm(y.astype(np.float64))),
            # 10 log10(sum x^2 / sum e^2) = 10 log10(34.25 / 2.328125)
            "sqnr_db": 10 * np.log10(34.25 / 2.328125)}
    c.check(abs(want["sqnr_db"] - sqnr(x, y)) < 1e-9, "hand-computed SQNR")
    r = run(["quantize", cand, "--reference", ref, "-i", xf, "--eval-sets", "1", "--json"])
    if not c.check(r.returncode == 0, f"--reference --json: {r.returncode} {r.stderr}"):
        return
    doc = json.loads(r.stdout)
    c.check(doc["mode"] == "report" and doc["evaluation"]["input_sets"] == 1, f"report doc: {doc}")
    outs = {o["name"]: o for o in doc["evaluation"]["outputs"]}
    for k, v in want.items():
        c.check(abs(outs["y"][k] - v) < 1e-6, f"y {k}: {outs['y'][k]} != {v}")
    c.check(outs["z"]["max_abs_diff"] == 0 and outs["z"]["sqnr_db"] == "inf" and outs["z"]["cosine_similarity"] == 1,
            f"z has no error: {outs['z']}")
    # the same figures on either executor; a bad name is a usage error
    for ex in ("cpu", "ref"):
        r = run(["quantize", cand, "--reference", ref, "-i", xf, "--eval-sets", "1", "--json", "--eval-executor", ex])
        if c.check(r.returncode == 0, f"--eval-executor {ex}: {r.stderr}"):
            o = {o["name"]: o for o in json.loads(r.stdout)["evaluation"]["outputs"]}
            c.check(abs(o["y"]["sqnr_db"] - want["sqnr_db"]) < 1e-6, f"--eval-executor {ex}: {o['y']}")
    r = run(["quantize", cand, "--reference", ref, "-i", xf, "--eval-executor", "gpu"])
    c.check(r.returncode == 2, f"--eval-executor gpu: exit 2: {r.returncode} {r.stderr}")
    # the text report on stdout
    r = run(["quantize", cand, "--reference", ref, "-i", xf, "--eval-sets", "1"])
    c.check(r.returncode == 0 and "SQNR dB" in r.stdout and f"{want['sqnr_db']:.2f}" in r.stdout and "inf" in r.stdout,
            f"text report: {r.stdout}")
    # --min-cosine: 1 below, 0 at or above
    cs = want["cosine_similarity"]
    r = run(["quantize", cand, "--reference", ref, "-i", xf, "--eval-sets", "1", "--min-cosine", str(cs + 1e-4)])
    c.check(r.returncode == 1 and "output 'y': cosine similarity" in r.stderr and "'z'" not in r.stderr,
            f"--min-cosine above: exit 1: {r.returncode} {r.stderr}")
    r = run(["quantize", cand, "--reference", ref, "-i", xf, "--eval-sets", "1", "--min-cosine", str(cs - 1e-4), "--json"])
    c.check(r.returncode == 0 and json.loads(r.stdout)["evaluation"]["min_cosine"]["passed"] is True, f"--min-cosine below: exit 0: {r.returncode}")
    # --eval DATA (an .npz with a sample axis): three samples, errors summed over them
    npz = os.path.join(tmp, "eval.npz")
    xs = np.stack([x, 2 * x, -x])
    np.savez(npz, x=xs)
    r = run(["quantize", cand, "--reference", ref, "--eval", npz, "--json"])
    if c.check(r.returncode == 0, f"--eval: {r.stderr}"):
        o = json.loads(r.stdout)["evaluation"]
        ys = xs + e
        c.check(o["input_sets"] == 3 and o["source"] == "evaluation" and abs(o["outputs"][0]["sqnr_db"] - sqnr(xs, ys)) < 1e-6,
                f"--eval over 3 samples: {o}")
    # usage errors
    for args in (["--int8", "--dynamic", "-o", os.path.join(tmp, "o.onnx")], ["--reference", ref, "--eval-sets", "0"]):
        r = run(["quantize", cand, "--reference", ref] + args if args[0] != "--reference" else ["quantize", cand] + args)
        c.check(r.returncode == 2 and r.stderr.startswith("onnxtool: error:"), f"{args}: exit 2: {r.returncode} {r.stderr}")
    r = run(["quantize", cand, "--int8", "--dynamic"])
    c.check(r.returncode == 2 and "-o/--output" in r.stderr, f"no -o: exit 2: {r.stderr}")
    r = run(["quantize", cand, "--reference", os.path.join(tmp, "missing.onnx")])
    c.check(r.returncode == 2, f"missing reference: exit 2: {r.returncode}")


def static_layers_checks(c, tmp):
    """--report-layers on a static int8 model: each activation's SQNR equals what ONNX Runtime gives
    for the same two tensors; layers come in execution order; the gate works in quantize mode."""
    rng = np.random.default_rng(2)
    npz = os.path.join(tmp, "calib.npz")
    xs = rng.random((4, 1, 1, 28, 28)).astype(np.float32)
    np.savez(npz, input=xs)
    q = os.path.join(tmp, "static.onnx")
    r = run(["quantize", SMALL, "-o", q, "--int8", "--static", "--calibration", npz, "--report-layers", "--json", "--eval-sets", "4"])
    if not c.check(r.returncode == 0, f"static --report-layers: {r.stderr}"):
        return
    doc = json.loads(r.stdout)
    layers = doc["evaluation"]["layers"]
    c.check(len(layers) >= 3 and any(ly["kind"] == "activation" for ly in layers) and any(ly["kind"] == "weight" for ly in layers)
            and any(ly["kind"] == "op-output" for ly in layers), f"layer kinds: {[(ly['name'], ly['kind']) for ly in layers]}")
    c.check([ly["order"] for ly in layers] == sorted(ly["order"] for ly in layers), "layers in execution order")
    # the same SQNR from ONNX Runtime: expose both tensors and compute it in numpy
    fm, qm = onnx.load(SMALL), onnx.load(q)
    for ly in layers:
        if ly["kind"] == "weight":
            continue
        fm.graph.output.append(helper.make_tensor_value_info(ly["name"], TensorProto.FLOAT, None))
        qm.graph.output.append(helper.make_tensor_value_info(ly["tensor"], TensorProto.FLOAT, None))
    fs = ort_session(fm.SerializeToString(), providers=["CPUExecutionProvider"])
    qs = ort_session(qm.SerializeToString(), providers=["CPUExecutionProvider"])
    fo = [fs.run(None, {"input": x}) for x in xs]
    qo = [qs.run(None, {"input": x}) for x in xs]
    nout = len(onnx.load(SMALL).graph.output)
    k = nout
    for ly in layers:
        if ly["kind"] == "weight":
            continue
        a = np.concatenate([o[k].ravel() for o in fo])
        b = np.concatenate([o[k].ravel() for o in qo])
        k += 1
        want = sqnr(a, b)
        c.check(abs(ly["sqnr_db"] - want) < 0.1, f"layer {ly['name']} ({ly['kind']}): SQNR {ly['sqnr_db']} vs ONNX Runtime {want:.3f}")
    # the per-output figures equal the same computation on the graph outputs
    for i, o in enumerate(doc["evaluation"]["outputs"]):
        a = np.concatenate([f[i].ravel() for f in fo])
        b = np.concatenate([g[i].ravel() for g in qo])
        c.check(abs(o["sqnr_db"] - sqnr(a, b)) < 0.1, f"output {o['name']}: SQNR {o['sqnr_db']} vs ORT {sqnr(a, b):.3f}")
    # the text form marks where SQNR drops
    r = run(["quantize", SMALL, "-o", q, "--int8", "--static", "--calibration", npz, "--report-layers"])
    c.check(r.returncode == 0 and "layers (" in r.stdout and "in execution order" in r.stdout, f"text layers: {r.stdout}")
    # the gate in quantize mode: the model is written either way
    os.remove(q)
    r = run(["quantize", SMALL, "-o", q, "--int8", "--static", "--calibration", npz, "--min-cosine", "0.999999999"])
    c.check(r.returncode == 1 and os.path.exists(q) and "below --min-cosine" in r.stderr, f"gate 1: {r.returncode} {r.stderr}")
    r = run(["quantize", SMALL, "-o", q, "--int8", "--static", "--calibration", npz, "--min-cosine", "0.9"])
    c.check(r.returncode == 0, f"gate 0: {r.returncode} {r.stderr}")
    # the report alone on the written model gives the same outputs' figures
    r2 = run(["quantize", q, "--reference", SMALL, "--eval", npz, "--eval-sets", "4", "--json"])
    if c.check(r2.returncode == 0, f"--reference on the static model: {r2.stderr}"):
        o2 = json.loads(r2.stdout)["evaluation"]["outputs"]
        # on the cpu executor the report's extra layer outputs keep the int8 chains apart, whose fused
        # form rounds a value exactly halfway between two steps the other way now and then
        diffs = [abs(a["sqnr_db"] - b["sqnr_db"]) for a, b in zip(o2, doc["evaluation"]["outputs"])]
        c.check(max(diffs) < 0.05, f"quantize --report and --reference agree: {diffs}")
    # on the reference executor, exactly
    r = run(["quantize", SMALL, "-o", q, "--int8", "--static", "--calibration", npz, "--report-layers", "--json", "--eval-sets", "4",
             "--eval-executor", "ref"])
    r2 = run(["quantize", q, "--reference", SMALL, "--eval", npz, "--eval-sets", "4", "--json", "--eval-executor", "ref"])
    if c.check(r.returncode == 0 and r2.returncode == 0, f"--eval-executor ref: {r.stderr} {r2.stderr}"):
        o1, o2 = json.loads(r.stdout)["evaluation"]["outputs"], json.loads(r2.stdout)["evaluation"]["outputs"]
        c.check(all(abs(a["sqnr_db"] - b["sqnr_db"]) < 1e-6 for a, b in zip(o1, o2)), "on ref: quantize --report and --reference agree")


def inspect_checks(c, tmp):
    """A model with known quantization: per-tensor, per-channel and blocked DequantizeLinear, a
    QDQ activation pair, MatMulInteger behind DynamicQuantizeLinear."""
    i8 = lambda name, shape: numpy_helper.from_array(np.ones(shape, np.int8), name)  # noqa: E731
    f32 = lambda name, shape: numpy_helper.from_array(np.ones(shape, np.float32), name)  # noqa: E731
    w4 = helper.make_tensor("w4", TensorProto.INT4, [32, 4], np.zeros(128, np.int8).tolist())
    inits = [i8("wq", [4, 4]), f32("ws", []), i8("wc", [4, 4]), f32("wcs", [4]), w4, f32("w4s", [2, 4]),
             f32("xs", []), helper.make_tensor("xz", TensorProto.UINT8, [], [128]), i8("mi", [4, 4]), i8("mz", [4])]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"]),
             helper.make_node("DequantizeLinear", ["wc", "wcs"], ["wcd"], axis=0),
             helper.make_node("DequantizeLinear", ["w4", "w4s"], ["w4d"], axis=0, block_size=16),
             helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["a"]),
             helper.make_node("MatMul", ["a", "wcd"], ["b"]),
             helper.make_node("DynamicQuantizeLinear", ["b"], ["bq", "bs", "bz"]),
             helper.make_node("MatMulInteger", ["bq", "mi", "bz", "mz"], ["bi"]),
             helper.make_node("MatMul", ["y4", "w4d"], ["c"])]
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                                       helper.make_tensor_value_info("y4", TensorProto.FLOAT, [1, 32])],
                          [helper.make_tensor_value_info("bi", TensorProto.INT32, [1, 4]),
                           helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(m, full_check=True)
    p = os.path.join(tmp, "known_q.onnx")
    onnx.save(m, p)
    r = run(["inspect", p, "--json"])
    if not c.check(r.returncode == 0, f"inspect --json: {r.stderr}"):
        return
    q = json.loads(r.stdout)["quantization"]
    c.check(q["quantized"] is True, "quantized")
    c.check(q["quantization_ops"] == {"DequantizeLinear": 4, "QuantizeLinear": 1, "DynamicQuantizeLinear": 1, "MatMulInteger": 1},
            f"ops: {q['quantization_ops']}")
    c.check(q["qdq_ops"] == {"MatMul": 3}, f"ops on dequantized values: {q['qdq_ops']}")
    # scales: ws, xs (Q), xs (DQ) per tensor; wcs and MatMulInteger's mz per channel; w4s blocked;
    # DynamicQuantizeLinear's computed at run time
    c.check(q["scales"] == {"per_tensor": 3, "per_channel": 2, "blocked": 1, "runtime": 1}, f"scales: {q['scales']}")
    # int8: wq, wc, mi, mz = 16+16+16+4 bytes; quantized weights: wq, wc, mi (int8, 48 B) and w4 (int4, 64 B)
    c.check(q["weights_by_dtype"]["int8"] == {"tensors": 4, "count": 52, "bytes": 52}, f"int8 weights: {q['weights_by_dtype']}")
    c.check(q["quantized_weights_by_dtype"] == {"int8": {"tensors": 3, "count": 48, "bytes": 48},
                                                "int4": {"tensors": 1, "count": 128, "bytes": 64}},
            f"quantized weights: {q['quantized_weights_by_dtype']}")
    c.check(q["weights_by_dtype"]["float32"]["tensors"] == 4 and q["weights_by_dtype"]["float32"]["bytes"] == 4 * (1 + 4 + 8 + 1),
            f"float32 weights: {q['weights_by_dtype']['float32']}")
    r = run(["inspect", p])
    c.check("quantization:" in r.stdout and "DequantizeLinear 4" in r.stdout and "MatMul 3" in r.stdout
            and "3 per-tensor, 2 per-channel, 1 blocked, 1 computed at run time" in r.stdout, f"inspect text: {r.stdout}")
    r = run(["inspect", SMALL, "--json"])
    q = json.loads(r.stdout)["quantization"]
    c.check(q["quantized"] is False and q["quantization_ops"] == {} and q["scales"]["per_tensor"] == 0, f"float model: {q}")
    c.check("quantization:" not in run(["inspect", SMALL]).stdout, "no quantization block for a float model")


def main():
    c = Checker("quantize --report, inspect quantization")
    with tempfile.TemporaryDirectory() as tmp:
        known_error_checks(c, tmp)
        static_layers_checks(c, tmp)
        inspect_checks(c, tmp)
    c.finish()


if __name__ == "__main__":
    main()
