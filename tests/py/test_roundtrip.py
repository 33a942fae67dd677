"""Lossless round trip: load -> IR -> save -> load gives the same model (onnx's own parser as the
oracle) for every backend node test model, every other model the onnx package ships, and
testdata/; plus unknown fields at several levels and models with external data."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import BUILD_DIR, Checker, backend_data_models, node_test_models, testdata_models  # noqa: E402

ROUNDTRIP = os.path.join(BUILD_DIR, "tests", "roundtrip")


def canonical(path):
    m = onnx.load(path, load_external_data=False)
    return m.SerializeToString(deterministic=True)


def unknown_field(num, value):
    """Bytes of a varint field `num` = value (a field number no ONNX message uses)."""
    def varint(v):
        out = b""
        while v >= 0x80:
            out += bytes([(v & 0x7F) | 0x80])
            v >>= 7
        return out + bytes([v])
    return varint(num << 3) + varint(value)


def with_unknown_fields(tmp):
    """A model with unknown fields on the model, graph, node, attribute, tensor, value info, type."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    node = helper.make_node("Gemm", ["x", "w"], ["y"], alpha=1.0, name="gemm")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    def reparse(msg, extra):
        out = type(msg)()
        out.ParseFromString(msg.SerializeToString() + extra)
        return out
    a = reparse(m.graph.node[0].attribute[0], unknown_field(900, 1))
    n = reparse(m.graph.node[0], unknown_field(901, 2))
    del n.attribute[:]
    n.attribute.append(a)
    m.graph.node[0].CopyFrom(n)
    m.graph.initializer[0].CopyFrom(reparse(m.graph.initializer[0], unknown_field(902, 3)))
    m.graph.input[0].CopyFrom(reparse(m.graph.input[0], unknown_field(903, 4)))
    m.graph.output[0].type.CopyFrom(reparse(m.graph.output[0].type, unknown_field(904, 5)))
    m.opset_import[0].CopyFrom(reparse(m.opset_import[0], unknown_field(905, 6)))
    m.graph.CopyFrom(reparse(m.graph, unknown_field(906, 7)))
    path = os.path.join(tmp, "unknown.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString() + unknown_field(907, 8))
    return path


def with_external_data(tmp):
    d = os.path.join(tmp, "ext")
    os.makedirs(d)
    w = numpy_helper.from_array(np.random.RandomState(0).rand(64, 64).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, os.path.join(d, "model.onnx"), save_as_external_data=True, location="weights.bin",
              size_threshold=0)
    return os.path.join(d, "model.onnx")


def main():
    c = Checker("roundtrip")
    tmp = tempfile.mkdtemp(prefix="onnxtool-rt-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # no temp folders left behind
    try:
        models = node_test_models() + backend_data_models() + testdata_models()
        models.append(with_unknown_fields(tmp))
        models.append(with_external_data(tmp))
        pairs = []
        for i, src in enumerate(models):
            out_dir = os.path.join(tmp, f"out{i}")
            os.makedirs(out_dir)
            pairs.append((src, os.path.join(out_dir, os.path.basename(src))))
        # one process for all models, in chunks to keep argv short
        for k in range(0, len(pairs), 500):
            chunk = pairs[k:k + 500]
            args = [p for pair in chunk for p in pair]
            r = subprocess.run([ROUNDTRIP] + args, capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stderr)
        for src, dst in pairs:
            if not c.check(os.path.exists(dst), f"{src}: no output written"):
                continue
            c.check(canonical(src) == canonical(dst), f"{src}: round trip changed the model")
        # external data came back with the same bytes
        ext_src = models[-1]
        ext_dst = pairs[-1][1]
        a = onnx.load(ext_src)
        b = onnx.load(ext_dst)
        b_meta = onnx.load(ext_dst, load_external_data=False)
        c.check(numpy_helper.to_array(a.graph.initializer[0]).tobytes() ==
                numpy_helper.to_array(b.graph.initializer[0]).tobytes(), "external data bytes differ after round trip")
        c.check(b_meta.graph.initializer[0].data_location == TensorProto.EXTERNAL, "external tensor was inlined")
        print(f"round-tripped {len(models)} models (onnx {onnx.__version__})")
    finally:
        shutil.rmtree(tmp)
    c.finish()


if __name__ == "__main__":
    main()
