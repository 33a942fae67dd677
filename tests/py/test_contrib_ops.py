"""ONNX Runtime's contrib ops (domain com.microsoft): for small models built with onnx.helper, one
per kernel and attribute form, and for a BERT-like model fused by ORT's transformer optimizer and
then quantized by ORT's quantize_dynamic: `check` exits 0, `inspect --shapes --json` states, for
every value, the shape ONNX Runtime computes, and `run` (ref and cpu executors) gives ONNX
Runtime's outputs (float: rtol/atol 1e-4; quantized outputs: at most one quantization step;
the quantized BERT: cosine similarity >= 0.999). Ops of unknown domains stay unverifiable."""
import importlib.util
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

MS = "com.microsoft"
rng = np.random.default_rng(0)


def f32(*shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def u8(*shape):
    return rng.integers(0, 256, shape).astype(np.uint8)


def i8(*shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def model(nodes, inputs, outputs, inits=(), opset=17):
    """inputs: {name: array} fed at run time; outputs: names (types left to inference)."""
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)], ir_version=9)


def ort_outputs(path, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort_session(path, so, providers=["CPUExecutionProvider"])
    return [o.name for o in s.get_outputs()], s.run(None, feeds)


def our_outputs(c, tmp, path, feeds, names, executor="ref"):
    args = ["run", path, "--executor", executor, "-O", os.path.join(tmp, "out")]
    for n, a in feeds.items():
        p = os.path.join(tmp, f"{n}.npy")
        np.save(p, a)
        args += ["-i", f"{n}={p}"]
    r = run(args)
    if not c.check(r.returncode == 0, f"{os.path.basename(path)}: run --executor {executor} exit {r.returncode}: {r.stderr.strip()}"):
        return None
    return [np.load(os.path.join(tmp, "out", f"{file_safe(n)}.npy")) for n in names]


def file_safe(name):
    """The file name `run -O` gives a value (apps/run.cpp fileSafe)."""
    s = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_.:") else "_" for ch in name)
    return "output" if s in ("", ".", "..") else s


def compare(c, what, name, want, got, quantized=False, cosine=None):
    if not c.check(want.shape == got.shape and want.dtype == got.dtype,
                   f"{what}: '{name}' is {got.dtype}{list(got.shape)}, ONNX Runtime gives {want.dtype}{list(want.shape)}"):
        return
    if cosine is not None:
        a, b = want.astype(np.float64).ravel(), got.astype(np.float64).ravel()
        if np.array_equal(a, b):
            return  # equal (all-zero tensors have no cosine)
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))
        c.check(cos >= cosine, f"{what}: '{name}' cosine similarity {cos:.6f} < {cosine}")
        return
    if quantized:
        d = np.abs(want.astype(np.int64) - got.astype(np.int64)).max(initial=0)
        c.check(d <= 1, f"{what}: '{name}' differs by {d} quantization steps")
        return
    ok = np.allclose(got, want, rtol=1e-4, atol=1e-4)
    c.check(ok, f"{what}: '{name}' differs, max abs diff {np.abs(got.astype(np.float64) - want).max(initial=0)}")


def check_case(c, tmp, what, m, feeds, quantized=(), cosine=None, executors=("ref", "cpu"), numpy_oracle=None,
               data_dims=()):
    """numpy_oracle: feeds -> outputs, for ops ONNX Runtime implements on CUDA only. data_dims:
    outputs whose dims may be a fresh symbol (sizes that are input data, not input shapes)."""
    path = os.path.join(tmp, what + ".onnx")
    onnx.save(m, path)
    if numpy_oracle:
        names, want = [o.name for o in m.graph.output], numpy_oracle(feeds)
    else:
        names, want = ort_outputs(path, feeds)
    # graph outputs declare the element type and rank ONNX Runtime gives them (unnamed dims)
    for o, w in zip(m.graph.output, want):
        if not o.type.HasField("tensor_type"):
            o.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(w.dtype)
            o.type.tensor_type.shape.SetInParent()
            for _ in w.shape:
                o.type.tensor_type.shape.dim.add()
    onnx.save(m, path)
    r = run(["check", path])
    c.check(r.returncode == 0 and "unverifiable" not in r.stdout + r.stderr,
            f"{what}: check exit {r.returncode}: {(r.stdout + r.stderr).strip()[:400]}")
    # inspect --shapes states ONNX Runtime's shape for every output (all node outputs are graph outputs)
    r = run(["inspect", "--shapes", "--json", path])
    if c.check(r.returncode == 0, f"{what}: inspect --shapes: {r.stderr}"):
        stated = {v["name"]: v for v in json.loads(r.stdout)["values"] if v["graph"] == ""}
        for n, w in zip(names, want):
            # every dim stated: a number equal to ONNX Runtime's, or a symbol of a symbolic input dim
            s = stated.get(n, {}).get("shape")
            ok = s is not None and len(s) == w.ndim and all(
                d == r if isinstance(d, int) else isinstance(d, str) and d and (n in data_dims or not d.startswith("unk__"))
                for d, r in zip(s, w.shape))
            c.check(ok, f"{what}: inspect --shapes states {s} for '{n}', ONNX Runtime computes {list(w.shape)}")
    for ex in executors:
        got = our_outputs(c, tmp, path, feeds, names, ex)
        if got is None:
            continue
        for n, w, g in zip(names, want, got):
            compare(c, f"{what} ({ex})", n, w, g, quantized=n in quantized, cosine=cosine)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain=MS, **attrs)


def transformer_cases(c, tmp):
    B, S, H, N = 2, 5, 16, 4
    x = f32(B, S, H)
    for op, extra in (("Gelu", {}), ("QuickGelu", {}), ("QuickGelu", {"alpha": 1.0})):
        check_case(c, tmp, f"{op}{len(extra)}", model([node(op, ["x"], ["y"], **extra)], {"x": x}, ["y"]), {"x": x})
    for op in ("BiasGelu", "FastGelu"):
        check_case(c, tmp, op, model([node(op, ["x", "b"], ["y"])], {"x": x}, ["y"], [("b", f32(H))]), {"x": x})
    check_case(c, tmp, "FastGelu_nobias", model([node("FastGelu", ["x"], ["y"])], {"x": x}, ["y"]), {"x": x})
    # ONNX Runtime implements BiasAdd on CUDA only: numpy is the oracle
    bias_add, sk = f32(H), f32(B, S, H)
    check_case(c, tmp, "BiasAdd", model([node("BiasAdd", ["x", "b", "s"], ["y"])], {"x": x, "s": sk}, ["y"], [("b", bias_add)]),
               {"x": x, "s": sk}, numpy_oracle=lambda f: [f["x"] + bias_add + f["s"]])
    gamma, beta, bias = f32(H), f32(H), f32(H)
    skip = f32(B, S, H)
    check_case(c, tmp, "SkipLayerNormalization",
               model([node("SkipLayerNormalization", ["x", "skip", "g", "be", "bi"], ["y", "mean", "inv", "sum"], epsilon=1e-5)],
                     {"x": x, "skip": skip}, ["y", "mean", "inv", "sum"], [("g", gamma), ("be", beta), ("bi", bias)]),
               {"x": x, "skip": skip})
    check_case(c, tmp, "SkipLayerNormalization_min",
               model([node("SkipLayerNormalization", ["x", "skip", "g"], ["y"])], {"x": x, "skip": skip}, ["y"], [("g", gamma)]),
               {"x": x, "skip": skip})
    for shape in ((1, S, H), (S, H)):  # a skip broadcast over the batch
        sk = f32(*shape)
        check_case(c, tmp, f"SkipLayerNormalization_skip{len(shape)}d",
                   model([node("SkipLayerNormalization", ["x", "skip", "g", "be"], ["y"])], {"x": x, "skip": sk}, ["y"],
                         [("g", gamma), ("be", beta)]), {"x": x, "skip": sk})
    check_case(c, tmp, "SkipSimplifiedLayerNormalization",
               model([node("SkipSimplifiedLayerNormalization", ["x", "skip", "g", "bi"], ["y", "", "inv", "sum"], epsilon=1e-6)],
                     {"x": x, "skip": skip}, ["y", "inv", "sum"], [("g", gamma), ("bi", bias)]),
               {"x": x, "skip": skip})
    # EmbedLayerNormalization: with segments and a mask, then without either
    ids = rng.integers(0, 30, (B, S)).astype(np.int32)
    seg = rng.integers(0, 2, (B, S)).astype(np.int32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    tables = [("we", f32(30, H)), ("pe", f32(16, H)), ("se", f32(2, H)), ("g", gamma), ("be", beta)]
    check_case(c, tmp, "EmbedLayerNormalization",
               model([node("EmbedLayerNormalization", ["ids", "seg", "we", "pe", "se", "g", "be", "mask"], ["y", "mi", "sum"],
                           epsilon=1e-5)], {"ids": ids, "seg": seg, "mask": mask}, ["y", "mi", "sum"], tables),
               {"ids": ids, "seg": seg, "mask": mask})
    check_case(c, tmp, "EmbedLayerNormalization_nosegment",
               model([node("EmbedLayerNormalization", ["ids", "", "we", "pe", "", "g", "be"], ["y", "mi"])],
                     {"ids": ids}, ["y", "mi"], [t for t in tables if t[0] != "se"]), {"ids": ids})
    # FusedMatMul
    a, b = f32(3, 4, 5), f32(3, 6, 5)
    check_case(c, tmp, "FusedMatMul", model([node("FusedMatMul", ["a", "b"], ["y"], transB=1, alpha=0.5)], {"a": a, "b": b}, ["y"]),
               {"a": a, "b": b})
    a2 = f32(5, 4)
    check_case(c, tmp, "FusedMatMul_transA", model([node("FusedMatMul", ["a", "b"], ["y"], transA=1)], {"a": a2, "b": f32(2, 5, 3)}, ["y"]),
               {"a": a2, "b": f32(2, 5, 3)})
    # Attention: plain, raw 2-D mask, 1-D lengths, unidirectional with past, attention_bias, qkv_hidden_sizes
    w, bqkv = f32(H, 3 * H, scale=0.3), f32(3 * H)
    att = lambda ins, outs, **kw: node("Attention", ins, outs, num_heads=N, **kw)  # noqa: E731
    check_case(c, tmp, "Attention", model([att(["x", "w", "b"], ["y"])], {"x": x}, ["y"], [("w", w), ("b", bqkv)]), {"x": x})
    m2 = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    check_case(c, tmp, "Attention_mask2d", model([att(["x", "w", "b", "m"], ["y"])], {"x": x, "m": m2}, ["y"], [("w", w), ("b", bqkv)]),
               {"x": x, "m": m2})
    m1 = np.array([3, 5], np.int32)
    check_case(c, tmp, "Attention_mask1d", model([att(["x", "w", "b", "m"], ["y"])], {"x": x, "m": m1}, ["y"], [("w", w), ("b", bqkv)]),
               {"x": x, "m": m1})
    m1s = np.array([4, 5, 1, 0], np.int32)  # end and start positions
    check_case(c, tmp, "Attention_mask1d_start", model([att(["x", "w", "b", "m"], ["y"])], {"x": x, "m": m1s}, ["y"],
                                                         [("w", w), ("b", bqkv)]), {"x": x, "m": m1s})
    m3 = (rng.random((B, S, S)) > 0.3).astype(np.int32)
    m3[:, :, 0] = 1
    check_case(c, tmp, "Attention_mask3d", model([att(["x", "w", "b", "m"], ["y"])], {"x": x, "m": m3}, ["y"], [("w", w), ("b", bqkv)]),
               {"x": x, "m": m3})
    past = f32(2, B, N, 3, H // N)
    check_case(c, tmp, "Attention_past_causal",
               model([att(["x", "w", "b", "", "past"], ["y", "present"], unidirectional=1)], {"x": x, "past": past},
                     ["y", "present"], [("w", w), ("b", bqkv)]), {"x": x, "past": past})
    ab = f32(1, N, S, S)
    check_case(c, tmp, "Attention_bias", model([att(["x", "w", "b", "", "", "ab"], ["y"], scale=0.3)], {"x": x, "ab": ab}, ["y"],
                                                 [("w", w), ("b", bqkv)]), {"x": x, "ab": ab})
    w2, b2 = f32(H, 16 + 16 + 8, scale=0.3), f32(40)
    check_case(c, tmp, "Attention_qkv_sizes", model([att(["x", "w", "b"], ["y"], qkv_hidden_sizes=[16, 16, 8])], {"x": x}, ["y"],
                                                      [("w", w2), ("b", b2)]), {"x": x})
    # MultiHeadAttention: self with bias and key padding mask; cross with another length; past
    L = 7
    q, k, v = f32(B, S, H), f32(B, L, H), f32(B, L, H)
    kpm = np.array([[1] * 5 + [0] * 2, [1] * 7], np.int32)
    check_case(c, tmp, "MultiHeadAttention",
               model([node("MultiHeadAttention", ["q", "k", "v", "bias", "kpm"], ["y"], num_heads=N)],
                     {"q": q, "k": k, "v": v, "kpm": kpm}, ["y"], [("bias", f32(3 * H))]), {"q": q, "k": k, "v": v, "kpm": kpm})
    abm = f32(B, 1, S, L)
    check_case(c, tmp, "MultiHeadAttention_bias",
               model([node("MultiHeadAttention", ["q", "k", "v", "", "", "ab"], ["y"], num_heads=N, scale=0.5)],
                     {"q": q, "k": k, "v": v, "ab": abm}, ["y"]), {"q": q, "k": k, "v": v, "ab": abm})
    ks, vs, abs_ = f32(B, S, H), f32(B, S, H), f32(B, 1, S, S)
    feeds = {"q": q, "k": ks, "v": vs, "ab": abs_}
    check_case(c, tmp, "MultiHeadAttention_bias_causal",
               model([node("MultiHeadAttention", ["q", "k", "v", "", "", "ab"], ["y"], num_heads=N, unidirectional=1, scale=0.5)],
                     feeds, ["y"]), feeds)
    # causal cross attention (key length != query length), longer and shorter keys, with a past
    # and a key padding mask: ONNX Runtime's CPU kernel masks key t > past + s on every query row
    # s but the last, which sees every key
    pk, pv = f32(B, N, 2, H // N), f32(B, N, 2, H // N)
    for Lc in (7, 3):
        kc, vc = f32(B, Lc, H), f32(B, Lc, H)
        feeds = {"q": q, "k": kc, "v": vc}
        check_case(c, tmp, f"MultiHeadAttention_causal_cross{Lc}",
                   model([node("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=N, unidirectional=1)], feeds, ["y"]),
                   feeds)
        feeds = {"q": q, "k": kc, "v": vc, "pk": pk, "pv": pv, "kpm": np.ones((B, 2 + Lc), np.int32)}
        feeds["kpm"][0, -1] = 0
        check_case(c, tmp, f"MultiHeadAttention_causal_cross{Lc}_past",
                   model([node("MultiHeadAttention", ["q", "k", "v", "", "kpm", "", "pk", "pv"], ["y", "prk", "prv"],
                               num_heads=N, unidirectional=1)], feeds, ["y", "prk", "prv"]), feeds)
    # packed QKV [B, S, N, 3, H] and packed KV [B, L, N, 2, H]: ONNX Runtime's CPU kernel refuses
    # both, so the oracle is ONNX Runtime on the same attention with separate query, key and value
    Hh = H // N

    def unpacked_oracle(inputs, outputs, attrs, unpack):
        def oracle(f):
            sep = unpack(f)
            path = os.path.join(tmp, "mha_unpacked.onnx")
            onnx.save(model([node("MultiHeadAttention", inputs, outputs, num_heads=N, **attrs)], sep, outputs), path)
            return ort_outputs(path, sep)[1]
        return oracle

    qkv = f32(B, S, N, 3, Hh)
    split3 = lambda f: {"q": f["qkv"][:, :, :, 0].reshape(B, S, H), "k": f["qkv"][:, :, :, 1].reshape(B, S, H),  # noqa: E731
                        "v": f["qkv"][:, :, :, 2].reshape(B, S, H)}
    for i, attrs in enumerate(({}, {"unidirectional": 1}, {"scale": 0.3})):
        check_case(c, tmp, f"MultiHeadAttention_packed_qkv{i}",
                   model([node("MultiHeadAttention", ["qkv"], ["y"], num_heads=N, **attrs)], {"qkv": qkv}, ["y"]), {"qkv": qkv},
                   numpy_oracle=unpacked_oracle(["q", "k", "v"], ["y"], attrs, split3))
    kvp = f32(B, L, N, 2, Hh)
    split2 = lambda f: {"q": f["q"], "k": f["kv"][:, :, :, 0].reshape(B, L, H), "v": f["kv"][:, :, :, 1].reshape(B, L, H),  # noqa: E731
                        **({"kpm": f["kpm"]} if "kpm" in f else {})}
    check_case(c, tmp, "MultiHeadAttention_packed_kv",
               model([node("MultiHeadAttention", ["q", "kv", "", "", "kpm"], ["y"], num_heads=N)], {"q": q, "kv": kvp, "kpm": kpm},
                     ["y"]), {"q": q, "kv": kvp, "kpm": kpm},
               numpy_oracle=unpacked_oracle(["q", "k", "v", "", "kpm"], ["y"], {}, split2))
    check_case(c, tmp, "MultiHeadAttention_past",
               model([node("MultiHeadAttention", ["q", "k", "v", "", "", "", "pk", "pv"], ["y", "prk", "prv"], num_heads=N)],
                     {"q": q, "k": k, "v": v, "pk": pk, "pv": pv}, ["y", "prk", "prv"]),
               {"q": q, "k": k, "v": v, "pk": pk, "pv": pv})


def gqa_cases(c, tmp):
    """GroupQueryAttention: a prompt, then a decoding step over its present, packed QKV, rotary."""
    B, S, N, kvN, H, T = 2, 4, 4, 2, 16, 16  # ORT rotates heads of a multiple of 16 only
    q, k, v = f32(B, S, N * H), f32(B, S, kvN * H), f32(B, S, kvN * H)
    seq = lambda n: np.full((B,), n - 1, np.int32)  # noqa: E731
    tot = lambda n: np.array(n, np.int32)  # noqa: E731
    gqa = lambda ins, **kw: node("GroupQueryAttention", ins, ["y", "pk", "pv"], num_heads=N, kv_num_heads=kvN, **kw)  # noqa: E731
    feeds = {"q": q, "k": k, "v": v, "sl": seq(S), "tl": tot(S)}
    check_case(c, tmp, "GroupQueryAttention_prompt", model([gqa(["q", "k", "v", "", "", "sl", "tl"])], feeds, ["y", "pk", "pv"]),
               feeds, data_dims={"pk", "pv"})
    pk, pv = f32(B, kvN, S, H), f32(B, kvN, S, H)
    q1, k1, v1 = f32(B, 1, N * H), f32(B, 1, kvN * H), f32(B, 1, kvN * H)
    feeds = {"q": q1, "k": k1, "v": v1, "pk_in": pk, "pv_in": pv, "sl": seq(S + 1), "tl": tot(S + 1)}
    check_case(c, tmp, "GroupQueryAttention_decode",
               model([gqa(["q", "k", "v", "pk_in", "pv_in", "sl", "tl"])], feeds, ["y", "pk", "pv"]), feeds, data_dims={"pk", "pv"})
    qkv = f32(B, S, (N + 2 * kvN) * H)
    ang = np.arange(T)[:, None] * (1.0 / 10000 ** (np.arange(0, H, 2) / H))[None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    for inter in (0, 1):
        feeds = {"qkv": qkv, "sl": seq(S), "tl": tot(S)}
        check_case(c, tmp, f"GroupQueryAttention_packed_rotary{inter}",
                   model([gqa(["qkv", "", "", "", "", "sl", "tl", "cos", "sin"], do_rotary=1, rotary_interleaved=inter)], feeds,
                         ["y", "pk", "pv"], [("cos", cos), ("sin", sin)]), feeds, data_dims={"pk", "pv"})
    feeds = {"q": q1, "k": k1, "v": v1, "pk_in": pk, "pv_in": pv, "sl": seq(S + 1), "tl": tot(S + 1)}
    check_case(c, tmp, "GroupQueryAttention_decode_rotary_window",
               model([gqa(["q", "k", "v", "pk_in", "pv_in", "sl", "tl", "cos", "sin"], do_rotary=1, local_window_size=3)], feeds,
                     ["y", "pk", "pv"], [("cos", cos), ("sin", sin)]), feeds, data_dims={"pk", "pv"})
    # softcap, smooth_softmax, attention_bias, head_sink: on a prompt and on a decoding step
    prompt = {"q": q, "k": k, "v": v, "sl": seq(S), "tl": tot(S)}
    step = {"q": q1, "k": k1, "v": v1, "pk_in": pk, "pv_in": pv, "sl": seq(S + 1), "tl": tot(S + 1)}
    for when, feeds, ins, T_ in (("prompt", prompt, ["q", "k", "v", "", "", "sl", "tl"], S),
                                 ("decode", step, ["q", "k", "v", "pk_in", "pv_in", "sl", "tl"], S + 1)):
        Sq = feeds["q"].shape[1]
        extras = (("softcap", {"softcap": 2.0}, {}, ()),
                  ("smooth", {"smooth_softmax": 1}, {}, ()),
                  ("bias", {}, {"ab": f32(B, N, Sq, T_)}, ("", "", "", "ab")),
                  ("bias_bcast", {}, {"ab": f32(1, 1, Sq, T_)}, ("", "", "", "ab")),
                  ("sink", {}, {}, ("", "", "", "", "sink")),
                  ("softcap_bias_sink", {"softcap": 3.0}, {"ab": f32(B, 1, Sq, T_)}, ("", "", "", "ab", "sink")))
        for name, attrs, more, tail in extras:
            f = dict(feeds, **more)
            inits = [("sink", f32(N))] if "sink" in tail else []
            check_case(c, tmp, f"GroupQueryAttention_{when}_{name}",
                       model([gqa(ins + list(tail), **attrs)], f, ["y", "pk", "pv"], inits), f, data_dims={"pk", "pv"})


def rotary_cases(c, tmp):
    B, S, N, H, P = 2, 5, 2, 8, 16
    ang = np.arange(P)[:, None] * (1.0 / 10000 ** (np.arange(0, H, 2) / H))[None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    pos = rng.integers(0, P, (B, S)).astype(np.int64)
    for interleaved in (0, 1):
        x = f32(B, S, N * H)
        check_case(c, tmp, f"RotaryEmbedding_bsd_{interleaved}",
                   model([node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], interleaved=interleaved, num_heads=N)],
                         {"x": x, "pos": pos}, ["y"], [("cos", cos), ("sin", sin)]), {"x": x, "pos": pos})
    x4 = f32(B, N, S, H)
    check_case(c, tmp, "RotaryEmbedding_bnsh",
               model([node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"])], {"x": x4, "pos": pos}, ["y"],
                     [("cos", cos), ("sin", sin)]), {"x": x4, "pos": pos})
    # a partial rotation (rotary_embedding_dim < head size) with an offset position
    x = f32(B, S, N * H)
    off = np.array([3], np.int64)
    check_case(c, tmp, "RotaryEmbedding_partial",
               model([node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], num_heads=N, rotary_embedding_dim=4)],
                     {"x": x, "pos": off}, ["y"], [("cos", cos[:, :2].copy()), ("sin", sin[:, :2].copy())]), {"x": x, "pos": off})


def fused_cases(c, tmp):
    x = f32(1, 3, 8, 8)
    w, b = f32(4, 3, 3, 3), f32(4)
    check_case(c, tmp, "FusedConv_relu", model([node("FusedConv", ["x", "w", "b"], ["y"], activation="Relu", pads=[1, 1, 1, 1])],
                                               {"x": x}, ["y"], [("w", w), ("b", b)]), {"x": x})
    z = f32(1, 4, 6, 6)
    check_case(c, tmp, "FusedConv_sum_leaky",
               model([node("FusedConv", ["x", "w", "b", "z"], ["y"], activation="LeakyRelu", activation_params=[0.2])],
                     {"x": x, "z": z}, ["y"], [("w", w), ("b", b)]), {"x": x, "z": z})
    a = f32(3, 5)
    check_case(c, tmp, "FusedGemm", model([node("FusedGemm", ["a", "w", "c"], ["y"], activation="LeakyRelu", activation_alpha=0.1,
                                               transB=1, alpha=0.5)], {"a": a}, ["y"], [("w", f32(4, 5)), ("c", f32(4))]), {"a": a})


def quantized_cases(c, tmp):
    sc = lambda v: np.array(v, np.float32)  # noqa: E731
    zp = lambda v, t=np.uint8: np.array(v, t)  # noqa: E731
    a, b = u8(2, 3, 4), u8(3, 1)
    qa = [("sa", sc(0.05)), ("za", zp(120)), ("sb", sc(0.1)), ("zb", zp(130)), ("sc", sc(0.2)), ("zc", zp(128))]
    for op in ("QLinearAdd", "QLinearMul"):
        check_case(c, tmp, op, model([node(op, ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"])], {"a": a, "b": b}, ["y"], qa),
                   {"a": a, "b": b}, quantized={"y"})
    ai = i8(2, 3, 4)
    check_case(c, tmp, "QLinearAdd_int8",
               model([node("QLinearAdd", ["a", "sa", "za", "a", "sa", "za", "sc", "zc"], ["y"])], {"a": ai}, ["y"],
                     [("sa", sc(0.05)), ("za", zp(3, np.int8)), ("sc", sc(0.07)), ("zc", zp(-4, np.int8))]), {"a": ai}, quantized={"y"})
    x = u8(1, 4, 5, 5)
    for op, kw in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})):
        check_case(c, tmp, op, model([node(op, ["x", "sa", "za", "sc", "zc"], ["y"], **kw)], {"x": x}, ["y"], qa), {"x": x},
                   quantized={"y"})
    check_case(c, tmp, "QLinearAveragePool",
               model([node("QLinearAveragePool", ["x", "sa", "za", "sc", "zc"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                           pads=[1, 1, 1, 1], count_include_pad=1)], {"x": x}, ["y"], qa), {"x": x}, quantized={"y"})
    check_case(c, tmp, "QLinearGlobalAveragePool",
               model([node("QLinearGlobalAveragePool", ["x", "sa", "za", "sc", "zc"], ["y"])], {"x": x}, ["y"], qa), {"x": x},
               quantized={"y"})
    x2 = u8(1, 2, 5, 5)
    check_case(c, tmp, "QLinearConcat",
               model([node("QLinearConcat", ["sc", "zc", "x", "sa", "za", "x2", "sb", "zb"], ["y"], axis=1)], {"x": x, "x2": x2}, ["y"], qa),
               {"x": x, "x2": x2}, quantized={"y"})
    A, B = u8(3, 8), i8(8, 5)
    gemm_inits = [("sa", sc(0.05)), ("za", zp(120)), ("B", B), ("sb", sc(0.02)), ("zb", zp(0, np.int8)),
                  ("C", rng.integers(-500, 500, (5,)).astype(np.int32)), ("sy", sc(0.3)), ("zy", zp(128))]
    check_case(c, tmp, "QGemm_float", model([node("QGemm", ["A", "sa", "za", "B", "sb", "zb", "C"], ["y"], alpha=0.5)],
                                            {"A": A}, ["y"], gemm_inits[:6]), {"A": A})
    check_case(c, tmp, "QGemm_quant", model([node("QGemm", ["A", "sa", "za", "B", "sb", "zb", "C", "sy", "zy"], ["y"])],
                                            {"A": A}, ["y"], gemm_inits), {"A": A}, quantized={"y"})
    A2 = u8(2, 3, 8)
    check_case(c, tmp, "MatMulIntegerToFloat",
               model([node("MatMulIntegerToFloat", ["A", "B", "sa", "sbv", "za", "zbv", "bias"], ["y"])], {"A": A2}, ["y"],
                     [("B", u8(8, 5)), ("sa", sc(0.05)), ("sbv", (0.01 + 0.02 * rng.random(5)).astype(np.float32)), ("za", zp(120)),
                      ("zbv", u8(5)), ("bias", f32(5))]), {"A": A2})
    X = f32(2, 3, 8)
    check_case(c, tmp, "DynamicQuantizeMatMul",
               model([node("DynamicQuantizeMatMul", ["X", "B", "sb", "zb", "bias"], ["y"])], {"X": X}, ["y"],
                     [("B", i8(8, 5)), ("sb", sc(0.02)), ("zb", zp(0, np.int8)), ("bias", f32(5))]), {"X": X})
    # MatMulNBits, 4 bits, K=40 (a partial last block of 32), N=6, packed uint8 zero points
    K, Nn, bs = 40, 6, 32
    blocks = (K + bs - 1) // bs
    Bq = u8(Nn, blocks, bs // 2)
    scales = (0.01 + 0.05 * rng.random(Nn * blocks)).astype(np.float32)
    zps = u8(Nn, (blocks + 1) // 2)
    Am = f32(3, K)
    check_case(c, tmp, "MatMulNBits",
               model([node("MatMulNBits", ["A", "B", "s", "z"], ["y"], K=K, N=Nn, bits=4, block_size=bs)], {"A": Am}, ["y"],
                     [("B", Bq), ("s", scales), ("z", zps)]), {"A": Am})
    check_case(c, tmp, "MatMulNBits_nozp",
               model([node("MatMulNBits", ["A", "B", "s"], ["y"], K=K, N=Nn, bits=4, block_size=bs)], {"A": Am}, ["y"],
                     [("B", Bq), ("s", scales)]), {"A": Am})
    # g_idx (GPTQ's act-order): the group, so scale and zero point, of each of the K rows; with
    # packed, float and no zero points
    K2 = 64
    Bq2, s2 = u8(Nn, 2, bs // 2), (0.01 + 0.05 * rng.random(Nn * 2)).astype(np.float32)
    A2 = f32(3, K2)
    for gname, g in (("shuffled", rng.permutation(np.arange(K2) // bs).astype(np.int32)),
                     ("identity", (np.arange(K2) // bs).astype(np.int32))):
        for zname, zin in (("float", [("z", f32(Nn * 2))]), ("none", [])):
            ins = ["A", "B", "s", "z" if zin else "", "g"]
            check_case(c, tmp, f"MatMulNBits_gidx_{gname}_{zname}",
                       model([node("MatMulNBits", ins, ["y"], K=K2, N=Nn, bits=4, block_size=bs)], {"A": A2}, ["y"],
                             [("B", Bq2), ("s", s2), ("g", g)] + zin), {"A": A2})
    # g_idx with packed uint8 zero points: ONNX Runtime's CPU kernel ignores the zero points (it
    # gives the output of the default 8), the spec applies them: refused, exit 3
    p = os.path.join(tmp, "nbits_gidx_packed_zp.onnx")
    onnx.save(model([node("MatMulNBits", ["A", "B", "s", "z", "g"], ["y"], K=K2, N=Nn, bits=4, block_size=bs)], {"A": A2}, ["y"],
                    [("B", Bq2), ("s", s2), ("z", u8(Nn, 1)), ("g", (np.arange(K2) // bs).astype(np.int32))]), p)
    for ex in ("ref", "cpu"):
        r = run(["run", p, "--random", "--executor", ex])
        c.check(r.returncode == 3 and "g_idx with packed uint8 zero points" in r.stderr,
                f"MatMulNBits g_idx + packed zero points on {ex}: exit {r.returncode} {r.stderr}")
    xc = u8(1, 3, 6, 6)
    check_case(c, tmp, "ms_QLinearConv",
               model([node("QLinearConv", ["x", "sa", "za", "w", "sw", "zw", "sc", "zc", "b"], ["y"], pads=[1, 1, 1, 1])],
                     {"x": xc}, ["y"], qa[:2] + [("w", u8(4, 3, 3, 3)), ("sw", sc(0.01)), ("zw", zp(128))] + qa[4:] +
                     [("b", rng.integers(-100, 100, (4,)).astype(np.int32))]), {"x": xc}, quantized={"y"})
    xq = f32(2, 6)
    check_case(c, tmp, "ms_QuantizeLinear_DequantizeLinear",
               model([node("QuantizeLinear", ["x", "sa", "za"], ["q"]), node("DequantizeLinear", ["q", "sa", "za"], ["y"])],
                     {"x": xq}, ["q", "y"], qa[:2]), {"x": xq}, quantized={"q"})
    # QEmbedLayerNormalization: uint8 tables, each with its scale and zero point
    Bq, Sq, Hq = 2, 5, 8
    ids = rng.integers(0, 20, (Bq, Sq)).astype(np.int32)
    seg = rng.integers(0, 2, (Bq, Sq)).astype(np.int32)
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], np.int32)
    tabs = [("we", u8(20, Hq)), ("pe", u8(10, Hq)), ("se", u8(2, Hq)), ("g", u8(Hq)), ("be", u8(Hq))]
    scales = [(n + "_s", sc(0.01 + 0.01 * k)) for k, (n, _) in enumerate(tabs)]
    zps = [(n + "_z", zp(100 + 5 * k)) for k, (n, _) in enumerate(tabs)]
    ins = ["ids", "seg"] + [n for n, _ in tabs] + ["mask"] + [n for n, _ in scales] + [n for n, _ in zps]
    check_case(c, tmp, "QEmbedLayerNormalization",
               model([node("QEmbedLayerNormalization", ins, ["y", "mi"], epsilon=1e-5)], {"ids": ids, "seg": seg, "mask": mask},
                     ["y", "mi"], tabs + scales + zps), {"ids": ids, "seg": seg, "mask": mask})
    # QAttention: uint8 input, int8 weight with a per-column scale
    Bt, S, H, N = 2, 4, 8, 2
    xa = u8(Bt, S, H)
    check_case(c, tmp, "QAttention",
               model([node("QAttention", ["x", "w", "b", "sx", "sw", "", "zx", "zw"], ["y"], num_heads=N)], {"x": xa}, ["y"],
                     [("w", i8(H, 3 * H)), ("b", f32(3 * H)), ("sx", sc(0.02)), ("sw", sc(0.01)), ("zx", zp(128)),
                      ("zw", zp(0, np.int8))]), {"x": xa})


def quantizer_cases(c, tmp):
    """A small CNN quantized by quantize_static (QOperator: QLinearConv, QLinearAdd, QLinearMul,
    QLinearSigmoid, QLinearLeakyRelu, QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool,
    QGemm) and an LSTM quantized by quantize_dynamic (DynamicQuantizeLSTM), as ORT writes them."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
    inits = [numpy_helper.from_array(f32(*shape, scale=0.3), name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("b1", (8,)), ("w2", (8, 8, 3, 3)), ("b2", (8,)), ("g", (16, 10)), ("gb", (10,)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Mul", ["s", "a"], ["m"]),
             helper.make_node("LeakyRelu", ["m"], ["l"], alpha=0.1),
             helper.make_node("AveragePool", ["l"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Concat", ["p", "p"], ["cat"], axis=1),
             helper.make_node("GlobalAveragePool", ["cat"], ["gap"]),
             helper.make_node("Flatten", ["gap"], ["f"]),
             helper.make_node("Gemm", ["f", "g", "gb"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    fp = os.path.join(tmp, "cnn.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), fp)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"x": f32(1, 3, 12, 12)} for _ in range(4)])

        def get_next(self):
            return next(self.data, None)

    qp = os.path.join(tmp, "cnn_qstatic.onnx")
    quantize_static(fp, qp, Reader(), quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QUInt8)
    mq = onnx.load(qp)
    ops = {n.op_type for n in mq.graph.node if n.domain == MS}
    want = {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QLinearAveragePool",
            "QLinearGlobalAveragePool", "QGemm"}
    c.check(want <= ops, f"quantize_static wrote {sorted(ops)}, expected at least {sorted(want)}")
    x = f32(1, 3, 12, 12)
    check_case(c, tmp, "cnn_quantize_static", mq, {"x": x}, cosine=0.999)
    # the same CNN through quantize_dynamic (QOperator): ConvInteger, MatMulInteger and friends
    qd = os.path.join(tmp, "cnn_qdynamic.onnx")
    quantize_dynamic(fp, qd)
    check_case(c, tmp, "cnn_quantize_dynamic", onnx.load(qd), {"x": x}, cosine=0.999)
    # LSTM -> DynamicQuantizeLSTM
    I, Hd = 6, 8
    inits = [numpy_helper.from_array(f32(1, 4 * Hd, I, scale=0.3), "W"), numpy_helper.from_array(f32(1, 4 * Hd, Hd, scale=0.3), "R"),
             numpy_helper.from_array(f32(1, 8 * Hd, scale=0.1), "B")]
    g = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Yh", "Yc"], hidden_size=Hd)], "lstm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 2, I])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Yh", "Yc")], inits)
    lp = os.path.join(tmp, "lstm.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), lp)
    lq = os.path.join(tmp, "lstm_q.onnx")
    quantize_dynamic(lp, lq, op_types_to_quantize=["LSTM"])
    ml = onnx.load(lq)
    c.check(any(n.op_type == "DynamicQuantizeLSTM" for n in ml.graph.node), "quantize_dynamic wrote DynamicQuantizeLSTM")
    for o in ml.graph.output:
        o.type.tensor_type.ClearField("shape")
        o.type.ClearField("tensor_type")
    check_case(c, tmp, "lstm_quantize_dynamic", ml, {"x": f32(5, 2, I)}, cosine=0.999)


def bert_cases(c, tmp):
    """The BERT-like model (scripts/make_bert_like.py, small sizes) fused by ORT's transformer
    optimizer, then quantized by quantize_dynamic (QOperator): the contrib ops as ORT writes them."""
    spec = importlib.util.spec_from_file_location("make_bert_like", os.path.join(SOURCE_DIR, "scripts", "make_bert_like.py"))
    mb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mb)
    from onnxruntime.quantization import quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    raw = os.path.join(tmp, "bert.onnx")
    onnx.save(mb.build(2, hidden=64, ffn=128, vocab=100, heads=4), raw)
    opt = optimize_model(raw, model_type="bert", num_heads=4, hidden_size=64, opt_level=0)
    fused = os.path.join(tmp, "bert_opt.onnx")
    opt.save_model_to_file(fused)
    m = onnx.load(fused)
    ops = {n.op_type for n in m.graph.node if n.domain == MS}
    c.check({"Attention", "SkipLayerNormalization"} <= ops and ops & {"BiasGelu", "FastGelu"}, f"the optimizer fused: {ops}")
    ids = rng.integers(0, 100, (2, 6)).astype(np.int64)
    check_case(c, tmp, "bert_optimized", m, {"input_ids": ids})
    quant = os.path.join(tmp, "bert_opt_q.onnx")
    # (ORT's shape inference cannot type the contrib ops' outputs: the default type stands in)
    quantize_dynamic(fused, quant, extra_options={"DefaultTensorType": TensorProto.FLOAT})
    mq = onnx.load(quant)
    ops = {n.op_type for n in mq.graph.node if n.domain == MS}
    c.check("QAttention" in ops, f"quantize_dynamic wrote: {ops}")
    check_case(c, tmp, "bert_optimized_quantized", mq, {"input_ids": ids}, cosine=0.999)
    # the unfused model through quantize_dynamic
    qr = os.path.join(tmp, "bert_q.onnx")
    quantize_dynamic(raw, qr)
    check_case(c, tmp, "bert_quantized", onnx.load(qr), {"input_ids": ids}, cosine=0.999)


def ort_onnx_extensions(c, tmp):
    """SimplifiedLayerNormalization and LayerNormalization before opset 17: ai.onnx ops of ONNX
    Runtime's, not of the spec, which its transformer optimizer writes: a warning, then checked,
    inferred and run like any op."""
    x, g, b = f32(2, 5, 16), f32(16), f32(16)
    m = model([helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y", "inv"], epsilon=1e-6, axis=-1)],
              {"x": x}, ["y", "inv"], [("g", g)])
    check_case(c, tmp, "SimplifiedLayerNormalization", m, {"x": x})
    m14 = model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-5)], {"x": x}, ["y"],
                [("g", g), ("b", b)], opset=14)
    check_case(c, tmp, "LayerNormalization_opset14", m14, {"x": x})
    p = os.path.join(tmp, "LayerNormalization_opset14.onnx")
    r = run(["check", "--json", p])
    doc = json.loads(r.stdout) if r.stdout.strip() else {}
    c.check(r.returncode == 0 and doc.get("valid") and [w["code"] for w in doc.get("warnings", [])] == ["ort-extension-op"],
            f"check --json: one ort-extension-op warning: {r.returncode} {r.stdout}")
    r = run(["check", "--strict", p])
    c.check(r.returncode == 1 and "ONNX Runtime's extension" in r.stdout + r.stderr, f"check --strict refuses it: {r.returncode} {r.stdout}")


def more_cases(c, tmp):
    """Contrib ops outside the tools' output with simple rules: kernels and shapes; shapes only
    (executors=()) for those without a kernel."""
    x, w, b = f32(2, 3, 8), f32(8, 5), f32(5)
    def fast_gelu(f):  # ONNX Runtime implements GemmFastGelu on GPUs only
        t = f["x"].astype(np.float64) @ w + b
        return [(0.5 * t * (1 + np.tanh(0.7978845608028654 * (t + 0.044715 * t ** 3)))).astype(np.float32)]
    check_case(c, tmp, "GemmFastGelu", model([node("GemmFastGelu", ["x", "w", "b"], ["y"])], {"x": x}, ["y"], [("w", w), ("b", b)]),
               {"x": x}, numpy_oracle=fast_gelu)
    a16, b16 = rng.integers(-3000, 3000, (3, 4)).astype(np.int16), rng.integers(-3000, 3000, (4, 2)).astype(np.int16)
    check_case(c, tmp, "MatMulInteger16", model([node("MatMulInteger16", ["a", "b"], ["y"])], {"a": a16, "b": b16}, ["y"]),
               {"a": a16, "b": b16})
    ai, bi = u8(2, 3), u8(3)
    check_case(c, tmp, "MulInteger", model([node("MulInteger", ["a", "za", "b", "zb"], ["y"])], {"a": ai, "b": bi}, ["y"],
                                           [("za", np.array(100, np.uint8)), ("zb", np.array(7, np.uint8))]), {"a": ai, "b": bi},
               numpy_oracle=lambda f: [((f["a"].astype(np.int32) - 100) * (f["b"].astype(np.int32) - 7)).astype(np.int32)])
    cond = rng.random((2, 1, 4)) > 0.5
    xq, yq = u8(3, 4), u8(2, 3, 1)
    sc = lambda v: np.array(v, np.float32)  # noqa: E731
    check_case(c, tmp, "QLinearWhere",
               model([node("QLinearWhere", ["c", "x", "sx", "zx", "y", "sy", "zy", "sz", "zz"], ["z"])], {"c": cond, "x": xq, "y": yq},
                     ["z"], [("sx", sc(0.05)), ("zx", np.array(120, np.uint8)), ("sy", sc(0.1)), ("zy", np.array(3, np.uint8)),
                             ("sz", sc(0.2)), ("zz", np.array(128, np.uint8))]), {"c": cond, "x": xq, "y": yq}, quantized={"z"})
    A, Bm = f32(4, 3), f32(5, 3)
    for metric in ("sqeuclidean", "euclidean"):
        check_case(c, tmp, f"CDist_{metric}", model([node("CDist", ["a", "b"], ["y"], metric=metric)], {"a": A, "b": Bm}, ["y"]),
                   {"a": A, "b": Bm})
    check_case(c, tmp, "ExpandDims", model([node("ExpandDims", ["x", "ax"], ["y"])], {"x": x}, ["y"], [("ax", np.array(-1, np.int32))]),
               {"x": x})
    xs = u8(2, 3, 5)
    check_case(c, tmp, "QLinearSoftmax",
               model([node("QLinearSoftmax", ["x", "s", "z", "so", "zo"], ["y"], axis=-1, opset=13)], {"x": xs}, ["y"],
                     [("s", sc(0.05)), ("z", np.array(120, np.uint8)), ("so", sc(1 / 256)), ("zo", np.array(0, np.uint8))]),
               {"x": xs}, executors=())
    xi = f32(2, 4, 4)
    check_case(c, tmp, "Inverse", model([node("Inverse", ["x"], ["y"])], {"x": xi}, ["y"]), {"x": xi}, executors=())
    xm = rng.integers(0, 1000, (3, 4)).astype(np.int32)
    check_case(c, tmp, "MurmurHash3", model([node("MurmurHash3", ["x"], ["y"], positive=0)], {"x": xm}, ["y"]), {"x": xm}, executors=())


def unknown_domain(c, tmp):
    m = model([helper.make_node("Thing", ["x"], ["y"], domain="com.example")], {"x": f32(2)}, [])
    m.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]))
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    p = os.path.join(tmp, "unknown.onnx")
    onnx.save(m, p)
    r = run(["check", p])
    c.check(r.returncode == 0 and "unverifiable: unknown domain 'com.example'" in r.stdout + r.stderr,
            f"an unknown domain stays unverifiable: {r.returncode} {r.stdout}{r.stderr}")
    r = run(["run", p, "--random"])
    c.check(r.returncode == 3 and "Thing" in r.stderr, f"run names the op it cannot execute (exit 3): {r.returncode} {r.stderr}")
    # a com.microsoft op checked against its schema: num_heads is required
    bad = model([node("Attention", ["x", "w"], ["y"])], {"x": f32(1, 2, 4)}, ["y"], [("w", f32(4, 12))])
    p = os.path.join(tmp, "bad_attention.onnx")
    onnx.save(bad, p)
    r = run(["check", p])
    c.check(r.returncode == 1 and "num_heads" in r.stdout + r.stderr, f"check: Attention without num_heads: {r.returncode} {r.stdout}")


def main():
    c = Checker("contrib ops vs onnxruntime")
    with tempfile.TemporaryDirectory() as tmp:
        transformer_cases(c, tmp)
        rotary_cases(c, tmp)
        gqa_cases(c, tmp)
        fused_cases(c, tmp)
        quantized_cases(c, tmp)
        quantizer_cases(c, tmp)
        bert_cases(c, tmp)
        ort_onnx_extensions(c, tmp)
        more_cases(c, tmp)
        unknown_domain(c, tmp)
    c.finish()


if __name__ == "__main__":
    main()
