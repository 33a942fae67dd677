#!/usr/bin/env python3
"""Compares `onnxtool optimize --fuse` with onnx-simplifier (onnxsim) and onnxslim on the same
models: node count (subgraphs included), max abs output difference of each optimized model vs the
input model in onnxruntime (same random inputs), onnx.checker full check, and time per tool. A count
marked * comes from a model holding ops outside the ONNX standard that the input did not have
(onnxsim writes com.microsoft.Attention for BERT): it is shown, not compared, since such a model
runs on ONNX Runtime only.
Symbolic input dims stay symbolic (no fixed shapes are given to any tool); inputs are made with
batch-like dims 1, past-like dims 8 and other symbolic dims 16.

usage: build/venv/bin/python scripts/compare_optimizers.py [MODEL...] [--onnxtool PATH] [--tools LIST] [--keep DIR]
           [--onnxtool-args "ARGS"] [--json OUT] [--shape NAME=DIMS]... [--value NAME=NUMBER]...
       (--shape and --value choose the inputs of models that need particular ones, e.g. Silero VAD:
        --shape input=1,512 --shape state=2,1,128 --value sr=16000)
       (default models: build/models/*.onnx, onnx's backend light models, testdata/models)
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOOL_SCRIPTS = {
    "onnxsim": "import onnx, onnxsim, sys\nm, ok = onnxsim.simplify(onnx.load(sys.argv[1]))\n"
               "assert ok, 'onnxsim could not validate its result'\nonnx.save(m, sys.argv[2], save_as_external_data=m.ByteSize() > 2**31 - 2**26)\n",
    "onnxslim": "import onnx, onnxslim, sys\nm = onnxslim.slim(onnx.load(sys.argv[1]))\n"
                "onnx.save(m, sys.argv[2], save_as_external_data=m.ByteSize() > 2**31 - 2**26)\n",
}


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


STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


def nonstandard_ops(graph, found=None):
    """Ops of domains outside the ONNX standard (com.microsoft contrib ops that only ONNX Runtime runs)."""
    found = set() if found is None else found
    for node in graph.node:
        if node.domain not in STANDARD_DOMAINS:
            found.add(f"{node.domain}.{node.op_type}")
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                nonstandard_ops(a.g, found)
            for g in a.graphs:
                nonstandard_ops(g, found)
    return found


def dim_value(d, name):
    if d.HasField("dim_value"):
        return d.dim_value
    p = (d.dim_param or "").lower()
    if "batch" in p or p in ("n", "b"):
        return 1
    if "past" in p:
        return 8
    return 16


SHAPES = {}  # --shape NAME=DIMS
VALUES = {}  # --value NAME=NUMBER


def make_feeds(path):
    import onnxruntime as ort

    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    m = onnx.load(path, load_external_data=False)
    by_name = {i.name: i for i in m.graph.input}
    rng = np.random.default_rng(0)
    feeds = {}
    for i in s.get_inputs():
        t = by_name[i.name].type.tensor_type
        shape = SHAPES.get(i.name) or [dim_value(d, i.name) for d in t.shape.dim]
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        if i.name in VALUES:
            feeds[i.name] = np.full(shape, VALUES[i.name], dtype=dt)
        elif np.issubdtype(dt, np.integer):
            feeds[i.name] = rng.integers(0, 10, shape).astype(dt)
        elif dt == np.bool_:
            feeds[i.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[i.name] = rng.random(shape).astype(dt)
    return s, feeds


def run_ort(path, feeds):
    import onnxruntime as ort

    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def check_full(path):
    try:
        onnx.checker.check_model(path, full_check=True)
        return "ok"
    except Exception as e:  # noqa: BLE001
        return "FAIL: " + str(e).splitlines()[0][:120]


def optimize(tool, src, dst, onnxtool, extra):
    t0 = time.perf_counter()
    if tool == "onnxtool":
        cmd = [onnxtool, "optimize", src, "-o", dst, "--fuse"] + extra
    else:
        cmd = [sys.executable, "-c", TOOL_SCRIPTS[tool], src, dst]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return None, "timeout", time.perf_counter() - t0
    dt = time.perf_counter() - t0
    if p.returncode != 0 or not os.path.exists(dst):
        lines = (p.stderr or p.stdout).strip().splitlines()
        return None, "failed: " + (lines[-1][:150] if lines else f"exit {p.returncode}"), dt
    return dst, "", dt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--onnxtool", default=os.path.join(ROOT, "build", "onnxtool"))
    ap.add_argument("--tools", default="onnxtool,onnxsim,onnxslim")
    ap.add_argument("--onnxtool-args", default="", help="extra arguments for onnxtool optimize (one string)")
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--keep", metavar="DIR", help="keep the optimized models in DIR (default: a temporary "
                    "folder, removed after each model: optimized copies of large models take gigabytes)")
    ap.add_argument("--shape", action="append", default=[], help="NAME=D1,D2,...: dims of an input's random values")
    ap.add_argument("--value", action="append", default=[], help="NAME=NUMBER: fill an input with NUMBER (e.g. sr=16000)")
    args = ap.parse_args()
    for spec in args.shape:
        name, dims = spec.rsplit("=", 1)
        SHAPES[name] = [int(d) for d in dims.replace("x", ",").split(",") if d]
    for spec in args.value:
        name, v = spec.rsplit("=", 1)
        VALUES[name] = float(v)
    models = args.models
    if not models:
        light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
        models = (sorted(glob.glob(os.path.join(ROOT, "build", "models", "*.onnx")))
                  + sorted(glob.glob(os.path.join(light, "*.onnx")))
                  + sorted(glob.glob(os.path.join(ROOT, "testdata", "models", "*.onnx"))))
    tools = args.tools.split(",")
    results = []
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    hdr = f"{'model':<28} {'input':>6} " + " ".join(f"{t:>22}" for t in tools)
    print(hdr + "\n" + "-" * len(hdr) + "    (nodes / max abs diff / checker / seconds)")
    for src in models:
        name = os.path.splitext(os.path.basename(src))[0]
        row = {"model": name, "path": src, "input_nodes": count_nodes(onnx.load(src, load_external_data=False).graph)}
        try:
            _, feeds = make_feeds(src)
            want = run_ort(src, feeds)
        except Exception as e:  # noqa: BLE001
            print(f"{name:<28} input model does not run in onnxruntime: {str(e).splitlines()[0][:100]}")
            continue
        cells = []
        tmpdir = None if args.keep else tempfile.TemporaryDirectory(prefix="onnxtool-compare-")
        tmp = args.keep or tmpdir.name
        for tool in tools:
            dst = os.path.join(tmp, f"{name}.{tool}.onnx")
            out, err, secs = optimize(tool, src, dst, args.onnxtool, args.onnxtool_args.split())
            r = {"seconds": round(secs, 2)}
            if out is None:
                r["error"] = err
                cells.append(f"{'ERR':>22}")
            else:
                om = onnx.load(out, load_external_data=False)
                r["nodes"] = count_nodes(om.graph)
                # ops a tool added outside the standard (onnxsim writes com.microsoft.Attention):
                # such a count is not comparable for a model meant for every runtime
                r["nonstandard_ops"] = sorted(nonstandard_ops(om.graph) - nonstandard_ops(onnx.load(src, load_external_data=False).graph))
                r["checker"] = check_full(out)
                try:
                    got = run_ort(out, feeds)
                    r["max_abs_diff"] = max((float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
                                             if g.size else 0.0) for g, w in zip(got, want))
                    r["ok"] = all(np.allclose(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, want))
                except Exception as e:  # noqa: BLE001
                    r["error"] = "onnxruntime: " + str(e).splitlines()[0][:120]
                ck = "ok" if r["checker"] == "ok" else "BAD"
                diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else "ERR"
                mark = "*" if r["nonstandard_ops"] else " "
                cells.append(f"{r['nodes']:>4}{mark} {diff:>8} {ck:>3} {secs:>4.1f}")
            row[tool] = r
        if tmpdir:
            tmpdir.cleanup()
        results.append(row)
        print(f"{name:<28} {row['input_nodes']:>6} " + " ".join(cells), flush=True)
    # Verdicts the issue asks for.
    print()
    for row in results:
        ours = row.get("onnxtool", {})
        others = [row[t]["nodes"] for t in tools
                  if t != "onnxtool" and "nodes" in row.get(t, {}) and not row[t].get("nonstandard_ops")]
        notes = []
        if "nodes" in ours and others and ours["nodes"] > min(others):
            notes.append(f"more nodes than the best other tool ({ours['nodes']} > {min(others)})")
        if ours.get("checker", "ok") != "ok":
            notes.append("checker: " + ours["checker"])
        if "ok" in ours and not ours["ok"]:
            notes.append(f"outputs differ (max {ours['max_abs_diff']:.2e})")
        if "error" in ours:
            notes.append(ours["error"])
        if notes:
            print(f"{row['model']}: onnxtool: " + "; ".join(notes))
        for t in tools:
            if t != "onnxtool" and "error" in row.get(t, {}):
                print(f"{row['model']}: {t}: {row[t]['error']}")
            if row.get(t, {}).get("nonstandard_ops"):
                print(f"{row['model']}: {t} (*) wrote ops outside the ONNX standard, not compared: "
                      + ", ".join(row[t]["nonstandard_ops"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
