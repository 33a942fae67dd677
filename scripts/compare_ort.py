#!/usr/bin/env python3
"""Runs exported models on onnxtool's reference executor and on onnxruntime with the same random
inputs and reports the maximum absolute and relative error per output (pass: rtol 1e-4, atol
1e-5), and the peak memory of `onnxtool run` (GNU time's maximum resident set size).

usage: build/venv/bin/python scripts/compare_ort.py MODEL.onnx... [--onnxtool build/onnxtool]
Exit 1 if any output differs beyond tolerance.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

RTOL, ATOL = 1e-4, 1e-5


def make_inputs(model, rng, seq=16):
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dims = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.dim_param in ("seq", "sequence"):
                dims.append(seq)
            elif d.dim_param == "past":
                dims.append(5)
            else:
                dims.append(1)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        if vi.name == "attention_mask":
            feeds[vi.name] = np.ones(dims, dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[vi.name] = rng.randint(0, 1000, dims).astype(dtype)
        else:
            feeds[vi.name] = rng.rand(*dims).astype(dtype)
    return feeds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--onnxtool", default=os.path.join(os.path.dirname(__file__), "..", "build", "onnxtool"))
    a = ap.parse_args()
    bad = 0
    for path in a.models:
        model = onnx.load(path, load_external_data=False)
        feeds = make_inputs(model, np.random.RandomState(0))
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)
        with tempfile.TemporaryDirectory() as tmp:
            args = [a.onnxtool, "run", path, "-O", os.path.join(tmp, "out")]
            for k, v in feeds.items():
                p = os.path.join(tmp, f"{k}.npy")
                np.save(p, v)
                args += ["-i", f"{k}={p}"]
            r = subprocess.run(["/usr/bin/time", "-v"] + args, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{os.path.basename(path)}: onnxtool run failed: {r.stderr.strip().splitlines()[0]}")
                bad += 1
                continue
            rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
            secs = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", r.stderr).group(1)
            for o, w in zip(model.graph.output, want):
                safe = re.sub(r"[^A-Za-z0-9_.-]", "_", o.name)
                got = np.load(os.path.join(tmp, "out", f"{safe}.npy"))
                err = np.abs(got.astype(np.float64) - w.astype(np.float64))
                rel = err / np.maximum(np.abs(w.astype(np.float64)), 1e-30)
                ok = got.shape == w.shape and np.allclose(got, w, rtol=RTOL, atol=ATOL)
                bad += not ok
                print(f"{os.path.basename(path)}:{o.name}: shape {list(got.shape)} max abs err {err.max():.3g} "
                      f"max rel err {rel[np.abs(w) > 1e-3].max() if (np.abs(w) > 1e-3).any() else 0:.3g} "
                      f"{'OK' if ok else 'MISMATCH'}  (run {secs}, peak RSS {rss / 1024:.0f} MiB)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
