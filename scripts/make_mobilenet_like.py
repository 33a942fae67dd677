#!/usr/bin/env python3
"""A MobileNetV2-shaped model (random weights, BatchNormalization unfolded, Clip 0..6) built
with onnx.helper: stem 3x3/2, inverted residual blocks (1x1 expand, depthwise 3x3, 1x1 project,
residual Add when shapes allow), 1x1 to 1280, GlobalAveragePool, Gemm 1000. For timing the cpu
executor's depthwise and pointwise convolutions and its Conv+BatchNormalization+Clip fusion
against ONNX Runtime where torch (scripts/export_models.py) is not installed:
    build/venv/bin/python scripts/make_mobilenet_like.py /tmp/mobilenet_v2_like.onnx
    build/venv/bin/python scripts/bench-vs-ort /tmp/mobilenet_v2_like.onnx --threads 1,2
"""
import sys
import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper

if len(sys.argv) != 2:
    print("usage: make_mobilenet_like.py OUT.onnx", file=sys.stderr)
    sys.exit(2)

rng = np.random.default_rng(0)
nodes, inits = [], []
cnt = [0]


def name(p):
    cnt[0] += 1
    return f"{p}{cnt[0]}"


def const(arr, p):
    n = name(p)
    inits.append(numpy_helper.from_array(arr.astype(np.float32), n))
    return n


def conv_bn(x, cin, cout, k, s, group=1, act=True):
    w = const(rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k)), "w")
    y = name("c")
    nodes.append(helper.make_node("Conv", [x, w], [y], kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=group))
    sc, b = const(rng.uniform(0.5, 1.5, cout), "s"), const(rng.standard_normal(cout) * 0.1, "b")
    m, v = const(rng.standard_normal(cout) * 0.1, "m"), const(rng.uniform(0.5, 1.5, cout), "v")
    z = name("bn")
    nodes.append(helper.make_node("BatchNormalization", [y, sc, b, m, v], [z]))
    if not act:
        return z
    lo, hi = const(np.array(0.0), "lo"), const(np.array(6.0), "hi")
    r = name("r")
    nodes.append(helper.make_node("Clip", [z, lo, hi], [r]))
    return r


x = "input"
h = conv_bn(x, 3, 32, 3, 2)
c = 32
for t, cout, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
    for i in range(n):
        stride = s if i == 0 else 1
        e = conv_bn(h, c, c * t, 1, 1) if t != 1 else h
        d = conv_bn(e, c * t, c * t, 3, stride, group=c * t)
        p = conv_bn(d, c * t, cout, 1, 1, act=False)
        if stride == 1 and c == cout:
            a = name("add")
            nodes.append(helper.make_node("Add", [h, p], [a]))
            p = a
        h, c = p, cout
h = conv_bn(h, c, 1280, 1, 1)
g = name("gap")
nodes.append(helper.make_node("GlobalAveragePool", [h], [g]))
f = name("flat")
nodes.append(helper.make_node("Flatten", [g], [f]))
fw, fb = const(rng.standard_normal((1000, 1280)) * 0.03, "fw"), const(np.zeros(1000), "fb")
nodes.append(helper.make_node("Gemm", [f, fw, fb], ["logits"], transB=1))
graph = helper.make_graph(nodes, "mobilenet_v2_like", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, 224, 224])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
onnx.save(model, sys.argv[1])
