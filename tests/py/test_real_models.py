"""Real exported models with control flow: the Silero VAD models that the silero-vad package bundles
(torch.jit.script exports: nested If on the sample rate and on the LSTM state, STFT slicing).
For each: `check` accepts it, `run` matches ONNX Runtime, and `optimize --fuse` writes a model that
onnx.checker (full) accepts, that ONNX Runtime runs with the original's outputs at two batch sizes
and both sample rates, and that has no more nodes (subgraphs included) than onnxslim's and
onnx-simplifier's results. scripts/setup installs silero-vad (scripts/requirements-models.txt)."""
import importlib.util
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import Checker, run  # noqa: E402

MODELS = ["silero_vad.onnx", "silero_vad_16k_op15.onnx", "silero_vad_half.onnx", "silero_vad_op18_ifless.onnx"]


def silero_dir():
    spec = importlib.util.find_spec("silero_vad")  # locates the package without importing it (torch)
    if spec is None or not spec.origin:
        sys.exit("silero-vad is not installed in the venv: run scripts/setup")
    return os.path.join(os.path.dirname(spec.origin), "data")


def count_nodes(graph):
    n = 0
    for node in graph.node:
        n += 1
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                n += count_nodes(a.g)
            for g in a.graphs:
                n += count_nodes(g)
    return n


def feeds_for(sess, batch, sr, seed):
    rng = np.random.default_rng(seed)
    names = {i.name: i for i in sess.get_inputs()}
    feeds = {}
    samples = 512 if sr == 16000 else 256
    if "input" in names:
        dt = np.float16 if "float16" in names["input"].type else np.float32
        feeds["input"] = rng.standard_normal((batch, samples)).astype(dt)
    if "state" in names:
        feeds["state"] = (0.1 * rng.standard_normal((2, batch, 128))).astype(np.float32)
    if "sr" in names:
        feeds["sr"] = np.array(sr, dtype=np.int64)
    return feeds


def other_tool(tool, src, dst):
    import onnxslim
    if tool == "onnxslim":
        m = onnxslim.slim(onnx.load(src))
    else:
        import onnxsim
        m, ok = onnxsim.simplify(onnx.load(src))
        if not ok:
            return None
    onnx.save(m, dst)
    return count_nodes(m.graph)


def main():
    c = Checker("real models")
    d = silero_dir()
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            src = os.path.join(d, name)
            r = run(["check", src])
            c.check(r.returncode == 0, f"{name}: check exits 0: {r.stdout}{r.stderr}")
            sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
            if all(i.name != "sr" for i in sess.get_inputs()):
                rates = [16000]
            else:
                rates = [16000, 8000]
            # run against onnxruntime
            feeds = feeds_for(sess, 1, 16000, 0)
            args = ["run", src, "--json"]
            for k, v in feeds.items():
                p = os.path.join(tmp, f"{k}.npy")
                np.save(p, v)
                args += ["-i", f"{k}={p}"]
            out_dir = os.path.join(tmp, "out_" + name)
            r = run(args + ["-O", out_dir])
            want = sess.run(None, feeds)
            if c.check(r.returncode == 0, f"{name}: run: {r.stderr}"):
                for o, w in zip(sess.get_outputs(), want):
                    got = np.load(os.path.join(out_dir, o.name + ".npy"))
                    c.check(got.shape == w.shape and np.allclose(got, w, rtol=1e-3, atol=1e-4),
                            f"{name}: run output {o.name} vs onnxruntime: max diff "
                            f"{np.max(np.abs(got.astype(np.float64) - w)) if got.shape == w.shape else got.shape}")
            # optimize --fuse against the original in onnxruntime, and against the other tools
            dst = os.path.join(tmp, "opt_" + name)
            r = run(["optimize", src, "-o", dst, "--fuse"])
            if not c.check(r.returncode == 0, f"{name}: optimize --fuse: {r.stderr}"):
                continue
            try:
                onnx.checker.check_model(dst, full_check=True)
                c.check(True, "")
            except Exception as e:  # noqa: BLE001
                c.check(False, f"{name}: the optimized model fails onnx.checker: {e}")
            opt = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
            for batch in (1, 3):
                for sr in rates:
                    f = feeds_for(sess, batch, sr, batch * 7 + sr)
                    a, b = sess.run(None, f), opt.run(None, f)
                    c.check(all(x.shape == y.shape and np.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in zip(a, b)),
                            f"{name}: optimized outputs differ at batch {batch}, sr {sr}")
            ours = count_nodes(onnx.load(dst).graph)
            counts = {"onnxtool": ours}
            for tool in ("onnxslim", "onnxsim"):
                try:
                    n = other_tool(tool, src, os.path.join(tmp, f"{tool}_{name}"))
                except Exception:  # noqa: BLE001 (onnxsim fails on some of these models)
                    n = None
                if n is not None:
                    counts[tool] = n
                    c.check(ours <= n, f"{name}: onnxtool leaves {ours} nodes, {tool} {n}")
            print(f"{name}: nodes {count_nodes(onnx.load(src).graph)} -> {counts}")
        fp16_in_bodies(c, d, tmp)
    c.finish()


def fp16_in_bodies(c, d, tmp):
    """quantize --fp16 converts inside If bodies (the 16 kHz model computes everything in them):
    onnx.checker accepts the result and ONNX Runtime runs it within float16's tolerance."""
    src = os.path.join(d, "silero_vad_16k_op15.onnx")
    dst = os.path.join(tmp, "vad_fp16.onnx")
    sr = os.path.join(tmp, "sr16k.npy")
    np.save(sr, np.array(16000, dtype=np.int64))
    r = run(["quantize", src, "-o", dst, "--fp16", "--shape", "input=1,512", "--shape", "state=2,1,128", "-i", f"sr={sr}",
             "--json"])
    if not c.check(r.returncode == 0, f"--fp16 on {src}: {r.stderr}"):
        return
    import json
    rep = json.loads(r.stdout)
    converted = rep.get("nodes_quantized", 0)
    c.check(converted >= 50, f"--fp16 converts the If bodies' nodes: {converted} converted ({r.stdout[:400]})")
    try:
        onnx.checker.check_model(dst, full_check=True)
        c.check(True, "")
    except Exception as e:  # noqa: BLE001
        c.check(False, f"the --fp16 model fails onnx.checker: {e}")
    ref, half = ort.InferenceSession(src, providers=["CPUExecutionProvider"]), ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
    for seed in range(3):
        f = feeds_for(ref, 1, 16000, seed)
        f16 = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in f.items()}
        for o, (a, b) in zip(ref.get_outputs(), zip(ref.run(None, f), half.run(None, f16))):
            err = float(np.max(np.abs(a - b.astype(np.float32))))
            c.check(b.dtype == np.float16 and err <= 1e-2 * float(np.max(np.abs(a))) + 1e-3,
                    f"--fp16 silero 16k {o.name}: {b.dtype}, max abs diff {err} (float32 up to {np.max(np.abs(a))})")


if __name__ == "__main__":
    main()
