"""onnxtool quantize --int8 --dynamic on embedding tables: each Gather of a constant float table
along axis 0 becomes Mul(Cast<float>(Gather(Tq int8, ids)), Gather(Ts [V, 1], ids)), int8
symmetric per row. The model passes onnx.checker (full) with standard ops only; the int8 table
and its scales are what a numpy oracle computes (max|row| / 127, round half to even, zero point
0); ONNX Runtime gives exactly Tq[ids] * Ts[ids] and within half a quantization step of each
row of fp32; our cpu executor (every ISA path, on its fused int8 lookup) and reference executor
give ONNX Runtime's values bit for bit; inspect lists the quantized Gathers; --op-types without
Gather and --exclude Gather keep the tables float; static QDQ leaves Gather float and refuses
--op-types Gather."""
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
from test_quantize import cpu_matches_ort  # noqa: E402

V, H, P, S = 300, 40, 16, 12


def embeddings():
    """A BERT-style embedding block: word table [V, H] (one row a hundred times the others, one
    all zero), position table [P, H] read by a second input, a 3-D table [V, 2, 5] read by int32
    ids, then a MatMul [H, 8]."""
    rng = np.random.default_rng(3)
    word = (rng.standard_normal((V, H)) * 0.05).astype(np.float32)
    word[7] *= 100
    word[11] = 0
    pos = (rng.standard_normal((P, H)) * 0.02).astype(np.float32)
    cube = rng.standard_normal((V, 2, 5)).astype(np.float32)
    w = (rng.standard_normal((H, 8)) / np.sqrt(H)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((word, "word"), (pos, "pos"), (cube, "cube"), (w, "w"))]
    nodes = [helper.make_node("Gather", ["word", "ids"], ["we"], name="word_lookup"),
             helper.make_node("Gather", ["pos", "pos_ids"], ["pe"], name="pos_lookup"),
             helper.make_node("Add", ["we", "pe"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["y"]),
             helper.make_node("Gather", ["cube", "ids32"], ["c"], name="cube_lookup", axis=0)]
    g = helper.make_graph(nodes, "emb", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, S]),
                                         helper.make_tensor_value_info("pos_ids", TensorProto.INT64, [1, S]),
                                         helper.make_tensor_value_info("ids32", TensorProto.INT32, [1, S])],
                          [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, S, H]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, 8]),
                           helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, S, 2, 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def row_quantized(t):
    """numpy's int8 per-row table: scale = float32(max|row| / 127) (1 for an all-zero row),
    q = clip(round(t / scale), -127, 127) in double, round half to even."""
    flat = t.reshape(t.shape[0], -1).astype(np.float64)
    m = np.abs(flat).max(1)
    scale = np.where(m > 0, m / 127, 1).astype(np.float32)
    q = np.clip(np.round(flat / scale.astype(np.float64)[:, None]), -127, 127).astype(np.int8)
    return q.reshape(t.shape), scale


def main():
    c = Checker("quantize gather")
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "emb.onnx"), os.path.join(tmp, "emb.int8.onnx")
        model = embeddings()
        onnx.save(model, src)
        f = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        r = run(["quantize", src, "-o", dst, "--int8", "--dynamic", "--json", "--eval-sets", "0"])
        if not c.check(r.returncode == 0, f"quantize: {r.stderr}"):
            c.finish()
        doc = json.loads(r.stdout)
        c.check(doc["nodes_quantized"] == 4 and doc["weights_quantized"] == 4, f"json: {doc['nodes_quantized']} nodes, {doc['weights_quantized']} weights")
        m = onnx.load(dst)
        try:
            onnx.checker.check_model(m, full_check=True)
            c.check(True, "")
        except Exception as e:  # noqa: BLE001
            c.check(False, f"onnx.checker: {e}")
        c.check(all(n.domain in ("", "ai.onnx") for n in m.graph.node), "standard ops only")
        q = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        c.check(not {"word", "pos", "cube"} & set(q), f"float tables gone: {sorted(q)}")
        for name in ("word", "pos", "cube"):
            tq, ts = row_quantized(f[name])
            got_q, got_s = q.get(name + "_quantized"), q.get(name + "_scale")
            if not c.check(got_q is not None and got_s is not None, f"{name}: no int8 table / scales"):
                continue
            c.check(got_q.dtype == np.int8 and np.array_equal(got_q, tq), f"{name}: int8 table differs from numpy's per-row rounding")
            c.check(got_s.shape == (f[name].shape[0],) + (1,) * (f[name].ndim - 1) and np.array_equal(got_s.reshape(-1), ts),
                    f"{name}: scales {got_s.shape} differ from max|row| / 127")
        rng = np.random.default_rng(5)
        ids = rng.integers(0, V, (1, S)).astype(np.int64)
        ids[0, :3] = [7, 11, V - 1]
        feeds = {"ids": ids, "pos_ids": np.arange(S, dtype=np.int64)[None] % P, "ids32": ids.astype(np.int32)}
        plain = ort.SessionOptions()
        plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        for so, label in ((plain, "unoptimized"), (None, "optimized")):
            e, y, cc = ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"]).run(None, feeds)
            want_e = q["word_quantized"][ids].astype(np.float32) * q["word_scale"][ids] + \
                q["pos_quantized"][feeds["pos_ids"]].astype(np.float32) * q["pos_scale"][feeds["pos_ids"]]
            want_c = q["cube_quantized"][ids].astype(np.float32) * q["cube_scale"][ids]
            c.check(np.array_equal(e, want_e) and np.array_equal(cc, want_c), f"ONNX Runtime ({label}): not Tq[ids] * Ts[ids] exactly")
        fe, fy, fc = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feeds)
        # within half a step of each row (word + position: the two half steps), up to float rounding
        half = (q["word_scale"][ids] + q["pos_scale"][feeds["pos_ids"]]) / 2
        c.check(np.all(np.abs(e - fe) <= half * 1.001 + 1e-7), f"e vs fp32: max diff {np.abs(e - fe).max():.3g}")
        c.check(np.all(np.abs(cc - fc) <= q["cube_scale"][ids] / 2 * 1.001 + 1e-7), f"cube vs fp32: max diff {np.abs(cc - fc).max():.3g}")
        cpu_matches_ort(c, dst, feeds, tmp, "embeddings")
        # the lookups bit for bit on our executors (every ISA path of the fused kernel), no reference kernel
        args = []
        for k, v in feeds.items():
            np.save(os.path.join(tmp, f"{k}.npy"), v)
            args += ["-i", f"{k}={os.path.join(tmp, k + '.npy')}"]
        for ex, isa in (("cpu", ""), ("cpu", "avx2"), ("cpu", "portable"), ("ref", "")):
            out = os.path.join(tmp, f"out_{ex}_{isa}")
            r = run(["run", dst, "--executor", ex, "-O", out] + args, env=dict(os.environ, ONNXTOOL_ISA=isa))
            if c.check(r.returncode == 0, f"run --executor {ex} {isa}: {r.stderr}"):
                c.check(np.array_equal(np.load(os.path.join(out, "e.npy")), e) and np.array_equal(np.load(os.path.join(out, "c.npy")), cc),
                        f"{ex} {isa}: embeddings differ from ONNX Runtime's")
        r = run(["bench", dst, "--executor", "cpu", "--iterations", "2", "--warmup", "1", "--profile", "--top", "30"])
        c.check(r.returncode == 0 and r.stdout.count("cpu.gather.s8.dequantize.fused") == 3 and "fallback nodes (reference kernels): 0 of" in r.stdout,
                f"bench --profile: three fused int8 lookups, no fallback: {r.stdout[-2500:]} {r.stderr}")
        # an id out of range: a one-line error, exit 2, as for a float table
        bad = os.path.join(tmp, "bad_ids.npy")
        np.save(bad, np.full((1, S), V, np.int64))
        r = run(["run", dst, "--executor", "cpu", "-i", f"ids={bad}", "-i", f"pos_ids={os.path.join(tmp, 'pos_ids.npy')}",
                 "-i", f"ids32={os.path.join(tmp, 'ids32.npy')}"])
        c.check(r.returncode == 2 and "out of range" in r.stderr and r.stderr.count("\n") == 1, f"id out of range: {r.returncode} {r.stderr}")
        # inspect: three quantized Gathers, their int8 tables and per-row scales
        r = run(["inspect", dst, "--json"])
        qs = json.loads(r.stdout).get("quantization", {}) if r.returncode == 0 else {}
        c.check(qs.get("quantization_ops", {}).get("Gather") == 3 and qs.get("quantized_weights_by_dtype", {}).get("int8", {}).get("tensors") == 4
                and qs.get("scales", {}).get("per_channel") == 4, f"inspect: {qs} {r.stderr}")
        r = run(["inspect", dst])
        c.check(r.returncode == 0 and "Gather 3" in r.stdout, f"inspect text: {r.stdout}")
        # --op-types MatMul and --exclude Gather keep the tables float; --exclude a node by name
        for args, float_tables in ((["--op-types", "MatMul"], {"word", "pos", "cube"}), (["--exclude", "Gather"], {"word", "pos", "cube"}),
                                   (["--exclude", "pos_lookup"], {"pos"}), (["--op-types", "Gather"], set())):
            out = os.path.join(tmp, "sel.onnx")
            r = run(["quantize", src, "-o", out, "--int8", "--dynamic", "--eval-sets", "0"] + args)
            if not c.check(r.returncode == 0, f"{args}: {r.stderr}"):
                continue
            sm = onnx.load(out)
            inits = {t.name: t.data_type for t in sm.graph.initializer}
            c.check({n for n in ("word", "pos", "cube") if inits.get(n) == TensorProto.FLOAT} == float_tables,
                    f"{args}: float tables {sorted(n for n in inits if inits[n] == TensorProto.FLOAT)}")
            c.check(("w" in inits) == (args == ["--op-types", "Gather"]), f"{args}: MatMul weight {'w' in inits}")
        # static QDQ: Gather is not its op (usage error), and its default leaves the tables float
        calib = os.path.join(tmp, "calib.npz")
        np.savez(calib, ids=rng.integers(0, V, (2, 1, S)).astype(np.int64), pos_ids=np.tile(feeds["pos_ids"], (2, 1, 1)),
                 ids32=rng.integers(0, V, (2, 1, S)).astype(np.int32))
        r = run(["quantize", src, "-o", os.path.join(tmp, "s.onnx"), "--int8", "--static", "--calibration", calib, "--op-types", "Gather"])
        c.check(r.returncode == 2 and "Gather with --dynamic" in r.stderr and r.stderr.count("\n") == 1, f"static --op-types Gather: {r.returncode} {r.stderr}")
        r = run(["quantize", src, "-o", os.path.join(tmp, "s.onnx"), "--int8", "--static", "--calibration", calib, "--eval-sets", "0"])
        if c.check(r.returncode == 0, f"static: {r.stderr}"):
            sm = onnx.load(os.path.join(tmp, "s.onnx"))
            inits = {t.name: t.data_type for t in sm.graph.initializer}
            gathers = [n for n in sm.graph.node if n.op_type == "Gather"]
            c.check(all(inits.get(n) == TensorProto.FLOAT for n in ("word", "pos", "cube")) and
                    sorted(n.input[0] for n in gathers) == ["cube", "pos", "word"], f"static: Gathers {[n.input[0] for n in gathers]}")
    c.finish()


if __name__ == "__main__":
    main()
