#!/usr/bin/env python3
"""Times shape inference on a 1000-node model: `onnxtool convert --infer-shapes` minus plain
`onnxtool convert` on the same chain (Relu/Add over [batch, seq, 768]), best of N runs.
usage: build/venv/bin/python scripts/bench_shape_inference.py [--onnxtool build/onnxtool] [--runs 10]
"""
import argparse
import os
import subprocess
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save


def chain(n=1000):
    nodes, prev = [], "x"
    for i in range(n):
        out = f"v{i}"
        nodes.append(helper.make_node("Add", [prev, "w"], [out]) if i % 2 else helper.make_node("Relu", [prev], [out]))
        prev = out
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 768])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.zeros(768, np.float32), "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def best(cmd, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onnxtool", default=os.path.join(os.path.dirname(__file__), "..", "build", "onnxtool"))
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "chain.onnx")
        save(chain(), src)
        plain = best([a.onnxtool, "convert", src, "-o", os.path.join(d, "a.onnx")], a.runs)
        infer = best([a.onnxtool, "convert", "--infer-shapes", src, "-o", os.path.join(d, "b.onnx")], a.runs)
    print(f"1000-node chain: convert {plain * 1e3:.1f} ms, convert --infer-shapes {infer * 1e3:.1f} ms, "
          f"inference ~{(infer - plain) * 1e3:.1f} ms (best of {a.runs})")


if __name__ == "__main__":
    main()
