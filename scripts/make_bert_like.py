#!/usr/bin/env python3
"""Writes a BERT-base-sized encoder (12 layers, hidden 768, FFN 3072, vocab 30522; ~110M float32
parameters, ~440 MB) built with onnx.helper and seeded random weights, for benchmarks of
whole-model operations (inspect, check, convert). Same op pattern as a PyTorch export: Gather
embeddings, MatMul+Add projections, the LayerNorm and Gelu subgraphs spelled out, Softmax
attention with dynamic batch and sequence axes.

usage: make_bert_like.py OUT.onnx [--layers N] [--external]
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(layers, hidden=768, ffn=3072, vocab=30522, heads=12):
    rng = np.random.RandomState(0)
    inits, nodes = [], []

    def w(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.02).astype(np.float32), name))
        return name

    def c(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=f"{op}_{len(nodes)}", **attrs))
        return outs[0]

    def layer_norm(x, p):
        mean = node("ReduceMean", [x], [f"{p}.mean"], axes=[-1])
        d = node("Sub", [x, mean], [f"{p}.d"])
        sq = node("Pow", [d, c(f"{p}.two", 2.0)], [f"{p}.sq"])
        var = node("ReduceMean", [sq], [f"{p}.var"], axes=[-1])
        ve = node("Add", [var, c(f"{p}.eps", 1e-12)], [f"{p}.ve"])
        sd = node("Sqrt", [ve], [f"{p}.sd"])
        n = node("Div", [d, sd], [f"{p}.n"])
        s = node("Mul", [n, w(f"{p}.gamma", hidden)], [f"{p}.s"])
        return node("Add", [s, w(f"{p}.beta", hidden)], [f"{p}.out"])

    def linear(x, p, i, o):
        m = node("MatMul", [x, w(f"{p}.weight", i, o)], [f"{p}.mm"])
        return node("Add", [m, w(f"{p}.bias", o)], [f"{p}.out"])

    emb = node("Gather", [w("embeddings.word", vocab, hidden), "input_ids"], ["emb.word"])
    x = layer_norm(emb, "emb.ln")
    head_dim = hidden // heads
    shape4 = c("shape4", [0, 0, heads, head_dim], np.int64)
    shape3 = c("shape3", [0, 0, hidden], np.int64)
    for l in range(layers):
        p = f"layer{l}"
        def split(name):
            t = linear(x, f"{p}.{name}", hidden, hidden)
            r = node("Reshape", [t, shape4], [f"{p}.{name}.r"])
            return r
        q = node("Transpose", [split("q")], [f"{p}.qt"], perm=[0, 2, 1, 3])
        k = node("Transpose", [split("k")], [f"{p}.kt"], perm=[0, 2, 3, 1])
        v = node("Transpose", [split("v")], [f"{p}.vt"], perm=[0, 2, 1, 3])
        s = node("MatMul", [q, k], [f"{p}.scores"])
        s = node("Div", [s, c(f"{p}.scale", np.sqrt(head_dim))], [f"{p}.scaled"])
        a = node("Softmax", [s], [f"{p}.probs"], axis=-1)
        ctx = node("MatMul", [a, v], [f"{p}.ctx"])
        ctx = node("Transpose", [ctx], [f"{p}.ctxt"], perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, shape3], [f"{p}.ctxr"])
        o = linear(ctx, f"{p}.o", hidden, hidden)
        x = layer_norm(node("Add", [o, x], [f"{p}.res1"]), f"{p}.ln1")
        h = linear(x, f"{p}.ffn1", hidden, ffn)
        # erf Gelu: 0.5 * h * (1 + erf(h / sqrt(2)))
        e = node("Erf", [node("Div", [h, c(f"{p}.sqrt2", np.sqrt(2.0))], [f"{p}.hd"])], [f"{p}.erf"])
        g = node("Mul", [node("Mul", [h, node("Add", [e, c(f"{p}.one", 1.0)], [f"{p}.e1"])], [f"{p}.he"]),
                         c(f"{p}.half", 0.5)], [f"{p}.gelu"])
        f = linear(g, f"{p}.ffn2", ffn, hidden)
        x = layer_norm(node("Add", [f, x], [f"{p}.res2"]), f"{p}.ln2")
    node("Identity", [x], ["last_hidden_state"])
    graph = helper.make_graph(
        nodes, "bert_like",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxtool-bench")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--external", action="store_true")
    a = ap.parse_args()
    m = build(a.layers)
    if a.external:
        onnx.save(m, a.out, save_as_external_data=True, location=a.out.rsplit("/", 1)[-1] + ".data")
    else:
        onnx.save(m, a.out)


if __name__ == "__main__":
    main()
