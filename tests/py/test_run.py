"""`onnxtool run`: inputs from .npy/.npz/.pb/.json/--inputs-dir/--random, outputs as summaries,
-O files in every format, --compare, and clear exit-2 errors naming the input. Oracles:
onnxruntime for model outputs, numpy/onnx for the files."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import NODE_TESTS, ONNXTOOL, SOURCE_DIR, Checker, run  # noqa: E402

SMALL = os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")


def ort_run(path, feeds):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def two_input_model(tmp):
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "bias"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])],
                          [numpy_helper.from_array(np.array([0.5, -1.0], dtype=np.float32), "bias")])
    p = os.path.join(tmp, "mm.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    return p


def main():
    c = Checker("run")
    tmp = tempfile.mkdtemp(prefix="onnxtool-run-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # no temp folders left behind
    try:
        model = two_input_model(tmp)
        a = np.random.RandomState(0).rand(4, 3).astype(np.float32)
        b = np.random.RandomState(1).rand(3, 2).astype(np.float32)
        want = ort_run(model, {"a": a, "b": b})[0]
        np.save(os.path.join(tmp, "a.npy"), a)
        np.save(os.path.join(tmp, "bb.npy"), b)
        out = os.path.join(tmp, "out")
        r = run(["run", model, "-i", os.path.join(tmp, "a.npy"), "-i", "b=" + os.path.join(tmp, "bb.npy"), "-O", out])
        c.check(r.returncode == 0, f"run -i .npy: {r.stderr}")
        got = np.load(os.path.join(out, "y.npy")) if os.path.exists(os.path.join(out, "y.npy")) else None
        c.check(got is not None and np.allclose(got, want, rtol=1e-5, atol=1e-6), "npy output matches onnxruntime")
        # summary on stdout
        r = run(["run", model, "-i", os.path.join(tmp, "a.npy"), "-i", "b=" + os.path.join(tmp, "bb.npy")])
        c.check(r.returncode == 0 and r.stdout.startswith("y: float32 [4,2]"), f"summary line: {r.stdout!r}")
        # npz, json, pb inputs; pb/json outputs
        np.savez(os.path.join(tmp, "in.npz"), a=a, b=b)
        r = run(["run", model, "-i", os.path.join(tmp, "in.npz"), "-O", out, "--output-format", "pb"])
        c.check(r.returncode == 0, f"run -i .npz: {r.stderr}")
        t = onnx.TensorProto()
        with open(os.path.join(out, "y.pb"), "rb") as f:
            t.ParseFromString(f.read())
        c.check(t.name == "y" and np.allclose(numpy_helper.to_array(t), want, rtol=1e-5, atol=1e-6), "pb output")
        np.savez_compressed(os.path.join(tmp, "inz.npz"), a=a, b=b)
        r = run(["run", model, "-i", os.path.join(tmp, "inz.npz"), "--json"])
        c.check(r.returncode == 0 and json.loads(r.stdout)["outputs"][0]["shape"] == [4, 2], f"compressed npz: {r.stderr}")
        with open(os.path.join(tmp, "a.json"), "w") as f:
            json.dump({"dtype": "float32", "data": a.tolist()}, f)
        with open(os.path.join(tmp, "b.pb"), "wb") as f:
            f.write(numpy_helper.from_array(b, "b").SerializeToString())
        r = run(["run", model, "-i", "a=" + os.path.join(tmp, "a.json"), "-i", os.path.join(tmp, "b.pb"), "-O", out,
                 "--output-format", "json"])
        c.check(r.returncode == 0, f"json + pb inputs: {r.stderr}")
        with open(os.path.join(out, "y.json")) as f:
            j = json.load(f)
        c.check(j["dtype"] == "float32" and j["shape"] == [4, 2] and np.allclose(np.array(j["data"]), want, rtol=1e-5, atol=1e-6),
                "json output")
        # --compare against a folder of expected outputs: match, then mismatch (exit 1)
        exp = os.path.join(tmp, "expected")
        os.makedirs(exp)
        with open(os.path.join(exp, "output_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(want, "y").SerializeToString())
        args = ["run", model, "-i", os.path.join(tmp, "a.npy"), "-i", "b=" + os.path.join(tmp, "bb.npy"), "--compare", exp]
        r = run(args)
        c.check(r.returncode == 0 and "match" in r.stdout, f"--compare match: {r.stdout} {r.stderr}")
        with open(os.path.join(exp, "output_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(want + 0.01, "y").SerializeToString())
        r = run(args)
        c.check(r.returncode == 1 and "MISMATCH" in r.stdout, f"--compare mismatch exits 1: {r.returncode} {r.stdout}")
        r = run(args + ["--atol", "0.1"])
        c.check(r.returncode == 0, "--atol widens the tolerance")
        # --random with --shape and --seed is reproducible
        r1 = run(["run", model, "--random", "--seed", "7", "--shape", "a=5x3", "--json"])
        r2 = run(["run", model, "--random", "--seed", "7", "--shape", "a=5x3", "--json"])
        c.check(r1.returncode == 0 and json.loads(r1.stdout)["outputs"][0]["shape"] == [5, 2], f"--random --shape: {r1.stderr}")
        c.check(r1.stdout == r2.stdout, "--seed makes --random reproducible")
        # the ONNX test-data layout
        case = os.path.join(NODE_TESTS, "test_add")
        r = run(["run", os.path.join(case, "model.onnx"), "--inputs-dir", os.path.join(case, "test_data_set_0"),
                 "--compare", os.path.join(case, "test_data_set_0")])
        c.check(r.returncode == 0, f"--inputs-dir + --compare on test_add: {r.stdout} {r.stderr}")
        # bad input: exit 2, one line naming the input
        np.save(os.path.join(tmp, "ai.npy"), a.astype(np.int32))
        np.save(os.path.join(tmp, "a5.npy"), np.zeros((4, 5), np.float32))
        with open(os.path.join(tmp, "bad.npy"), "wb") as f:
            f.write(b"\x93NUMPY\x01\x00garbage")
        cases = [
            (["-i", "a=" + os.path.join(tmp, "ai.npy"), "-i", "b=" + os.path.join(tmp, "bb.npy")], "'a'"),
            (["-i", "a=" + os.path.join(tmp, "a5.npy"), "-i", "b=" + os.path.join(tmp, "bb.npy")], "'a'"),
            (["-i", os.path.join(tmp, "a.npy")], "'b'"),
            (["-i", "zz=" + os.path.join(tmp, "a.npy")], "'zz'"),
            (["-i", "a=" + os.path.join(tmp, "bad.npy"), "-i", "b=" + os.path.join(tmp, "bb.npy")], "bad.npy"),
            (["-i", "a=" + os.path.join(tmp, "missing.npy")], "missing.npy"),
            (["--random", "--shape", "a=2x1.5"], "'1.5'"),
        ]
        for extra, needle in cases:
            r = run(["run", model] + extra)
            c.check(r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1,
                    f"bad input {extra}: exit {r.returncode}, stderr {r.stderr!r} should name {needle}")
        # a real CNN against onnxruntime
        x = np.random.RandomState(3).rand(2, 1, 28, 28).astype(np.float32)
        np.save(os.path.join(tmp, "input.npy"), x)
        r = run(["run", SMALL, "-i", os.path.join(tmp, "input.npy"), "-O", out])
        got = np.load(os.path.join(out, "probs.npy")) if r.returncode == 0 else None
        want = ort_run(SMALL, {"input": x})[0]
        c.check(got is not None and np.allclose(got, want, rtol=1e-4, atol=1e-5), f"small_cnn vs onnxruntime: {r.stderr}")
        # --random index inputs stay inside the table they index (BERT's token_type_ids: 2 rows),
        # through a Cast; other integer inputs keep [0, 10); floats take negative values too
        emb = numpy_helper.from_array(np.random.RandomState(0).rand(2, 4).astype(np.float32), "type_table")
        word = numpy_helper.from_array(np.random.RandomState(1).rand(30, 4).astype(np.float32), "word_table")
        g = helper.make_graph(
            [helper.make_node("Cast", ["token_type_ids"], ["tt32"], to=TensorProto.INT32),
             helper.make_node("Gather", ["type_table", "tt32"], ["te"]),
             helper.make_node("Gather", ["word_table", "input_ids"], ["we"]),
             helper.make_node("Add", ["te", "we"], ["sum"]), helper.make_node("Add", ["sum", "noise"], ["y"]),
             helper.make_node("Identity", ["count"], ["count_out"])],
            "bertish",
            [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
             helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["b", "s"]),
             helper.make_tensor_value_info("noise", TensorProto.FLOAT, ["b", "s", 4]),
             helper.make_tensor_value_info("count", TensorProto.INT64, [64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 4]),
             helper.make_tensor_value_info("count_out", TensorProto.INT64, [64])], [emb, word])
        bertish = os.path.join(tmp, "bertish.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), bertish)
        for seed in range(5):
            r = run(["run", bertish, "--random", "--seed", str(seed), "--shape", "input_ids=2,64", "--json"])
            c.check(r.returncode == 0, f"run --random on a BERT-like model (seed {seed}): {r.stderr}")
        rdir = os.path.join(tmp, "random_out")
        r = run(["run", bertish, "--random", "--shape", "input_ids=1,256", "-O", rdir])
        cnt = np.load(os.path.join(rdir, "count_out.npy")) if r.returncode == 0 else np.array([])
        c.check(cnt.size == 64 and cnt.min() >= 0 and cnt.max() <= 9 and len(set(cnt.tolist())) > 3,
                f"plain integer inputs in [0, 10): {cnt.tolist()[:10]}")
        # models without inputs: their test-data folders hold outputs only (test_constant, ...)
        import glob
        no_inputs = [d for d in sorted(glob.glob(os.path.join(NODE_TESTS, "*", "test_data_set_0")))
                     if not glob.glob(os.path.join(d, "input_*.pb"))]
        c.check(len(no_inputs) >= 2, f"node tests without inputs found: {len(no_inputs)}")
        for d in no_inputs:
            r = run(["run", os.path.join(os.path.dirname(d), "model.onnx"), "--inputs-dir", d, "--compare", d])
            c.check(r.returncode == 0, f"run --inputs-dir {d} (no inputs) --compare: {r.returncode} {r.stderr!r}")
        # a shape from data asking for 2^62 elements: refused before anything that size is built
        # (Expand, CenterCropPad and Pad built their per-axis index maps first: 20 s and 5-9 GiB,
        # then killed)
        # (Expand [2^37, 1, 2, 2]: within the element limit, but its 4 TiB index map fits no machine's memory)
        for op, shape in (("Expand", [1 << 62]), ("Expand", [1 << 21, 1 << 21]), ("Tile", [1 << 31, 1 << 31]),
                          ("Expand", [1 << 37, 1, 2, 2]), ("CenterCropPad", [1 << 30, 1 << 30]),
                          ("Pad", [1 << 20, 1 << 20, 1 << 20, 1 << 20])):
            s = numpy_helper.from_array(np.array(shape, np.int64), "s")
            rank = len(shape) // 2 if op == "Pad" else len(shape)
            g = helper.make_graph([helper.make_node(op, ["x", "s"], ["y"], name="big")], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1] * rank)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [s])
            path = os.path.join(tmp, f"huge_{op}_{len(shape)}_{shape[0]}.onnx")
            onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
            for ex in ("ref", "cpu"):
                r = subprocess.run([ONNXTOOL, "run", path, "--random", "--executor", ex], capture_output=True,
                                   text=True, timeout=30)
                c.check(r.returncode == 2 and ("too large" in r.stderr or "more than this machine's memory" in r.stderr)
                        and r.stderr.count("\n") == 1,
                        f"{op} to {shape} on {ex}: exit {r.returncode}, {r.stderr!r}")
    finally:
        shutil.rmtree(tmp)
    c.finish()


if __name__ == "__main__":
    main()
