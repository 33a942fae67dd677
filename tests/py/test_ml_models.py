"""Classical-ML models as converters write them (skl2onnx 1.20, onnxmltools 1.16 for LightGBM and
XGBoost; files in testdata/models/ml, made by scripts/make_ml_models.py): `check` exits 0 (a default
domain listed twice with one version is a warning), `inspect --shapes` states only dims ONNX Runtime
computes, `run` gives ONNX Runtime's outputs at batch 1 and 5, `optimize -O3` keeps them."""
import glob
import json
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

from onnxtool_test import SOURCE_DIR, Checker, run


def feeds_for(sess, batch, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        dims = [batch if not isinstance(d, int) else d for d in i.shape]
        if i.type == "tensor(int64)":
            feeds[i.name] = rng.integers(0, 5, size=dims).astype(np.int64)  # includes an unseen category
        else:
            feeds[i.name] = rng.normal(size=dims).astype(np.float32)
    return feeds


def run_ours(c, name, src, feeds, tmp, extra=()):
    args = ["run", src]
    for k, v in feeds.items():
        p = os.path.join(tmp, f"{k}.npy")
        np.save(p, v)
        args += ["-i", f"{k}={p}"]
    out_dir = os.path.join(tmp, "out")
    r = run(args + ["-O", out_dir] + list(extra))
    if not c.check(r.returncode == 0, f"{name}: run {' '.join(extra)}: {r.stderr.strip()}"):
        return None
    return out_dir


def compare(c, name, sess, want, out_dir, what):
    for o, w in zip(sess.get_outputs(), want):
        path = os.path.join(out_dir, o.name + ".npy")
        if not c.check(os.path.exists(path), f"{name}: {what}: no output {o.name}"):
            continue
        got = np.load(path)
        w = np.asarray(w)
        same = got.shape == w.shape and got.dtype == w.dtype
        if same:
            same = np.array_equal(got, w) if w.dtype.kind in "iub" else np.allclose(got, w, rtol=1e-5, atol=1e-5)
        c.check(same, f"{name}: {what}: output {o.name}: ours {got.dtype}{list(got.shape)} vs onnxruntime "
                      f"{w.dtype}{list(w.shape)}" + (f", max diff {np.max(np.abs(got.astype(np.float64) - w))}"
                                                      if got.shape == w.shape and w.dtype.kind == "f" else ""))


def compare_pb(c, name, sess, want, out_dir, what):
    from onnx import numpy_helper
    for o, w in zip(sess.get_outputs(), want):
        path = os.path.join(out_dir, o.name + ".pb")
        if not c.check(os.path.exists(path), f"{name}: {what}: no output {o.name}.pb"):
            continue
        data = open(path, "rb").read()
        if isinstance(w, np.ndarray):
            t = onnx.TensorProto()
            t.ParseFromString(data)
            got = numpy_helper.to_array(t)
            c.check(got.shape == w.shape and np.allclose(got, w, rtol=1e-5, atol=1e-5),
                    f"{name}: {what}: output {o.name} differs from onnxruntime")
            continue
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        got = numpy_helper.to_list(seq)
        ok = len(got) == len(w) and all(
            isinstance(g, dict) and set(g) == set(x) and all(abs(float(g[k]) - x[k]) <= 1e-5 + 1e-5 * abs(x[k]) for k in x)
            for g, x in zip(got, w))
        c.check(ok, f"{name}: {what}: output {o.name}: ours {got[:2]}... vs onnxruntime {w[:2]}...")


def main():
    c = Checker("ml models")
    models = sorted(glob.glob(os.path.join(SOURCE_DIR, "testdata", "models", "ml", "*.onnx")))
    c.check(len(models) >= 12, f"expected the converted models in testdata/models/ml, found {len(models)}")
    for src in models:
        name = os.path.basename(src)
        m = onnx.load(src)
        onnx.checker.check_model(m, full_check=True)  # the oracle accepts every one of them
        r = run(["check", src, "--json"])
        c.check(r.returncode == 0, f"{name}: check exits {r.returncode}: {r.stdout}{r.stderr}")
        if len({o.domain for o in m.opset_import}) < len(m.opset_import):
            doc = json.loads(r.stdout) if r.stdout.strip() else {}
            codes = [f.get("code") for f in doc.get("warnings", []) + doc.get("errors", [])]
            c.check("duplicate-opset-import" in codes, f"{name}: the twice-listed domain is not reported: {codes}")
        sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
        with tempfile.TemporaryDirectory() as tmp:
            # shapes we state against the ones ONNX Runtime computes (outputs, at batch 5)
            feeds = feeds_for(sess, 5, 1)
            want = sess.run(None, feeds)
            r = run(["inspect", src, "--shapes", "--json"])
            if c.check(r.returncode == 0, f"{name}: inspect --shapes: {r.stderr.strip()}"):
                stated = {v["name"]: v for v in json.loads(r.stdout)["values"]}
                for o, w in zip(sess.get_outputs(), want):
                    v = stated.get(o.name)
                    if not c.check(v is not None, f"{name}: inspect states nothing for output {o.name}"):
                        continue
                    shape = v.get("shape")
                    if shape is None or not hasattr(w, "shape"):
                        continue
                    c.check(len(shape) == w.ndim and all(not isinstance(d, int) or d == real
                                                         for d, real in zip(shape, w.shape)),
                            f"{name}: output {o.name}: stated {shape}, onnxruntime computes {list(w.shape)}")
            for batch in (1, 5):
                feeds = feeds_for(sess, batch, batch)
                want = sess.run(None, feeds)
                if any(not isinstance(w, np.ndarray) for w in want):
                    # ZipMap's sequence of maps, written as SequenceProto/MapProto .pb files
                    out = run_ours(c, name, src, feeds, tmp, ["--output-format", "pb"])
                    if out:
                        compare_pb(c, name, sess, want, out, f"run at batch {batch}")
                    continue
                out = run_ours(c, name, src, feeds, tmp)
                if out:
                    compare(c, name, sess, want, out, f"run at batch {batch}")
                out = run_ours(c, name, src, feeds, tmp, ["--executor", "cpu"])
                if out:
                    compare(c, name, sess, want, out, f"run --executor cpu at batch {batch}")
            dst = os.path.join(tmp, "opt.onnx")
            r = run(["optimize", src, "-o", dst, "-O3", "--verify"])
            if c.check(r.returncode == 0, f"{name}: optimize -O3 --verify: {r.stderr.strip()}"):
                onnx.checker.check_model(onnx.load(dst), full_check=True)
                opt = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
                feeds = feeds_for(sess, 3, 9)
                a, b = sess.run(None, feeds), opt.run(None, feeds)
                c.check(all((np.allclose(x, y, rtol=1e-5, atol=1e-6) if isinstance(x, np.ndarray) else x == y)
                            for x, y in zip(a, b)), f"{name}: optimized model computes other outputs in onnxruntime")
    c.finish()


if __name__ == "__main__":
    main()
