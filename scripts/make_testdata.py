#!/usr/bin/env python3
"""Writes the small models bundled in testdata/models (committed; re-run only to change them).

small_cnn.onnx: a LeNet-like classifier (Conv/BatchNormalization/Relu/MaxPool/Gemm/Softmax) with a
dynamic batch dimension and seeded random weights, about 100 KB; the demo model.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(__file__), "..", "testdata", "models")


def small_cnn():
    rng = np.random.RandomState(42)
    def w(name, *shape):
        return numpy_helper.from_array((rng.randn(*shape) * 0.1).astype(np.float32), name)
    inits = [
        w("conv1.weight", 8, 1, 3, 3), w("conv1.bias", 8),
        w("bn1.scale", 8), w("bn1.bias", 8), w("bn1.mean", 8),
        numpy_helper.from_array(rng.rand(8).astype(np.float32) + 0.5, "bn1.var"),
        w("conv2.weight", 16, 8, 3, 3), w("conv2.bias", 16),
        w("fc.weight", 10, 16 * 7 * 7), w("fc.bias", 10),
        numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "flat_shape"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"], ["b1"], name="bn1"),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p2", "flat_shape"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(nodes, "small_cnn",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 28, 28])],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxtool-testdata",
                          producer_version="1")
    m.ir_version = 8
    helper.set_model_props(m, {"description": "LeNet-like demo model with random weights"})
    onnx.checker.check_model(m, full_check=True)
    return m


def main():
    os.makedirs(OUT, exist_ok=True)
    onnx.save(small_cnn(), os.path.join(OUT, "small_cnn.onnx"))


if __name__ == "__main__":
    main()
