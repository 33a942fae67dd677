"""Compares `onnxtool convert --infer-shapes` with onnx.shape_inference.infer_shapes(strict_mode=True,
data_prop=True) on every backend node test model and on the exported models in build/models
(skipped quietly when absent).

Each model is stripped of value_info and of its graph outputs' types first (subgraphs: value_info
and output shapes), so both tools infer every node output: declared types are claims, which neither
tool may take as facts. Per value the result is: same, ours more specific, ours less specific, or a
conflict (different element type, rank or static size, or a symbol where onnx has a size).
Models onnx itself rejects are skipped. Where ours is more specific, the graph outputs are checked
against the shapes of the test's expected outputs (test_data_set_0), the real oracle, and the other
values of the main graph against the shapes onnxruntime computes from the test's inputs. Exported
models must leave no more values without a full shape than onnx does (none for those listed in
FULLY_KNOWN_EXPORTS).

The test fails on any conflict, any value less specific than onnx's (except those in
LESS_SPECIFIC_ALLOWED, each with its reason) and any inferred shape that differs from the
expected output's or onnxruntime's. `--verbose` lists every less-specific value.
"""
import collections
import concurrent.futures
import os
import subprocess
import sys
import tempfile

import onnx
import onnx.numpy_helper
import onnx.shape_inference
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import BUILD_DIR, ONNXTOOL, node_test_models  # noqa: E402

ort.set_default_logger_severity(4)  # models it cannot run are expected; their errors are noise


# (model directory, value name) -> why onnx may know more than we do. Empty: none is needed.
LESS_SPECIFIC_ALLOWED = {}

# Exported transformers whose every value has a full shape in terms of the input symbols (GPT-2's
# sliced causal mask included: Slice by [past, past+seq] gives seq). Any other exported model
# must simply not leave more values unknown than onnx does.
FULLY_KNOWN_EXPORTS = {"gpt2_small_past.onnx", "bert_base.onnx", "minilm.onnx"}


def dims_of(t):
    if not t.HasField("tensor_type"):
        return None, None
    tt = t.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    out = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            out.append(d.dim_value)
        elif d.HasField("dim_param") and "unk__" not in d.dim_param:
            out.append(d.dim_param)
        else:
            out.append(None)  # unknown, or in fresh names: says nothing beyond the rank
    return tt.elem_type, out


def types_by_name(graph, acc, with_io=True):
    for vi in list(graph.value_info) + (list(graph.output) if with_io else []):
        if vi.type.HasField("tensor_type"):
            acc[vi.name] = dims_of(vi.type)
    for n in graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                types_by_name(a.g, acc)
            for g in a.graphs:
                types_by_name(g, acc)
    return acc


def node_outputs(graph, acc):
    for n in graph.node:
        acc.extend((o, n.op_type) for o in n.output if o)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                node_outputs(a.g, acc)
            for g in a.graphs:
                node_outputs(g, acc)
    return acc


def compare(theirs, ours):
    """One of same/more/less/conflict for one value."""
    if theirs is None:
        return "same" if ours is None else "more"
    if ours is None:
        return "less"
    (te, td), (oe, od) = theirs, ours
    more = less = False
    if te and oe and te != oe:
        return "conflict"
    if te and not oe:
        less = True
    if oe and not te:
        more = True
    if td is None or od is None:
        if td is not None:
            less = True
        elif od is not None:
            more = True
    elif len(td) != len(od):
        return "conflict"
    else:
        for a, b in zip(td, od):
            if a == b:
                continue
            if a is None:
                more = True
            elif b is None:
                less = True
            elif isinstance(a, int) and isinstance(b, int):
                return "conflict"
            elif isinstance(a, int):
                return "conflict"  # a symbol where onnx knows the size
            elif isinstance(b, int):
                more = True  # a size where onnx has a symbol
            else:
                more = True  # a different symbolic form: ours is an expression of input symbols
    return "less" if less else "more" if more else "same"


def strip(model):
    """Drops the declared types of node outputs, which are claims (issue 9): the main graph's
    value_info and output types, and in subgraphs value_info and the shapes of the outputs."""
    del model.graph.value_info[:]
    for o in model.graph.output:
        o.ClearField("type")

    def subgraphs(g):
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield a.g
                yield from a.graphs

    pending = list(subgraphs(model.graph))
    while pending:
        g = pending.pop()
        del g.value_info[:]
        for o in g.output:
            if o.type.HasField("tensor_type"):
                o.type.tensor_type.ClearField("shape")
        pending.extend(subgraphs(g))
    return model


def run_one(path, tmp):
    try:
        model = strip(onnx.load(path))
    except Exception:
        return None
    try:
        theirs = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception:
        return None
    src = os.path.join(tmp, str(abs(hash(path))) + ".onnx")
    dst = src + ".out.onnx"
    onnx.save(model, src)
    r = subprocess.run([ONNXTOOL, "convert", "--infer-shapes", src, "-o", dst], capture_output=True, text=True)
    if r.returncode != 0:
        return ("error", path, r.stderr.strip())
    ours_model = onnx.load(dst)
    os.remove(src)
    os.remove(dst)
    t = types_by_name(theirs.graph, {})
    o = types_by_name(ours_model.graph, {})
    results = []
    for name, op in node_outputs(model.graph, []):
        results.append((compare(t.get(name), o.get(name)), op, name, t.get(name), o.get(name)))
    more = [(name, o[name]) for verdict, _, name, _, _ in results if verdict == "more" and o.get(name)]
    wrong, checked = wrong_intermediates(path, model, more)
    return ("ok", path, results, wrong_outputs(path, model, o) + wrong, checked)


def test_inputs(path, model):
    """The node test's input tensors by name, or None when absent or not all tensors."""
    data_dir = os.path.join(os.path.dirname(path), "test_data_set_0")
    feeds = {}
    for i, inp in enumerate(model.graph.input):
        f = os.path.join(data_dir, f"input_{i}.pb")
        if not os.path.exists(f):
            return None
        tensor = onnx.TensorProto()
        try:
            with open(f, "rb") as fh:
                tensor.ParseFromString(fh.read())
            feeds[inp.name] = onnx.numpy_helper.to_array(tensor)
        except Exception:
            return None
    return feeds


def wrong_intermediates(path, model, more):
    """Main-graph values where ours is more specific than onnx, checked against the shapes
    onnxruntime computes from the node test's inputs (models it cannot run are skipped).
    Returns the wrong ones and how many were checked."""
    top = {o for n in model.graph.node for o in n.output if o}
    more = [(name, ty) for name, ty in more if name in top and ty[1] is not None]
    feeds = test_inputs(path, model) if more else None
    if not feeds:
        return [], 0
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    listed = {o.name for o in probe.graph.output}
    for name, _ in more:
        if name not in listed:
            probe.graph.output.add().name = name
    try:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 4
        session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        quiet = ort.RunOptions()
        quiet.log_severity_level = 4
        values = session.run([name for name, _ in more], feeds, quiet)
    except Exception:
        return [], 0  # an op or type onnxruntime lacks
    wrong = []
    for (name, (elem, dims)), value in zip(more, values):
        if not hasattr(value, "shape"):
            continue  # a sequence or optional value
        shape = list(value.shape)
        if len(dims) != len(shape) or any(isinstance(d, int) and d != a for d, a in zip(dims, shape)):
            wrong.append((path, name, (elem, dims), ("onnxruntime", shape)))
    return wrong, len(more)


def wrong_outputs(path, model, ours):
    """Graph outputs whose inferred element type or static dims differ from the expected output
    tensors stored beside the model (node tests only)."""
    wrong = []
    data_dir = os.path.join(os.path.dirname(path), "test_data_set_0")
    for i, out in enumerate(model.graph.output):
        f = os.path.join(data_dir, f"output_{i}.pb")
        inferred = ours.get(out.name)
        if not os.path.exists(f) or inferred is None or inferred[1] is None:
            continue
        tensor = onnx.TensorProto()
        try:
            with open(f, "rb") as fh:
                tensor.ParseFromString(fh.read())
        except Exception:
            continue  # a sequence or optional output: not a TensorProto
        elem, dims = inferred
        actual = list(tensor.dims)
        if (tensor.data_type and elem and elem != tensor.data_type) or len(dims) != len(actual) or any(
                isinstance(d, int) and d != a for d, a in zip(dims, actual)):
            wrong.append((path, out.name, inferred, (tensor.data_type, actual)))
    return wrong


def unknown_dims(model_path):
    """Values with unknown rank or dims after inference, for onnx and for us."""
    model = strip(onnx.load(model_path))
    theirs = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    with tempfile.TemporaryDirectory() as tmp:
        dst = os.path.join(tmp, "out.onnx")
        subprocess.run([ONNXTOOL, "convert", "--infer-shapes", model_path, "-o", dst], check=True,
                       capture_output=True)
        ours = onnx.load(dst, load_external_data=False)
    counts = []
    for m in (theirs, ours):
        types = types_by_name(m.graph, {})
        bad = 0
        for name, _ in node_outputs(model.graph, []):
            ty = types.get(name)
            if ty is None or ty[1] is None or any(d is None for d in ty[1]):
                bad += 1
        counts.append(bad)
    return counts


def main():
    models = node_test_models()
    if os.path.basename(os.path.normpath(BUILD_DIR)).endswith("asan"):
        # The sanitizer pass is about memory safety; one process per model under ASan costs
        # minutes, so it takes every tenth model (the release pass compares all of them).
        models = models[::10]
    exported = sorted(
        os.path.join(BUILD_DIR, "models", f) for f in os.listdir(os.path.join(BUILD_DIR, "models"))
        if f.endswith(".onnx")) if os.path.isdir(os.path.join(BUILD_DIR, "models")) else []
    verbose = "--verbose" in sys.argv[1:] or "-v" in sys.argv[1:]
    counts = collections.Counter()
    less_by_op = collections.Counter()
    less = []
    conflicts = []
    errors = []
    wrong = []
    checked_by_ort = 0
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        for res in pool.map(lambda p: run_one(p, tmp), models + exported):
            if res is None:
                continue
            if res[0] == "error":
                errors.append(res[1:])
                continue
            wrong.extend(res[3])
            checked_by_ort += res[4]
            model_dir = os.path.basename(os.path.dirname(res[1]))
            for verdict, op, name, t, o in res[2]:
                if verdict == "less" and (model_dir, name) in LESS_SPECIFIC_ALLOWED:
                    verdict = "less (allowed)"
                counts[verdict] += 1
                if verdict == "less":
                    less_by_op[op] += 1
                    less.append((res[1], op, name, t, o))
                if verdict == "conflict":
                    conflicts.append((res[1], op, name, t, o))
    print(f"values: same {counts['same']}, ours more specific {counts['more']}, "
          f"ours less specific {counts['less']} (+{counts['less (allowed)']} allowed), "
          f"conflict {counts['conflict']}; shapes differing from the expected outputs or onnxruntime's "
          f"{len(wrong)} (onnxruntime ran {checked_by_ort} of the more specific values)")
    if less_by_op:
        print("less specific by op:", ", ".join(f"{op} {n}" for op, n in less_by_op.most_common()))
    if verbose:
        for item in less:
            print("LESS", *item)
    for c in conflicts[:50]:
        print("CONFLICT", *c)
    if not verbose:
        for item in less[:50]:
            print("LESS", *item)
    for w in wrong[:50]:
        print("WRONG SHAPE", *w)
    for e in errors[:20]:
        print("ERROR", *e)
    worse = []
    for path in exported:
        theirs, ours = unknown_dims(path)
        print(f"{os.path.basename(path)}: values not fully known: onnx {theirs}, ours {ours}")
        if ours > theirs or (ours and os.path.basename(path) in FULLY_KNOWN_EXPORTS):
            worse.append(path)
    for path in worse:
        print("NOT FULLY KNOWN", path)
    sys.exit(1 if conflicts or errors or less or wrong or worse else 0)


if __name__ == "__main__":
    main()
