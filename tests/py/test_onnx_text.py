"""The ONNX textual syntax (formats/onnx_text.cpp) against onnx.parser / onnx.printer.

For every backend node test model, every other model the onnx package ships, every testdata model
and two hand-made ones:
  (a) `onnxtool convert m --to text` gives text that onnx.parser.parse_model reads back into the
      same model, unless onnx's own printer -> parser round trip is lossy for that model too
      (features onnx's parser cannot read: counted, with the reason, never silently);
  (b) `onnxtool convert x.onnxtxt -o y.onnx` gives back the same model (always);
  (c) text printed by onnx.printer.to_text, parsed by onnxtool, gives the same model, unless
      onnx's own parser does not get the model back from that text either.
"Same model" compares what the syntax holds: model header, graphs, nodes, attributes of every
kind, tensor values (NaN payloads aside), types; doc strings and metadata below the model level,
and denotations, are not part of the text.
"""
import concurrent.futures
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.parser
import onnx.printer
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
import onnxtool_test as T  # noqa: E402


def norm_float(x):
    return "nan" if x != x else struct.pack("<f", x)


def norm_tensor(t):
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return ("external", t.name, t.data_type, tuple(t.dims), tuple((e.key, e.value) for e in t.external_data))
    if t.data_type == onnx.TensorProto.STRING:
        data = tuple(t.string_data)
    else:
        a = numpy_helper.to_array(t)
        if a.dtype.kind in "fc":
            a = a.copy()
            a[np.isnan(a)] = np.nan  # the text keeps no NaN payloads
        data = a.tobytes()
    return (t.name, t.data_type, tuple(t.dims), data)


def norm_type(t):
    which = t.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        k = getattr(t, which)
        shape = None
        if k.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param") else None
                for d in k.shape.dim
            )
        return (which, k.elem_type, shape)
    if which in ("sequence_type", "optional_type"):
        k = getattr(t, which)
        return (which, norm_type(k.elem_type) if k.HasField("elem_type") else None)
    if which == "map_type":
        return (which, t.map_type.key_type, norm_type(t.map_type.value_type))
    if which == "opaque_type":
        return (which, t.opaque_type.domain, t.opaque_type.name)
    return None


def norm_vi(v):
    return (v.name, norm_type(v.type) if v.HasField("type") else None)


def norm_attr(a):
    A = onnx.AttributeProto
    value = {
        A.FLOAT: lambda: norm_float(a.f),
        A.INT: lambda: a.i,
        A.STRING: lambda: a.s,
        A.TENSOR: lambda: norm_tensor(a.t),
        A.GRAPH: lambda: norm_graph(a.g),
        A.FLOATS: lambda: tuple(norm_float(x) for x in a.floats),
        A.INTS: lambda: tuple(a.ints),
        A.STRINGS: lambda: tuple(a.strings),
        A.TENSORS: lambda: tuple(norm_tensor(t) for t in a.tensors),
        A.GRAPHS: lambda: tuple(norm_graph(g) for g in a.graphs),
        A.TYPE_PROTO: lambda: norm_type(a.tp),
        A.TYPE_PROTOS: lambda: tuple(norm_type(t) for t in a.type_protos),
    }.get(a.type, lambda: None)
    return (a.name, a.type, a.ref_attr_name, None if a.ref_attr_name else value())


def norm_node(n):
    return (n.name, n.domain, n.op_type, n.overload, tuple(n.input), tuple(n.output),
            tuple(norm_attr(a) for a in n.attribute))


def norm_graph(g):
    return {
        "name": g.name,
        "inputs": [norm_vi(v) for v in g.input],
        "outputs": [norm_vi(v) for v in g.output],
        "value_info": [norm_vi(v) for v in g.value_info],
        "initializers": [norm_tensor(t) for t in g.initializer],
        "sparse_initializers": len(g.sparse_initializer),
        "nodes": [norm_node(n) for n in g.node],
    }


def norm_function(f):
    return {
        "name": f.name, "domain": f.domain, "overload": f.overload,
        "input": list(f.input), "output": list(f.output), "attribute": list(f.attribute),
        "attribute_proto": [norm_attr(a) for a in f.attribute_proto],
        "opset_import": [(o.domain, o.version) for o in f.opset_import],
        "value_info": [norm_vi(v) for v in f.value_info],
        "nodes": [norm_node(n) for n in f.node],
    }


def norm_model(m):
    return {
        "ir_version": m.ir_version,
        "opset_import": [(o.domain, o.version) for o in m.opset_import],
        "producer_name": m.producer_name, "producer_version": m.producer_version,
        "domain": m.domain, "model_version": m.model_version, "doc_string": m.doc_string,
        "metadata_props": [(p.key, p.value) for p in m.metadata_props],
        "graph": norm_graph(m.graph),
        "functions": [norm_function(f) for f in m.functions],
    }


def first_difference(a, b, path="model"):
    """A short description of where two normalized models differ."""
    if type(a) is not type(b):
        return f"{path}: {str(a)[:120]} != {str(b)[:120]}"
    if isinstance(a, dict):
        for k in a:
            if a[k] != b.get(k):
                return first_difference(a[k], b.get(k), f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {str(a)[:120]} != {str(b)[:120]}"


def onnx_parse(text):
    try:
        return norm_model(onnx.parser.parse_model(text))
    except Exception as e:  # noqa: BLE001 - any failure of onnx's parser is a finding to classify
        msg = e.args[0] if e.args else e
        msg = msg.decode(errors="replace") if isinstance(msg, bytes) else str(msg)
        return f"onnx.parser failed ({msg.strip().splitlines()[-1][:80]}): {msg[:200]}"


def check_model(i, path, tmp):
    """Returns a list of (kind, ok, message) for one model."""
    results = []
    base = os.path.join(tmp, f"m{i}")
    orig_proto = onnx.load(path)
    orig = norm_model(orig_proto)
    r = T.run(["convert", path, "--to", "text", "-o", base + ".onnxtxt"])
    if r.returncode != 0:
        return [("print", False, f"{path}: convert --to text failed: {r.stderr.strip()}")]
    results.append(("print", True, ""))
    with open(base + ".onnxtxt", encoding="utf-8", errors="surrogateescape") as f:
        text = f.read()

    # (b) our text back through our parser
    r = T.run(["convert", base + ".onnxtxt", "-o", base + ".onnx"])
    if r.returncode != 0:
        results.append(("ours", False, f"{path}: parsing our text failed: {r.stderr.strip()}"))
    else:
        back = norm_model(onnx.load(base + ".onnx"))
        results.append(("ours", back == orig, f"{path}: text -> onnx differs: {first_difference(orig, back)}"))

    # the onnx printer -> onnx parser round trip tells what onnx's parser can read; computed
    # only when an exclusion needs its reason
    try:
        onnx_text = onnx.printer.to_text(orig_proto)
    except Exception as e:  # noqa: BLE001
        onnx_text = None
        printer_error = f"onnx.printer failed: {e}"

    def onnx_lossy():
        if onnx_text is None:
            return printer_error
        own = onnx_parse(onnx_text)
        return None if own == orig else (own if isinstance(own, str) else first_difference(orig, own))

    # (a) our text read by onnx's parser
    parsed = onnx_parse(text)
    ok = parsed == orig
    if ok:
        results.append(("onnx_reads_ours", True, ""))
    elif (lossy := onnx_lossy()):
        results.append(("onnx_reads_ours_excluded", True, lossy))
    else:
        why = parsed if isinstance(parsed, str) else first_difference(orig, parsed)
        results.append(("onnx_reads_ours", False, f"{path}: onnx.parser on our text: {why}"))

    # (c) onnx's text read by our parser
    if onnx_text is not None:
        with open(base + "_onnx.onnxtxt", "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(onnx_text)
        r = T.run(["convert", base + "_onnx.onnxtxt", "-o", base + "_onnx.onnx"])
        if r.returncode == 0:
            back = norm_model(onnx.load(base + "_onnx.onnx"))
            ok = back == orig
            why = first_difference(orig, back)
        else:
            ok, why = False, r.stderr.strip()
        if ok:
            results.append(("ours_reads_onnx", True, ""))
        elif (lossy := onnx_lossy()):
            results.append(("ours_reads_onnx_excluded", True, lossy))
        else:
            results.append(("ours_reads_onnx", False, f"{path}: our parser on onnx.printer text: {why}"))
    else:
        results.append(("ours_reads_onnx_excluded", True, printer_error))
    return results


def extra_models(folder):
    """Hand-made models with what the backend node tests lack. The first holds what onnx's parser
    reads too: local functions (@ref attributes, attribute defaults, value_info), value_info,
    node names and overloads, odd names, string escapes. The second adds our extensions: complex
    and 4-bit tensors, tensor and graph list attributes."""
    from onnx import TensorProto as TP, helper as h

    A = onnx.AttributeProto
    fn = h.make_function(
        "local", "scaled", ["p"], ["r"],
        [h.make_node("Constant", [], ["k"], value_float=1.0),
         h.make_node("Mul", ["p", "k"], ["r"])],
        [h.make_opsetid("", 18)], attributes=["alpha"])
    fn.node[0].attribute[0].ClearField("f")
    fn.node[0].attribute[0].ref_attr_name = "alpha"
    fn.attribute_proto.append(h.make_attribute("beta", 3))
    fn.value_info.append(h.make_tensor_value_info("k", TP.FLOAT, []))
    ts = h.make_attribute("ts", [h.make_tensor("a", TP.FLOAT, [1], [1.5]), h.make_tensor("", TP.INT8, [2], [-1, 1])])
    gs = h.make_attribute("gs", [h.make_graph([h.make_node("Identity", ["w"], ["q"])], "g1", [],
                                              [h.make_tensor_value_info("q", TP.FLOAT, [2])])])
    empty = h.make_attribute("es", [], attr_type=A.STRINGS)
    multi = h.make_node("Multi", ["x", "", "y.1"], ["a", "", "b"], domain="com.example", name="multi node",
                        s='he said "hi"\n\\', fs=[1.0, float("inf"), float("nan"), -0.0], i=-7)
    multi.overload = "v2"
    multi.attribute.append(empty)
    inits = [
        h.make_tensor("w", TP.FLOAT, [2], [0.1, -3.4028235e38]),
        h.make_tensor("h", TP.FLOAT16, [2], np.array([1.5, -2], dtype=np.float16).view(np.uint16).tolist()),
        h.make_tensor("bf", TP.BFLOAT16, [1], [16256]),
        h.make_tensor("f8", TP.FLOAT8E4M3FN, [2], [1.0, -2.0]),
        h.make_tensor("u64", TP.UINT64, [1], [2**64 - 1]),
        h.make_tensor("d", TP.DOUBLE, [2], [0.1, 1e300]),
        h.make_tensor("str", TP.STRING, [2], [b"a\"b", b"\\c\n"]),
        h.make_tensor("bools", TP.BOOL, [2], [True, False]),
        h.make_tensor("scalar", TP.INT64, [], [5]),
    ]
    g = h.make_graph(
        [multi, h.make_node("scaled", ["a"], ["z"], domain="local", alpha=2.0),
         h.make_node("Relu", ["z"], ["out"], name="relu")],
        "extra",
        [h.make_tensor_value_info("x", TP.FLOAT, ["N", None, 3]), h.make_tensor_value_info("y.1", TP.FLOAT, None),
         h.make_tensor_value_info("w", TP.FLOAT, [2])],
        [h.make_tensor_value_info("out", TP.FLOAT, ["N", None, 3]), h.make_tensor_value_info("b", TP.FLOAT, [])],
        initializer=inits,
        value_info=[h.make_tensor_value_info("z", TP.FLOAT, ["N", None, 3]),
                    h.make_tensor_sequence_value_info("seqv", TP.FLOAT, [2])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("com.example", 1),
                                       h.make_opsetid("local", 1)],
                     functions=[fn], producer_name="extra", producer_version="2", domain="org.test",
                     model_version=4, doc_string="model doc")
    h.set_model_props(m, {"k": "v"})
    m.ir_version = 10
    paths = [os.path.join(folder, "extra_common", "model.onnx"), os.path.join(folder, "extra_ours", "model.onnx")]
    os.makedirs(os.path.dirname(paths[0]))
    onnx.save(m, paths[0])
    m.graph.node[0].attribute.extend([ts, gs])
    m.graph.initializer.extend([
        h.make_tensor("cx", TP.COMPLEX64, [2], [1 + 2j, -3.5 + 0j]),
        h.make_tensor("i4", TP.INT4, [3], [-8, 7, 1]),
        h.make_tensor("u4", TP.UINT4, [3], [0, 15, 9]),
    ])
    os.makedirs(os.path.dirname(paths[1]))
    onnx.save(m, paths[1])
    return paths


def check_cli(c, tmp):
    """stdout output, refused flag combinations, and the one-line parse error with its position."""
    small = os.path.join(T.NODE_TESTS, "test_relu", "model.onnx")
    r = T.run(["convert", small, "--to", "text", "-o", "-"])
    c.check(r.returncode == 0 and "Relu (x)" in r.stdout, f"convert --to text -o - prints the model: {r.stdout[:200]}")
    c.check(onnx_parse(r.stdout) == norm_model(onnx.load(small)), "onnx.parser reads the text printed to stdout")
    r = T.run(["convert", small, "--to", "text", "--inline", "-o", os.path.join(tmp, "x.onnxtxt")])
    c.check(r.returncode == 2, f"--to text with --inline is refused (exit 2): {r.returncode} {r.stderr}")
    bad = os.path.join(tmp, "bad.onnxtxt")
    with open(bad, "w") as f:
        f.write('<ir_version: 8, opset_import: ["" : 17]>\ng (float x) => (y) {\n  y = Relu (x\n}\n')
    r = T.run(["convert", bad, "-o", os.path.join(tmp, "bad.onnx")])
    c.check(r.returncode == 2 and f"{bad}:4:1: expected ',' or ')', got '}}'" in r.stderr
            and not os.path.exists(os.path.join(tmp, "bad.onnx")),
            f"a syntax error exits 2 with FILE:LINE:COL: {r.returncode} {r.stderr}")


def main():
    c = T.Checker("test_onnx_text")
    counts = {}
    reasons = {}
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(4) as pool:
        check_cli(c, tmp)
        models = T.node_test_models() + T.backend_data_models() + T.testdata_models()
        if os.path.basename(os.path.normpath(T.BUILD_DIR)).endswith("asan"):
            # the sanitizer pass is about memory safety; three processes per model under ASan cost
            # minutes, so it takes every tenth model (the release pass takes all)
            models = models[::10]
        models += extra_models(tmp)
        futures = [pool.submit(check_model, i, m, tmp) for i, m in enumerate(models)]
        for m, fut in zip(models, futures):
            for kind, ok, msg in fut.result():
                counts[kind] = counts.get(kind, 0) + (1 if ok else 0)
                if kind.endswith("_excluded"):
                    reasons.setdefault(msg.split(": ")[0][:100], []).append(os.path.basename(os.path.dirname(m)))
                else:
                    c.check(ok, msg)
    print(f"models: {len(models)}")
    for k in sorted(counts):
        print(f"  {k}: {counts[k]}")
    print("exclusions (onnx's own printer -> parser round trip is lossy for these models too):")
    for why, names in sorted(reasons.items()):
        print(f"  {len(names):4d}  {why}  e.g. {', '.join(sorted(set(names))[:3])}")
    c.finish()


if __name__ == "__main__":
    main()
