"""Writes the invalid models that tests/py/test_check.py feeds to `onnxtool check`.

Each case is one function below, registered under its name; tests/invalid/cases.txt holds the
expected exit code, whether onnx.checker sees the defect, and the exact expected message.
Models are built with onnx.helper (and protobuf edits or raw bytes where helper refuses), into
OUTDIR/<case>/model.onnx, beside any external data files the case needs. Nothing binary is kept
in the repository.

usage: make_invalid_models.py OUTDIR   (prints "<case> <path>" per case)
"""
import os
import random
import sys

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------- building blocks

def vi(name, elem=TensorProto.FLOAT, shape=(2,)):
    return helper.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


def model(nodes, inputs=("x",), outputs=("y",), inits=(), opset=13, ir=8, name="g", extra_opsets=(), functions=()):
    """A model of one graph; inputs/outputs are names (float [2]) or ValueInfoProtos."""
    ins = [vi(i) if isinstance(i, str) else i for i in inputs]
    outs = [vi(o) if isinstance(o, str) else o for o in outputs]
    g = helper.make_graph(list(nodes), name, ins, outs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=opsets, functions=list(functions))
    m.ir_version = ir
    return m


def relu_model(**kw):
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], **kw)


def weights(dims=(2,), name="w"):
    return numpy_helper.from_array(np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims), name)


def add_w_model(w):
    """y = x + w, with w an initializer."""
    return model([helper.make_node("Add", ["x", w.name], ["y"], name="add")], inits=[w])


def external_model(d, location, offset=None, length=None, data_len=8):
    """y = x + w, where w (float [2]) lives in external data at `location`; writes w.bin (data_len bytes)."""
    with open(os.path.join(d, "w.bin"), "wb") as f:
        f.write(bytes(range(data_len)))
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2])
    w.data_location = TensorProto.EXTERNAL
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    for k, v in entries:
        e = w.external_data.add()
        e.key, e.value = k, v
    return add_w_model(w)


# ---------------------------------------------------------------- unreadable input (exit 2)

@case
def empty_file(d):
    return b""


@case
def random_bytes(d):
    rng = random.Random(1234)
    return bytes(rng.randrange(256) for _ in range(4096))


@case
def truncated_file(d):
    data = add_w_model(weights((64,))).SerializeToString()
    return data[: len(data) // 2]


@case
def text_file(d):
    return b"this is not an onnx model\n"


@case
def directory(d):
    os.makedirs(os.path.join(d, "model.onnx"))
    return None


@case
def missing_file(d):
    return None  # nothing written


# ---------------------------------------------------------------- model fields

@case
def missing_ir_version(d):
    m = relu_model()
    m.ClearField("ir_version")
    return m


@case
def ir_version_too_new(d):
    return relu_model(ir=15)


@case
def no_opset_import(d):
    m = relu_model()
    del m.opset_import[:]
    return m


@case
def duplicate_opset_domain(d):
    m = relu_model()
    m.opset_import.append(helper.make_opsetid("", 14))
    return m


@case
def duplicate_opset_same_version(d):
    # what skl2onnx 1.20 writes for scikit-learn pipelines: the default domain twice, one version
    m = relu_model()
    m.opset_import.append(helper.make_opsetid("", m.opset_import[0].version))
    return m


@case
def opset_too_new(d):
    return relu_model(opset=99)


@case
def duplicate_metadata_key(d):
    m = relu_model()
    helper.set_model_props(m, {"a": "1"})
    e = m.metadata_props.add()
    e.key, e.value = "a", "2"
    return m


@case
def graph_without_name(d):
    return relu_model(name="")


# ---------------------------------------------------------------- ops and schemas

@case
def unknown_op(d):
    return model([helper.make_node("Frobnicate", ["x"], ["y"], name="f")])


@case
def op_not_in_opset(d):
    return model([helper.make_node("Gelu", ["x"], ["y"], name="gelu")], opset=13)


@case
def deprecated_op(d):
    scales = numpy_helper.from_array(np.array([2.0], dtype=np.float32), "scales")
    return model([helper.make_node("Upsample", ["x", "scales"], ["y"], name="up")], inits=[scales], opset=10)


@case
def too_few_inputs(d):
    return model([helper.make_node("Add", ["x"], ["y"], name="add")])


@case
def too_many_inputs(d):
    return model([helper.make_node("Relu", ["x", "x"], ["y"], name="relu")])


@case
def too_many_outputs(d):
    return model([helper.make_node("Relu", ["x"], ["y", "z"], name="relu")])


@case
def too_few_outputs(d):
    return model([helper.make_node("Relu", ["x"], [], name="relu"), helper.make_node("Neg", ["x"], ["y"], name="neg")])


@case
def unnamed_node(d):
    return model([helper.make_node("Frobnicate", ["x"], ["y"])])


@case
def ref_attr_outside_function(d):
    n = helper.make_node("Softmax", ["x"], ["y"], name="sm")
    n.attribute.append(helper.make_attribute_ref("axis", AttributeProto.INT))
    n.attribute[0].ref_attr_name = "ax"
    return model([n])


@case
def required_input_empty(d):
    return model([helper.make_node("Add", ["x", ""], ["y"], name="add")])


@case
def missing_required_attribute(d):
    return model([helper.make_node("Cast", ["x"], ["y"], name="cast")])


@case
def unknown_attribute(d):
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu", alpha=0.5)])


@case
def attribute_wrong_type(d):
    return model([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1.0)])


@case
def duplicate_attribute(d):
    n = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)
    n.attribute.append(helper.make_attribute("axis", -1))
    return model([n])


@case
def attribute_two_value_fields(d):
    n = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)
    n.attribute[0].f = 2.5
    return model([n])


@case
def attribute_type_undefined(d):
    n = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)
    n.attribute[0].type = AttributeProto.UNDEFINED
    return model([n])


@case
def cast_to_invalid_dtype(d):
    return model([helper.make_node("Cast", ["x"], ["y"], name="cast", to=999)])


@case
def node_of_unknown_domain(d):
    return model([helper.make_node("FusedThing", ["x"], ["y"], name="fused", domain="com.example")],
                 extra_opsets=[("com.example", 1)])


@case
def domain_not_imported(d):
    return model([helper.make_node("FusedThing", ["x"], ["y"], name="fused", domain="com.example")])


# ---------------------------------------------------------------- SSA, scope and order

@case
def two_producers(d):
    return model([helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")])


@case
def output_same_as_graph_input(d):
    return model([helper.make_node("Relu", ["x"], ["x"], name="relu")], outputs=("x",))


@case
def output_same_as_initializer(d):
    return model([helper.make_node("Relu", ["x"], ["w"], name="relu"), helper.make_node("Neg", ["w"], ["y"], name="neg")],
                 inits=[weights()])


@case
def undefined_input(d):
    return model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")])


@case
def unsorted_nodes(d):
    return model([helper.make_node("Neg", ["t"], ["y"], name="neg"), helper.make_node("Relu", ["x"], ["t"], name="relu")])


@case
def cycle(d):
    return model([helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
                  helper.make_node("Neg", ["b"], ["y"], name="n3")])


def if_model(then_nodes, then_out="t", extra_outer=()):
    """y = If(cond) then <then_nodes> else Identity(x); x is the outer value the branches may use."""
    then_g = helper.make_graph(then_nodes, "then_g", [], [vi(then_out)])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="else_id")], "else_g", [], [vi("e")])
    node = helper.make_node("If", ["cond"], ["y"], name="if1", then_branch=then_g, else_branch=else_g)
    return model(list(extra_outer) + [node], inputs=("x", vi("cond", TensorProto.BOOL, ())))


@case
def if_valid_outer_scope(d):
    return if_model([helper.make_node("Neg", ["x"], ["t"], name="then_neg")])


@case
def if_undefined_outer_value(d):
    return if_model([helper.make_node("Add", ["x", "ghost"], ["t"], name="then_add")])


@case
def if_uses_own_output(d):
    return if_model([helper.make_node("Neg", ["y"], ["t"], name="then_neg")])


@case
def subgraph_redefines_outer_value(d):
    return if_model([helper.make_node("Neg", ["x"], ["x"], name="then_neg")], then_out="x")


@case
def subgraph_output_from_outer_scope(d):
    return if_model([], then_out="x")


@case
def loop_in_if_undefined_value(d):
    body = helper.make_graph([helper.make_node("Add", ["v", "missing"], ["v_out"], name="body_add"),
                              helper.make_node("Identity", ["c"], ["c_out"], name="body_cond")],
                             "body", [vi("i", TensorProto.INT64, ()), vi("c", TensorProto.BOOL, ()), vi("v")],
                             [vi("c_out", TensorProto.BOOL, ()), vi("v_out")])
    loop = helper.make_node("Loop", ["", "", "x"], ["t"], name="loop", body=body)
    return if_model([loop])


# ---------------------------------------------------------------- graph inputs and outputs

@case
def output_not_produced(d):
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], outputs=("y", "z"))


@case
def empty_output_name(d):
    m = relu_model()
    m.graph.output.append(vi("y"))
    m.graph.output[1].name = ""
    return m


@case
def input_without_type(d):
    m = relu_model()
    m.graph.input[0].ClearField("type")
    return m


@case
def invalid_elem_type(d):
    return relu_model(inputs=(vi("x", 999),))


@case
def duplicate_graph_input(d):
    return model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], inputs=("x", "x"))


# ---------------------------------------------------------------- initializers and tensors

@case
def invalid_data_type(d):
    w = weights()
    w.data_type = 999
    return add_w_model(w)


@case
def raw_data_too_small(d):
    w = weights((4,))
    w.raw_data = w.raw_data[:6]
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], inits=[w])


@case
def raw_data_too_large(d):
    w = weights()
    w.raw_data = w.raw_data + b"\0" * 4
    return add_w_model(w)


@case
def float_data_count_mismatch(d):
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    del w.float_data[3:]
    return add_w_model(w)


@case
def string_data_count_mismatch(d):
    s = helper.make_tensor("names", TensorProto.STRING, [3], [b"a", b"b", b"c"])
    del s.string_data[2:]
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], inits=[s])


@case
def negative_dim(d):
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    w.dims[0] = -2
    return add_w_model(w)


@case
def dims_product_overflow(d):
    w = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    del w.dims[:]
    w.dims.extend([1 << 32, 1 << 32, 1 << 32])
    return add_w_model(w)


@case
def declared_size_too_large(d):
    w = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    del w.dims[:]
    w.dims.extend([1 << 20, 1 << 19])  # 2^39 floats: 2 TiB declared (within the element limit), 4 bytes held
    w.raw_data = b"\0\0\0\0"
    del w.float_data[:]
    return add_w_model(w)


@case
def duplicate_initializer(d):
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], inits=[weights(), weights()])


@case
def sparse_indices_int32(d):
    values = numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "sw")
    indices = numpy_helper.from_array(np.array([0, 1], dtype=np.int32), "sw_idx")
    m = model([helper.make_node("Relu", ["x"], ["y"], name="relu")])
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [2]))
    return m


@case
def sparse_index_out_of_range(d):
    values = numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "sw")
    indices = numpy_helper.from_array(np.array([1, 7], dtype=np.int64), "sw_idx")
    m = model([helper.make_node("Relu", ["x"], ["y"], name="relu")])
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [2, 3]))
    return m


@case
def constant_tensor_too_small(d):
    t = helper.make_tensor("c", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    del t.float_data[2:]
    return model([helper.make_node("Constant", [], ["c"], name="const", value=t),
                  helper.make_node("Add", ["x", "c"], ["y"], name="add")])


# ---------------------------------------------------------------- external data

@case
def external_escapes_folder(d):
    with open(os.path.join(os.path.dirname(d), "outside.bin"), "wb") as f:
        f.write(bytes(8))
    return external_model(d, "../outside.bin")


@case
def external_absolute_path(d):
    return external_model(d, os.path.join(os.path.abspath(d), "w.bin"))


@case
def external_missing_file(d):
    return external_model(d, "nope.bin")


@case
def external_offset_beyond_file(d):
    return external_model(d, "w.bin", offset=64)


@case
def external_length_beyond_file(d):
    return external_model(d, "w.bin", offset=4, length=8)


# ---------------------------------------------------------------- model-local functions

def local_fn(nodes, inputs=("a", "b"), outputs=("c",), name="AddTwice", opset=13):
    return helper.make_function("local", name, list(inputs), list(outputs), nodes, [helper.make_opsetid("", opset)])


def fn_model(fn, call_inputs=("x", "x")):
    call = helper.make_node(fn.name, list(call_inputs), ["y"], name="call", domain="local")
    return model([call], extra_opsets=[("local", 1)], functions=[fn])


@case
def function_valid(d):
    return fn_model(local_fn([helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Add", ["t", "b"], ["c"])]))


@case
def function_undefined_input(d):
    return fn_model(local_fn([helper.make_node("Add", ["a", "zz"], ["t"], name="fadd"),
                              helper.make_node("Add", ["t", "b"], ["c"], name="fadd2")]))


@case
def function_call_too_many_inputs(d):
    return fn_model(local_fn([helper.make_node("Add", ["a", "b"], ["c"])]), call_inputs=("x", "x", "x"))


@case
def function_recursive(d):
    fn = local_fn([helper.make_node("AddTwice", ["a", "b"], ["c"], domain="local")])
    fn.opset_import.append(helper.make_opsetid("local", 1))
    return fn_model(fn)


@case
def function_defined_twice(d):
    fn = local_fn([helper.make_node("Add", ["a", "b"], ["c"])])
    m = fn_model(fn)
    m.functions.append(fn)
    return m


@case
def function_output_not_produced(d):
    return fn_model(local_fn([helper.make_node("Add", ["a", "b"], ["t"], name="fadd")]))


@case
def function_opset_incompatible(d):
    fn = local_fn([helper.make_node("ReduceSum", ["a"], ["c"], name="rs")], inputs=("a",), name="Sum", opset=12)
    return fn_model(fn, call_inputs=("x",))


@case
def function_ref_attr_undeclared(d):
    sm = helper.make_node("Softmax", ["a"], ["c"], name="sm")
    sm.attribute.append(helper.make_attribute_ref("axis", AttributeProto.INT))
    sm.attribute[0].ref_attr_name = "dim"
    return fn_model(local_fn([sm], inputs=("a",), name="Soft"), call_inputs=("x",))


# ---------------------------------------------------------------- shape inference (issue 3)

def two_input_model(op, a, b, out_elem=TensorProto.FLOAT, **attrs):
    """y = op(a, b) with a and b graph inputs given as (elem, shape); y's dims are left to inference."""
    node = helper.make_node(op, ["a", "b"], ["y"], name=op.lower(), **attrs)
    return model([node], inputs=[vi("a", *a), vi("b", *b)], outputs=[vi("y", out_elem, [None] * len(a[1]))])


@case
def matmul_inner_dims_differ(d):
    return two_input_model("MatMul", (TensorProto.FLOAT, (2, 3)), (TensorProto.FLOAT, (4, 5)))


@case
def concat_ranks_differ(d):
    return two_input_model("Concat", (TensorProto.FLOAT, (2, 3)), (TensorProto.FLOAT, (2, 3, 4)), axis=0)


@case
def add_elem_types_differ(d):
    return two_input_model("Add", (TensorProto.FLOAT, (2,)), (TensorProto.INT64, (2,)))


@case
def reshape_impossible_size(d):
    shape = numpy_helper.from_array(np.array([4, 2], dtype=np.int64), "shape")
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")
    return model([node], inputs=[vi("x", shape=(2, 3))], outputs=[vi("y", shape=(None, None))], inits=[shape])


@case
def inferred_contradicts_declared(d):
    return relu_model(outputs=[vi("y", shape=(3,))])


@case
def matmul_in_if_branch(d):
    mm = helper.make_node("MatMul", ["a", "b"], ["t"], name="then_mm")
    then_g = helper.make_graph([mm], "then_g", [], [vi("t", shape=None)])
    neg = helper.make_node("Neg", ["a"], ["e"], name="else_neg")
    else_g = helper.make_graph([neg], "else_g", [], [vi("e", shape=None)])
    node = helper.make_node("If", ["c"], ["y"], name="if1", then_branch=then_g, else_branch=else_g)
    return model([node], inputs=[vi("c", TensorProto.BOOL, ()), vi("a", shape=(2, 3)), vi("b", shape=(4, 5))],
                 outputs=[vi("y", shape=(None, None))])


@case
def matmul_in_function(d):
    fn = local_fn([helper.make_node("MatMul", ["a", "b"], ["c"], name="fmm")], name="Mm")
    call = helper.make_node("Mm", ["a", "b"], ["y"], name="call", domain="local")
    return model([call], inputs=[vi("a", shape=(2, 3)), vi("b", shape=(4, 5))], outputs=[vi("y", shape=(None, None))],
                 extra_opsets=[("local", 1)], functions=[fn])


@case
def shapes_valid_symbolic(d):
    """Symbolic dims that meet: nothing to report."""
    mm = helper.make_node("MatMul", ["a", "b"], ["t"], name="mm")
    shape = numpy_helper.from_array(np.array([-1], dtype=np.int64), "shape")
    rs = helper.make_node("Reshape", ["t", "shape"], ["y"], name="reshape")
    return model([mm, rs], inputs=[vi("a", shape=("batch", 3)), vi("b", shape=(3, 5))],
                 outputs=[vi("y", shape=(None,))], inits=[shape])


# ---------------------------------------------------------------- onnxtool's limits (lib/limits.h, exit 2)

MAX_NODES = 10_000_000
MAX_SUBGRAPH_DEPTH = 64
MAX_NAME_BYTES = 64 << 10
MAX_STRING_BYTES = 64 << 20


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7f) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def wire_field(number, payload):
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def nested_ifs(depth):
    """Main-graph If 'if0' whose then_branch holds If 'if1', and so on: `depth` levels of subgraphs,
    written as wire bytes (protobuf's Python decoder refuses messages this deep)."""
    def leaf(k):
        return helper.make_graph([helper.make_node("Identity", ["x"], [f"o{k}"], name=f"id{k}")], f"b{k}", [],
                                 [vi(f"o{k}")])
    sub = leaf(depth).SerializeToString()
    for k in range(depth - 1, -1, -1):
        n = helper.make_node("If", ["c"], [f"o{k}" if k else "y"], name=f"if{k}",
                             else_branch=leaf(f"e{k}")).SerializeToString()
        n += wire_field(5, wire_field(1, b"then_branch") + wire_field(6, sub) + varint(20 << 3) + varint(AttributeProto.GRAPH))
        if k:
            sub = helper.make_graph([], f"b{k}", [], [vi(f"o{k}")]).SerializeToString() + wire_field(1, n)
    m = model([], inputs=[vi("x"), vi("c", TensorProto.BOOL, ())])
    graph = m.graph.SerializeToString() + wire_field(1, n)
    m.ClearField("graph")
    return m.SerializeToString() + wire_field(7, graph)


@case
def subgraph_nesting_at_limit(d):
    """64 levels of If: the deepest onnxtool reads (onnx's own parser stops near 32)."""
    return nested_ifs(MAX_SUBGRAPH_DEPTH)


@case
def subgraph_nesting_too_deep(d):
    return nested_ifs(MAX_SUBGRAPH_DEPTH + 1)


@case
def too_many_nodes(d):
    """One node over the limit, each an empty NodeProto (2 bytes): refused before protobuf parses them."""
    m = relu_model()
    m.ClearField("graph")
    nodes = b"\x0a\x00" * (MAX_NODES + 1)
    return m.SerializeToString() + varint(7 << 3 | 2) + varint(len(nodes)) + nodes


@case
def node_name_too_long(d):
    m = relu_model()
    m.graph.node[0].name = "n" * (MAX_NAME_BYTES + 1)
    return m


@case
def value_name_too_long(d):
    long = "v" * (MAX_NAME_BYTES + 1)
    return model([helper.make_node("Relu", ["x"], [long], name="relu"), helper.make_node("Neg", [long], ["y"], name="neg")])


@case
def string_attribute_too_long(d):
    c = helper.make_node("Constant", [], ["y"], name="const", value_string="s" * (MAX_STRING_BYTES + 1))
    return model([c], inputs=[], outputs=[vi("y", TensorProto.STRING, ())])


@case
def string_data_too_long(d):
    w = helper.make_tensor("w", TensorProto.STRING, [2], [b"ok", b"s" * (MAX_STRING_BYTES + 1)])
    return model([helper.make_node("Identity", ["w"], ["y"], name="id")], inputs=[], inits=[w],
                 outputs=[vi("y", TensorProto.STRING, (2,))])


@case
def declared_elements_too_large(d):
    """2^62 strings declared, none held: refused by count, without allocating 2^62 of anything."""
    w = TensorProto(name="w", data_type=TensorProto.STRING, dims=[1 << 62])
    return model([helper.make_node("Identity", ["w"], ["y"], name="id")], inputs=[], inits=[w],
                 outputs=[vi("y", TensorProto.STRING, (1 << 62,))])


@case
def initializers_exceed_file(d):
    """raw_data of 16 bytes where the dims declare 4 GiB: more than the whole file holds."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 30])
    w.raw_data = bytes(16)
    return add_w_model(w)


@case
def int32_data_smaller_than_declared(d):
    """Valid: 200000 small int32 values packed as varints take ~1 byte each in the file, 4 in
    memory; the inline bytes declared exceed the file size, yet every tensor holds its data."""
    w = helper.make_tensor("w", TensorProto.INT32, [200000], [0, 1] * 100000)
    shape = helper.make_tensor("s", TensorProto.INT64, [1], [-1])
    nodes = [helper.make_node("Cast", ["w"], ["wf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["wf"], ["r"], name="sum", keepdims=0),
             helper.make_node("Add", ["x", "r"], ["y"], name="add")]
    return model(nodes, inits=[w, shape])


# ---------------------------------------------------------------- driver

def generate(outdir):
    """Writes every case under outdir; returns {case: model path}."""
    paths = {}
    for name, fn in CASES.items():
        d = os.path.join(outdir, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        result = fn(d)
        if isinstance(result, onnx.ModelProto):
            result = result.SerializeToString()
        if result is not None:
            with open(path, "wb") as f:
                f.write(result)
        paths[name] = path
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, path in generate(sys.argv[1]).items():
        print(name, path)
