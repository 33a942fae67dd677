"""onnxtool quantize --fp16/--bf16: float32 -> float16/bfloat16 with Casts at the float32 borders.
Every model written passes onnx.checker (full) and runs in ONNX Runtime (float16; bfloat16 where its
CPU provider has the kernels, else the refusal is asserted), its outputs stay within the stated
tolerance of the float32 model on ONNX Runtime and on our reference executor (the quantize report),
and what must stay float32 does: an op whose schema has no float16 (Celu at opset 17), Resize's
scales, Range and the shape computation feeding it, an If's interface (its bodies are converted
inside, Casts at their borders), --op-block-list ops.

Tolerances: float16 |y16 - y32| <= 1e-2 * max|y32| + 1e-3; bfloat16 (8-bit mantissa) 6e-2 * max|y32|
+ 1e-2."""
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import NODE_TESTS, Checker, run  # noqa: E402

F16_TOL = (1e-2, 1e-3)
BF16_TOL = (6e-2, 1e-2)


def mixed_model(opset=17):
    """MatMul/Add (a bias beyond the float16 range), Celu (float-only at opset 17), Resize with
    float scales, Range over a float limit computed from a Shape, an If reading an outer value."""
    rng = np.random.default_rng(3)
    init = [
        numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), "W"),
        numpy_helper.from_array(np.array([1e5, -7e4, 0.5, 0.25, 0, 0, 0, 1e-9], np.float32), "B"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array([1, 1, 4, 2], np.int64), "shape4"),
        numpy_helper.from_array(np.array(1e-2, np.float32), "small"),
    ]
    then_g = helper.make_graph([helper.make_node("Mul", ["t", "half"], ["tb"])], "then", [],
                               [helper.make_tensor_value_info("tb", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["t"], ["eb"])], "else", [],
                               [helper.make_tensor_value_info("eb", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "B"], ["hb"]),
        helper.make_node("Mul", ["hb", "small"], ["hs"]),
        helper.make_node("Tanh", ["hs"], ["t"]),
        helper.make_node("Celu", ["t"], ["c"], alpha=1.0),
        helper.make_node("Reshape", ["c", "shape4"], ["c4"]),
        helper.make_node("Resize", ["c4", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Cast", ["xs"], ["xsf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["xsf"], ["lim"], keepdims=0),
        helper.make_node("Range", ["zero", "lim", "one"], ["rg"]),
        helper.make_node("ReduceSum", ["t"], ["tsum"], keepdims=0),
        helper.make_node("Greater", ["tsum", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["branch"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Sigmoid", ["branch"], ["y2"]),
    ]
    g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("up", TensorProto.FLOAT, [1, 1, 8, 4]),
                           helper.make_tensor_value_info("rg", TensorProto.FLOAT, [None]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 8])], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def elem_types(m):
    """Element type of every typed value name: inputs, outputs, initializers, inferred values."""
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    t = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.output) + list(inferred.graph.value_info):
        t[vi.name] = vi.type.tensor_type.elem_type
    for i in m.graph.initializer:
        t[i.name] = i.data_type
    return t


def producer(m, name):
    return next((n for n in m.graph.node if name in n.output), None)


def close(c, got, want, tol, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    lim = tol[0] * float(np.abs(want).max(initial=0)) + tol[1]
    err = float(np.abs(got - want).max(initial=0)) if got.shape == want.shape else float("inf")
    return c.check(err <= lim, f"{what}: max diff {err:.4g} > {lim:.4g} (shapes {got.shape} {want.shape})")


def checker_ok(c, path, what):
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
        return c.check(True, what)
    except Exception as e:  # noqa: BLE001
        return c.check(False, f"{what}: onnx.checker: {e}")


def mixed_checks(c, tmp):
    src = os.path.join(tmp, "mixed.onnx")
    onnx.save(mixed_model(), src)
    x = np.random.default_rng(5).standard_normal((1, 8)).astype(np.float32)
    want = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})

    # --fp16: float16 graph inputs/outputs, float32 where it must stay
    dst = os.path.join(tmp, "mixed16.onnx")
    r = run(["quantize", src, "-o", dst, "--fp16", "--json", "--eval-sets", "1"])
    if not c.check(r.returncode == 0, f"--fp16: exit {r.returncode}: {r.stderr}"):
        return
    doc = json.loads(r.stdout)
    c.check("2 weight values beyond the float16 range" in r.stderr and "clamped" in r.stderr, f"clamp warning: {r.stderr}")
    c.check(doc["mode"] == "fp16" and doc["casts_inserted"] > 0, f"json: {doc}")
    checker_ok(c, dst, "--fp16 model")
    m = onnx.load(dst)
    types = elem_types(m)
    F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
    c.check(m.graph.input[0].type.tensor_type.elem_type == F16, "graph input is float16")
    c.check([o.type.tensor_type.elem_type for o in m.graph.output] == [F16, F16, F16], "graph outputs are float16")
    c.check([o.name for o in m.graph.output] == ["up", "rg", "y2"], f"output names kept: {[o.name for o in m.graph.output]}")
    b = next(i for i in m.graph.initializer if i.name == "B")
    bv = numpy_helper.to_array(b)
    c.check(b.data_type == F16 and bv[0] == 65504 and bv[1] == -65504 and bv[7] == 0,
            f"B clamped to +-65504 and 1e-9 flushed to 0 under its own name: {bv}")
    tanh = next(n for n in m.graph.node if n.op_type == "Tanh")
    c.check(types.get("W") == F16 and types.get("h") == F16 and types.get("hs") == F16 and types.get(tanh.output[0]) == F16,
            "MatMul/Add/Mul/Tanh in float16")
    celu = next(n for n in m.graph.node if n.op_type == "Celu")
    c.check(types.get(celu.input[0]) == F32 and types.get(celu.output[0]) == F32, "Celu (no float16 at opset 17) in float32")
    c.check(producer(m, celu.input[0]).op_type == "Cast", "a Cast feeds Celu")
    rs = next(n for n in m.graph.node if n.op_type == "Resize")
    c.check(types.get(rs.input[0]) == F16 and types.get(rs.input[2]) == F32, "Resize: float16 data, float32 scales")
    rg = next(n for n in m.graph.node if n.op_type == "Range")
    c.check(all(types.get(i) == F32 for i in rg.input), f"Range inputs float32: {[types.get(i) for i in rg.input]}")
    c.check(producer(m, "lim").op_type == "ReduceSum" and types.get("lim") == F32, "the shape computation feeding Range stays float32")
    iff = next(n for n in m.graph.node if n.op_type == "If")
    body_reads = {i for a in iff.attribute for n in a.g.node for i in n.input}
    c.check("t" in body_reads and types.get("t") == F32, "the outer value If's bodies read is float32 under its name")
    c.check(all(a.g.output[0].type.tensor_type.elem_type == F32 for a in iff.attribute), "If bodies' outputs stay float32")
    then_g = next(a.g for a in iff.attribute if a.name == "then_branch")
    mul = next((n for n in then_g.node if n.op_type == "Mul"), None)
    then_types = {**types, **{o.name: o.type.tensor_type.elem_type for o in then_g.output}}
    body_casts = [n for n in then_g.node if n.op_type == "Cast"]
    c.check(mul is not None and len(body_casts) >= 2 and
            all(x.attribute[0].i in (F16, F32) for x in body_casts) and
            any(x.attribute[0].i == F16 and mul.input[0] == x.output[0] for x in body_casts),
            f"the then body's Mul runs in float16 on a Cast of the outer value: {[n.op_type for n in then_g.node]}")
    del then_types
    # runs in ONNX Runtime, close to float32 there and on our executor (the report)
    got = ort.InferenceSession(dst, providers=["CPUExecutionProvider"]).run(None, {"x": x.astype(np.float16)})
    for name, g, w in zip(["up", "rg", "y2"], got, want):
        c.check(g.dtype == np.float16, f"{name}: ORT output dtype {g.dtype}")
        close(c, g, w, F16_TOL, f"--fp16 {name} on ORT vs float32")
    for o in doc["evaluation"]["outputs"]:
        c.check(o["max_abs_diff"] <= F16_TOL[0] * o["max_abs_reference"] + F16_TOL[1], f"--fp16 report {o}")

    # --keep-io-types --op-block-list Tanh,Sigmoid
    dst2 = os.path.join(tmp, "mixed16io.onnx")
    r = run(["quantize", src, "-o", dst2, "--fp16", "--keep-io-types", "--op-block-list", "Tanh,Sigmoid", "--eval-sets", "1"])
    c.check(r.returncode == 0 and "kept float32:" not in r.stderr, f"--keep-io-types (no -v list): {r.returncode} {r.stderr}")
    checker_ok(c, dst2, "--keep-io-types model")
    m2 = onnx.load(dst2)
    t2 = elem_types(m2)
    c.check(m2.graph.input[0].type.tensor_type.elem_type == F32 and all(o.type.tensor_type.elem_type == F32 for o in m2.graph.output),
            "--keep-io-types: float32 inputs and outputs")
    c.check(t2.get("h") == F16 and t2.get("t") == F32 and t2.get("y2") == F32, "--op-block-list Tanh,Sigmoid: they stay float32")
    got = ort.InferenceSession(dst2, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for name, g, w in zip(["up", "rg", "y2"], got, want):
        close(c, g, w, F16_TOL, f"--keep-io-types {name} on ORT")
    r = run(["-v", "quantize", src, "-o", dst2, "--fp16", "--op-block-list", "Tanh", "--eval-sets", "0"])
    c.check("kept float32: node" in r.stderr and "(Tanh): in --op-block-list" in r.stderr and "(Range)" in r.stderr,
            f"-v lists the nodes kept float32: {r.stderr}")

    # --bf16: valid; ONNX Runtime's CPU provider has no bfloat16 Celu/Tanh/...: it refuses, by name
    dst3 = os.path.join(tmp, "mixedbf.onnx")
    r = run(["quantize", src, "-o", dst3, "--bf16", "--keep-io-types", "--json", "--eval-sets", "1"])
    if c.check(r.returncode == 0, f"--bf16: {r.stderr}"):
        checker_ok(c, dst3, "--bf16 model")
        c.check(elem_types(onnx.load(dst3)).get("h") == TensorProto.BFLOAT16, "--bf16: MatMul in bfloat16")
        for o in json.loads(r.stdout)["evaluation"]["outputs"]:
            c.check(o["max_abs_diff"] <= BF16_TOL[0] * o["max_abs_reference"] + BF16_TOL[1], f"--bf16 report {o}")
        try:
            got = ort.InferenceSession(dst3, providers=["CPUExecutionProvider"]).run(None, {"x": x})
            for name, g, w in zip(["up", "rg", "y2"], got, want):
                close(c, g, w, BF16_TOL, f"--bf16 {name} on ORT")
        except Exception as e:  # noqa: BLE001
            c.check("NOT_IMPLEMENTED" in str(e), f"--bf16: ONNX Runtime refuses only for a missing kernel: {e}")


def cpu_executor_checks(c, tmp):
    """The cpu executor computes a float16 model in float32 (passes/upcast_half.h):
    fast kernels throughout (no reference fallback: the fp16 MobileNetV2 ran 1.9 s a run on
    reference kernels, 200x its float32 time), half-precision outputs under their names, within
    the float16 tolerance of ONNX Runtime (which also computes such models in float32 on x86) and
    of the float32 model."""
    small = os.path.join(os.environ.get("ONNXTOOL_SOURCE_DIR", "."), "testdata", "models", "small_cnn.onnx")
    cases = [("small16", small, ["--fp16"], np.float16), ("mixed16", os.path.join(tmp, "mixed.onnx"), ["--fp16"], np.float16),
             ("small16io", small, ["--fp16", "--keep-io-types"], None)]
    for name, src, args, io in cases:
        dst = os.path.join(tmp, name + ".onnx")
        r = run(["quantize", src, "-o", dst, "--eval-sets", "0"] + args)
        if not c.check(r.returncode == 0, f"{name}: quantize {args}: {r.stderr}"):
            continue
        m = onnx.load(dst)
        x_info = m.graph.input[0]
        shape = [d.dim_value or 1 for d in x_info.type.tensor_type.shape.dim]
        x32 = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
        want32 = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {x_info.name: x32})
        feed = x32.astype(io) if io is not None else x32
        np.save(os.path.join(tmp, name + "_x.npy"), feed)
        out = os.path.join(tmp, name + "_out")
        r = run(["run", dst, "--executor", "cpu", "-i", f"{x_info.name}={os.path.join(tmp, name + '_x.npy')}", "-O", out])
        if not c.check(r.returncode == 0, f"{name}: run --executor cpu: {r.stderr}"):
            continue
        ort_out = None
        try:
            ort_out = ort.InferenceSession(dst, providers=["CPUExecutionProvider"]).run(None, {x_info.name: feed})
        except Exception as e:  # noqa: BLE001
            c.check("NOT_IMPLEMENTED" in str(e), f"{name}: ONNX Runtime refuses only for a missing kernel: {e}")
        for i, o in enumerate(m.graph.output):
            ours = np.load(os.path.join(out, o.name + ".npy"))
            c.check(ours.dtype == np.dtype(helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)),
                    f"{name} {o.name}: our output dtype {ours.dtype}")
            close(c, ours, want32[i], F16_TOL, f"{name} {o.name}: ours (cpu) vs float32")
            if ort_out is not None:
                close(c, ours, ort_out[i], F16_TOL, f"{name} {o.name}: ours (cpu) vs ONNX Runtime on the same model")
        fallbacks = []
        for model in (src, dst):
            r = run(["bench", model, "--iterations", "1", "--json", "--profile"])
            if c.check(r.returncode == 0, f"{name}: bench {model}: {r.stderr}"):
                fallbacks.append(sorted(f["op"] for f in json.loads(r.stdout)["profile"]["fallback_nodes"]))
        if len(fallbacks) == 2:
            c.check(set(fallbacks[1]) <= set(fallbacks[0]), f"{name}: no op falls back to reference kernels that does not in float32 "
                                                  f"(half precision adds none): {fallbacks[1]} vs {fallbacks[0]}")


def external_data_checks(c, tmp):
    """Weights in an external data file are converted like inline ones (not left float32 behind Casts)."""
    d = os.path.join(tmp, "ext")
    os.makedirs(d)
    src = os.path.join(d, "m.onnx")
    onnx.save(mixed_model(), src, save_as_external_data=True, location="m.data", size_threshold=0)
    dst = os.path.join(d, "m16.onnx")
    r = run(["quantize", src, "-o", dst, "--fp16", "--eval-sets", "1", "--json"])
    if not c.check(r.returncode == 0, f"external data: {r.stderr}"):
        return
    doc = json.loads(r.stdout)
    c.check(doc["weights_quantized"] == 4 and doc["float_weight_bytes"] == 2 * doc["int8_weight_bytes"],
            f"external data: 4 initializers converted (W, B, small, zero): {doc}")
    m = onnx.load(dst)
    c.check(next(i for i in m.graph.initializer if i.name == "W").data_type == TensorProto.FLOAT16, "external W stored as float16")
    checker_ok(c, dst, "external data model")


def node_test_checks(c, tmp):
    """A spread of ONNX backend node tests: valid, runnable in ONNX Runtime, and on our executor
    within tolerance of float32 on the node test's own inputs."""
    names = ["test_conv_with_strides_padding", "test_gemm_default_matrix_bias", "test_matmul_4d", "test_layer_normalization_4d_axis0",
             "test_softmax_axis_1", "test_resize_upsample_scales_linear", "test_resize_downsample_sizes_cubic",
             "test_range_float_type_positive_delta", "test_batchnorm_epsilon", "test_instancenorm_example",
             "test_lstm_defaults", "test_gru_defaults", "test_if", "test_loop11", "test_scan9_sum", "test_maxpool_2d_pads",
             "test_averagepool_2d_pads", "test_reduce_mean_default_axes_keepdims_random", "test_einsum_batch_matmul",
             "test_gelu_tanh_1", "test_celu", "test_split_to_sequence_1", "test_sequence_map_identity_1_sequence",
             "test_constantofshape_float_ones", "test_cast_FLOAT_to_FLOAT16", "test_expand_dim_changed", "test_where_example",
             "test_dequantizelinear", "test_quantizelinear", "test_attention_4d", "test_rotary_embedding"]
    ort.set_default_logger_severity(4)
    for name in names:
        d = os.path.join(NODE_TESTS, name)
        if not c.check(os.path.isdir(d), f"node test {name} present"):
            continue
        dst = os.path.join(tmp, name + ".onnx")
        r = run(["quantize", os.path.join(d, "model.onnx"), "-o", dst, "--fp16", "--keep-io-types", "--eval", d, "--json"])
        if not c.check(r.returncode == 0, f"{name}: {r.stderr}"):
            continue
        checker_ok(c, dst, name)
        for o in json.loads(r.stdout)["evaluation"]["outputs"]:
            c.check(o["max_abs_diff"] <= F16_TOL[0] * o["max_abs_reference"] + F16_TOL[1] and o["non_finite_mismatches"] == 0,
                    f"{name}: our executor, fp16 vs fp32: {o}")
        try:  # where ONNX Runtime loads the float32 model, it loads the float16 one
            ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001
            continue
        try:
            ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
            c.check(True, name)
        except Exception as e:  # noqa: BLE001
            c.check(False, f"{name}: ONNX Runtime: {str(e)[:300]}")


def main():
    c = Checker("quantize --fp16/--bf16")
    with tempfile.TemporaryDirectory() as tmp:
        mixed_checks(c, tmp)
        cpu_executor_checks(c, tmp)
        external_data_checks(c, tmp)
        node_test_checks(c, tmp)
        src = os.path.join(tmp, "mixed.onnx")
        dst = os.path.join(tmp, "out.onnx")
        for args in (["--fp16", "--bf16"], ["--fp16", "--int8", "--dynamic"], ["--int8", "--dynamic", "--keep-io-types"],
                     ["--int8", "--dynamic", "--op-block-list", "Add"]):
            r = run(["quantize", src, "-o", dst] + args)
            c.check(r.returncode == 2 and r.stderr.startswith("onnxtool: error:"), f"{args}: exit 2: {r.returncode} {r.stderr}")
        old = os.path.join(tmp, "op12.onnx")
        m = mixed_model(opset=12)
        onnx.save(m, old)
        r = run(["quantize", old, "-o", dst, "--bf16"])
        c.check(r.returncode == 3 and "opset 13" in r.stderr, f"--bf16 at opset 12: exit 3: {r.returncode} {r.stderr}")
    c.finish()


if __name__ == "__main__":
    main()
