"""A torch-exported BERT (testdata/models/bert_tiny.onnx: scripts/export_models.py --only bert_tiny,
the bert_base structure at 2 layers, hidden 64, 4 heads) through ONNX Runtime's own transformer
optimizer in its variants (EmbedLayerNormalization, Attention or MultiHeadAttention, packed or not,
SkipLayerNormalization, BiasGelu / FastGelu, GemmFastGelu against ORT on its FastGelu form), then through quantize_dynamic (QAttention,
and ONNX Runtime's session optimizations saved after it: DynamicQuantizeMatMul): `check` exits 0, `inspect --shapes` states ONNX
Runtime's dims for every value, `run` on ref and cpu equals ONNX Runtime on every value (1e-4; the
quantized models by cosine >= 0.999)."""
import importlib.util
import os
import sys
import tempfile
import types

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import SOURCE_DIR, Checker, ort_session, run  # noqa: E402
from test_contrib_ops import MS, check_case  # noqa: E402

MODEL = os.path.join(SOURCE_DIR, "testdata", "models", "bert_tiny.onnx")
HEADS, HIDDEN, VOCAB = 4, 64, 256


def torch_stand_in():
    """ORT's optimizer imports torch only to read torch.version.hip when it runs ORT's own graph
    optimizations (opt_level >= 1); CI has no torch."""
    if importlib.util.find_spec("torch") is None:
        stub = types.ModuleType("torch")
        stub.version = types.SimpleNamespace(hip=None, cuda=None)
        sys.modules["torch"] = stub


def feeds():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, (2, 7)).astype(np.int64)
    mask = np.ones((2, 7), np.int64)
    mask[1, 5:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def every_value_an_output(m):
    """Exposes every node output as a graph output (types left to check_case), so that shapes and
    values are compared on all of them, not only on the last hidden state."""
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
    return m


# name -> (optimize_model keyword arguments, FusionOptions settings, contrib ops the result must hold)
VARIANTS = {
    "default": ({}, {}, {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"}),
    "use_gpu": ({"use_gpu": True}, {}, {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"}),
    "opt_level0": ({"opt_level": 0}, {}, {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"}),
    "raw_mask_fast_gelu": ({}, {"use_raw_attention_mask": True, "enable_gelu_approximation": True},
                           {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "FastGelu"}),
    "mha_no_embed": ({}, {"use_multi_head_attention": True, "enable_embed_layer_norm": False},
                     {"MultiHeadAttention", "SkipLayerNormalization", "BiasGelu"}),
}


def optimize(c, tmp, name):
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    kwargs, settings, want = VARIANTS[name]
    options = FusionOptions("bert")
    for k, v in settings.items():
        setattr(options, k, v)
    opt = optimize_model(MODEL, model_type="bert", num_heads=HEADS, hidden_size=HIDDEN, optimization_options=options,
                         **kwargs)
    path = os.path.join(tmp, f"bert_tiny_{name}.onnx")
    opt.save_model_to_file(path)
    m = onnx.load(path)
    ops = {n.op_type for n in m.graph.node if n.domain == MS}
    c.check(want <= ops, f"{name}: ORT's optimizer wrote {sorted(ops)}, expected {sorted(want)}")
    return path, m


def main():
    c = Checker("torch-exported tiny BERT through ONNX Runtime's optimizer and quantizer")
    torch_stand_in()
    from onnxruntime.quantization import QuantType, quantize_dynamic
    with tempfile.TemporaryDirectory() as tmp:
        r = run(["check", MODEL])
        c.check(r.returncode == 0, f"check {MODEL}: {r.stdout}{r.stderr}")
        check_case(c, tmp, "bert_tiny", every_value_an_output(onnx.load(MODEL)), feeds())
        for name in VARIANTS:
            path, m = optimize(c, tmp, name)
            print(f"{name}: {sorted({n.op_type for n in m.graph.node if n.domain == MS})}")
            check_case(c, tmp, f"opt_{name}", every_value_an_output(m), feeds())
            if name not in ("default", "mha_no_embed"):
                continue
            for wt in (QuantType.QInt8, QuantType.QUInt8):
                q = os.path.join(tmp, f"quantized_{name}_{wt.name}.onnx")  # check_case writes q_*.onnx
                quantize_dynamic(path, q, weight_type=wt, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
                mq = onnx.load(q)
                ops = {n.op_type for n in mq.graph.node if n.domain == MS}
                print(f"{name} quantized ({wt.name}): {sorted(ops)}")
                c.check(bool(ops & {"QAttention", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}) or
                        any(n.op_type == "MatMulInteger" for n in mq.graph.node),
                        f"{name}: quantize_dynamic wrote {sorted(ops)}")
                if name == "default" and wt == QuantType.QInt8:
                    c.check("QAttention" in ops, f"quantize_dynamic of the Attention model wrote {sorted(ops)}")
                # quantized: the final output by cosine (one rounding step of DynamicQuantizeLinear
                # propagates), shapes of every value
                check_case(c, tmp, f"q_{name}_{wt.name}", every_value_an_output(mq), feeds(), cosine=0.999)
                # ONNX Runtime's own session optimizations of that model, saved: they fuse the
                # quantized MatMul chains into DynamicQuantizeMatMul
                so = ort.SessionOptions()
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
                so.optimized_model_filepath = q.replace(".onnx", "_ort.onnx")
                ort_session(q, so, providers=["CPUExecutionProvider"])
                mo = onnx.load(so.optimized_model_filepath)
                ops = {n.op_type for n in mo.graph.node if n.domain == MS}
                print(f"{name} quantized ({wt.name}), ORT-optimized: {sorted(ops)}")
                c.check(bool(ops & {"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}), f"ORT's session optimizer wrote {sorted(ops)}")
                check_case(c, tmp, f"q_{name}_{wt.name}_ort", every_value_an_output(mo), feeds(), cosine=0.999)
        # GemmFastGelu, which ONNX Runtime runs on CUDA only: its output against ONNX Runtime on
        # the same optimizer's FastGelu form (the fusion only merges MatMul with FastGelu's bias)
        VARIANTS["gemm_fast_gelu"] = ({"opt_level": 0}, {"enable_gemm_fast_gelu": True, "enable_gelu_approximation": True},
                                      {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "GemmFastGelu"})
        VARIANTS["fast_gelu"] = ({"opt_level": 0}, {"enable_gelu_approximation": True},
                                 {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "FastGelu"})
        _, m = optimize(c, tmp, "gemm_fast_gelu")
        fast, _ = optimize(c, tmp, "fast_gelu")
        sess = ort_session(fast, providers=["CPUExecutionProvider"])
        check_case(c, tmp, "opt_gemm_fast_gelu", m, feeds(), numpy_oracle=lambda f: sess.run(None, f))
    c.finish()


if __name__ == "__main__":
    main()
