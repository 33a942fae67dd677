"""`onnxtool inspect --shapes` and `--shape`: every value's type from our shape inference, compared
with onnx.shape_inference.infer_shapes (ours must be the same or more specific), the JSON schema of
`values` and `shape_inference`, the human listing, and --shape fixing or renaming input dims."""
import glob
import json
import os
import sys
import tempfile

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import BUILD_DIR, SOURCE_DIR, Checker, node_test_models, run, testdata_models  # noqa: E402
from test_cli import np_name  # noqa: E402

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "invalid"))
import make_invalid_models  # noqa: E402

SMALL = os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")
# Node tests covering subgraphs, data propagation and symbolic dims, beside a sample of all.
NAMED_NODE_TESTS = ("test_matmul_2d", "test_concat_2d_axis_0", "test_reshape_negative_dim", "test_gather_0",
                    "test_if", "test_loop11", "test_scan9_sum", "test_shape", "test_expand_dim_changed",
                    "test_range_float_type_positive_delta", "test_layer_normalization_2d_axis0_expanded")
VALUE_KEYS = ["name", "dtype", "shape", "graph"]
SI_KEYS = ["values_total", "values_fully_known", "first_give_up", "ops_without_inference", "errors"]


def inspect_json(c, args):
    r = run(["inspect", "--json"] + args)
    if not c.check(r.returncode == 0, f"inspect --json {args}: exit {r.returncode}: {r.stderr.strip()}"):
        return None
    return json.loads(r.stdout)


def without_claims(model):
    """A copy without the declared shapes of node outputs (value_info, graph outputs, in every
    graph): they are claims (issue 9), which onnx merges into its result and we do not."""
    m = onnx.ModelProto()
    m.CopyFrom(model)

    def walk(g):
        del g.value_info[:]
        for o in g.output:
            if o.type.HasField("tensor_type"):
                o.type.tensor_type.ClearField("shape")
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(m.graph)
    return m


def onnx_types(model):
    """name -> TypeProto of every value onnx's inference (non-strict) types, subgraphs included,
    from the facts of the model only (see without_claims)."""
    inferred = onnx.shape_inference.infer_shapes(without_claims(model))
    types = {}

    def walk(g):
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            types[vi.name] = vi.type
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(inferred.graph)
    return types


def model_values(model):
    """(graph path, name) of every value `values` must list: graph inputs and node outputs, each
    subgraph's after the node holding it; paths as inspect spells them (node/attribute)."""
    out = []

    def walk(g, path):
        out.extend((path, vi.name) for vi in g.input)
        for i, n in enumerate(g.node):
            out.extend((path, o) for o in n.output if o)
            label = n.name if n.name else None
            for a in n.attribute:
                subs = [(a.name, a.g)] if a.type == onnx.AttributeProto.GRAPH else []
                subs += [(f"{a.name}[{k}]", sg) for k, sg in enumerate(a.graphs)]
                for attr, sg in subs:
                    node = label if label else f"<unnamed, output '{n.output[0]}'>"
                    walk(sg, (path + "/" if path else "") + f"{node}/{attr}")

    walk(model.graph, "")
    return out


def compare_with_onnx(c, where, value, t):
    """Our entry must be the same as onnx's type or more specific; returns 'same' or 'more'."""
    if not t.HasField("tensor_type"):
        return "same"  # sequences, maps, optionals: only tensors are compared
    tt = t.tensor_type
    more = False
    if tt.elem_type:
        c.check(value["dtype"] == np_name(tt.elem_type), f"{where}: dtype {value['dtype']}, onnx says {np_name(tt.elem_type)}")
    if not tt.HasField("shape"):
        return "more" if value["shape"] is not None else "same"
    if not c.check(value["shape"] is not None and len(value["shape"]) == len(tt.shape.dim),
                   f"{where}: shape {value['shape']}, onnx says rank {len(tt.shape.dim)}"):
        return "same"
    for k, (ours, d) in enumerate(zip(value["shape"], tt.shape.dim)):
        if d.HasField("dim_value"):
            c.check(ours == d.dim_value, f"{where}: dim {k} is {ours!r}, onnx says {d.dim_value}")
        elif d.HasField("dim_param"):
            c.check(ours is not None, f"{where}: dim {k} unknown, onnx says '{d.dim_param}'")
            more = more or isinstance(ours, int)
        else:
            more = more or ours is not None
    return "more" if more else "same"


def check_schema(c, doc, where):
    c.check(doc["schema_version"] == 1, f"{where}: schema_version {doc['schema_version']}")
    values, si = doc["values"], doc["shape_inference"]
    c.check(list(si) == SI_KEYS, f"{where}: shape_inference keys {list(si)}")
    for v in values:
        ok = (list(v) == VALUE_KEYS and isinstance(v["name"], str) and isinstance(v["dtype"], str)
              and isinstance(v["graph"], str)
              and (v["shape"] is None or all(d is None or isinstance(d, (int, str)) for d in v["shape"])))
        c.check(ok, f"{where}: value entry {v}")
    known = sum(1 for v in values if v["shape"] is not None and None not in v["shape"])
    c.check(si["values_total"] == len(values) and si["values_fully_known"] == known,
            f"{where}: counts {si['values_total']}/{si['values_fully_known']}, listed {len(values)}/{known}")
    c.check(si["first_give_up"] is None or isinstance(si["first_give_up"], str), f"{where}: first_give_up")
    c.check(all(isinstance(e, str) for e in si["errors"]), f"{where}: errors {si['errors']}")
    # graph inputs are encoded in `values` exactly as in `inputs`
    main = {v["name"]: v for v in values if v["graph"] == ""}
    for e in doc["inputs"]:
        c.check(main.get(e["name"]) == dict(e, graph=""), f"{where}: input {e} vs value {main.get(e['name'])}")


def check_model(c, path, stats):
    doc = inspect_json(c, ["--shapes", path])
    if doc is None:
        return
    check_schema(c, doc, path)
    model = onnx.load(path, load_external_data=False)
    want = model_values(model)
    got = [(v["graph"], v["name"]) for v in doc["values"]]
    c.check(got == want, f"{path}: values listed {got[:8]}..., expected {want[:8]}...")
    c.check(doc["shape_inference"]["errors"] == [], f"{path}: inference errors on a valid model: "
            f"{doc['shape_inference']['errors']}")
    types = onnx_types(model)
    for v in doc["values"]:
        t = types.get(v["name"])
        if t is not None:
            stats[compare_with_onnx(c, f"{path}: value '{v['name']}'", v, t)] += 1
        else:
            stats["onnx untyped"] += 1
    # the human listing shows the same counts and each main-graph value on a line of its own
    r = run(["inspect", "--shapes", path])
    si = doc["shape_inference"]
    c.check(f"shape inference: {si['values_fully_known']} of {si['values_total']} values fully known" in r.stdout,
            f"{path}: human count line")
    give_up = si["first_give_up"] or "none"
    c.check(f"first give-up: {give_up}" in r.stdout, f"{path}: human first give-up line")


def shape_str(v):
    return "[" + ", ".join("?" if d is None else str(d) for d in v["shape"]) + "]"


def check_shape_option(c):
    """--shape renames (batch,seq style) or fixes (1x128 style) input dims before inference: seen in
    inputs, in values, and in what onnx infers for the model with the same input dims."""
    base = inspect_json(c, ["--shapes", SMALL])
    c.check(base["inputs"][0]["shape"] == ["batch", 1, 28, 28], f"small_cnn input {base['inputs']}")
    for spec, dims in (("input=N,1,28,28", ["N", 1, 28, 28]), ("input=4x1x28x28", [4, 1, 28, 28]),
                       ("input=?,1,28,28", [None, 1, 28, 28])):
        doc = inspect_json(c, ["--shapes", "--shape", spec, SMALL])
        if doc is None:
            continue
        c.check(doc["inputs"][0]["shape"] == dims, f"--shape {spec}: inputs {doc['inputs']}")
        model = onnx.load(SMALL)
        for d, x in zip(model.graph.input[0].type.tensor_type.shape.dim, dims):
            d.Clear()
            if isinstance(x, int):
                d.dim_value = x
            elif x is not None:
                d.dim_param = x
        types = onnx_types(model)
        # logits, the last value before the declared output (whose declared "batch" both keep)
        out = {v["name"]: v for v in doc["values"]}["logits"]
        c.check(dims[0] is None or out["shape"] == [dims[0], 10], f"--shape {spec}: logits {out}")
        for v in doc["values"]:
            if v["name"] in types:
                compare_with_onnx(c, f"--shape {spec}: value '{v['name']}'", v, types[v["name"]])
        human = run(["inspect", "--shapes", "--shape", spec, SMALL]).stdout
        c.check(f"input  float32 {shape_str(doc['inputs'][0])}" in human, f"--shape {spec}: human inputs:\n{human}")
        c.check(f"logits  float32 {shape_str(out)}" in human, f"--shape {spec}: human values:\n{human}")
    # --shape alone (without --shapes) changes the inputs listing and adds no values
    doc = inspect_json(c, ["--shape", "input=2x1x28x28", SMALL])
    c.check(doc["inputs"][0]["shape"] == [2, 1, 28, 28] and "values" not in doc, f"--shape alone: {doc['inputs']}")
    # repeatable: each occurrence applies (two inputs of a node test model)
    path = os.path.join(os.environ.get("ONNX_NODE_TESTS", os.path.join(BUILD_DIR, "onnx-tests", "node")),
                        "test_add", "model.onnx")
    doc = inspect_json(c, ["--shapes", "--shape", "x=a,b,c", "--shape", "y=3x4x5", path])
    if doc:
        c.check([e["shape"] for e in doc["inputs"]] == [["a", "b", "c"], [3, 4, 5]], f"two --shape: {doc['inputs']}")
        z = {v["name"]: v for v in doc["values"]}["sum"]
        c.check(z["shape"] == [3, 4, 5], f"two --shape: sum {z}")
    # usage errors: exit 2, one line naming the problem
    for args, text in ((["--shape", "nope=1", SMALL], "no input 'nope'"),
                       (["--shape", "input", SMALL], "expected NAME=DIMS"),
                       (["--shape", "input=1,,2", SMALL], "empty dimension")):
        r = run(["inspect"] + args)
        c.check(r.returncode == 2 and text in r.stderr and r.stderr.count("\n") == 1,
                f"inspect {args}: exit {r.returncode}, {r.stderr!r}")


def check_findings(c, tmp):
    """Inference errors and the first give-up are reported; inspect still exits 0."""
    d = os.path.join(tmp, "matmul")
    os.makedirs(d)
    path = os.path.join(d, "model.onnx")
    onnx.save(make_invalid_models.CASES["matmul_inner_dims_differ"](d), path)
    doc = inspect_json(c, ["--shapes", path])
    c.check(doc["shape_inference"]["errors"] == ["node 'matmul' (MatMul): inner dimensions differ, 3 vs 4"],
            f"matmul errors: {doc['shape_inference']}")
    human = run(["inspect", "--shapes", path]).stdout
    c.check("shape inference errors (1):\n  node 'matmul' (MatMul): inner dimensions differ, 3 vs 4\n" in human,
            f"matmul human errors:\n{human}")
    # an op of an unknown domain: inference gives up there, and says so
    node = helper.make_node("FusedThing", ["x"], ["t"], name="fused", domain="com.example")
    relu = helper.make_node("Relu", ["t"], ["y"], name="relu")
    g = helper.make_graph([node, relu], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    path = os.path.join(tmp, "custom.onnx")
    onnx.save(m, path)
    doc = inspect_json(c, ["--shapes", path])
    si = doc["shape_inference"]
    c.check(si["first_give_up"] == "no schema for FusedThing (domain 'com.example', opset 1)" and
            si["ops_without_inference"] == {"FusedThing": 1} and si["values_fully_known"] == 1 and
            si["values_total"] == 3, f"custom op: {si}")
    human = run(["inspect", "--shapes", path]).stdout
    c.check("first give-up: no schema for FusedThing (domain 'com.example', opset 1)\n" in human and
            "ops without inference: FusedThing (1)\n" in human and "shape inference: 1 of 3 values fully known\n" in human,
            f"custom op human:\n{human}")


def check_docs(c):
    r = run(["inspect", "--help"])
    c.check(r.returncode == 0 and "--shapes" in r.stdout and "--shape" in r.stdout, "inspect --help lists --shapes, --shape")
    page = open(os.path.join(SOURCE_DIR, "man", "onnxtool-inspect.1")).read().replace("\\-", "-")
    c.check("--shapes" in page and "--shape " in page and "first_give_up" in page, "man page documents --shapes, --shape")
    readme = open(os.path.join(SOURCE_DIR, "README.md")).read()
    c.check("inspect --shapes" in readme and "--shape NAME=DIMS" in readme, "README documents inspect --shapes, --shape")


def main():
    c = Checker("inspect-shapes")
    nodes = node_test_models()
    by_name = {os.path.basename(os.path.dirname(p)): p for p in nodes}
    models = [by_name[n] for n in NAMED_NODE_TESTS if n in by_name] + nodes[::40] + testdata_models()
    # exported real models, where present and small enough for onnx's Python inference
    models += [p for p in sorted(glob.glob(os.path.join(BUILD_DIR, "models", "*.onnx"))) if os.path.getsize(p) < (64 << 20)]
    stats = {"same": 0, "more": 0, "onnx untyped": 0}
    for p in models:
        check_model(c, p, stats)
    print(f"inspect --shapes on {len(models)} models: {stats['same']} values typed as onnx does, {stats['more']} "
          f"more specifically, {stats['onnx untyped']} that onnx leaves untyped")
    check_shape_option(c)
    with tempfile.TemporaryDirectory() as tmp:
        check_findings(c, tmp)
    check_docs(c)
    c.finish()


if __name__ == "__main__":
    main()
