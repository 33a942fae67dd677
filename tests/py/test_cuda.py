"""The cuda executor (`--device cuda`). On every machine: the flags are in --help, a build
without CUDA or a machine without a GPU exits 3 naming why and writes nothing, --precision other
than fp32 off the GPU is a usage error (2), --device cuda with another --executor too. On a
machine with a GPU (the `cuda` executor prepares): models covering every device kernel family and
the executor's fusions (Conv+BatchNorm+Add+Relu, Gemm + the erf GELU as exporters spell it, MatMul
scaled by a Div, residual Adds through a Reshape, attention with a broadcast mask and Softmax,
LayerNormalization, pooling, Gather, Transpose/Concat/Slice/Split/Expand, Cast, Where, host
fallbacks in the middle) give the cpu executor's outputs: fp32 and tf32 within 1e-4 relative to the
largest output, fp16 and bf16 within 3e-2; two runs (the second replayed from a CUDA graph) and
--no-cuda-graph give the same bytes; `bench --device cuda --json` reports the GPU and the copies."""
import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import SOURCE_DIR, Checker, run  # noqa: E402

SMALL = os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")
rng = np.random.default_rng(0)


def const(name, *shape, scale=0.3):
    return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def model(path, nodes, inputs, outputs, inits, opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    return path


def vi(name, dims, t=T.FLOAT):
    return h.make_tensor_value_info(name, t, dims)


def models(tmp):
    out = {}
    # ResNet-style block: Conv+BN, Relu, Conv, residual Add, Relu, MaxPool, GlobalAveragePool, Gemm
    out["resblock"] = model(os.path.join(tmp, "resblock.onnx"), [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        h.make_node("BatchNormalization", ["c1", "s", "bb", "mu", "var"], ["n1"]),
        h.make_node("Relu", ["n1"], ["r1"]),
        h.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        h.make_node("Add", ["c2", "x"], ["a"]),
        h.make_node("Relu", ["a"], ["r2"]),
        h.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        h.make_node("AveragePool", ["p"], ["ap"], kernel_shape=[2, 2], strides=[1, 1], count_include_pad=1, pads=[0, 0, 1, 1]),
        h.make_node("GlobalAveragePool", ["ap"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ], [vi("x", [2, 8, 12, 12])], [vi("y", [2, 5])],
        [const("w1", 8, 8, 3, 3), const("b1", 8), const("s", 8), const("bb", 8), const("mu", 8),
         nh.from_array(np.abs(rng.standard_normal(8)).astype(np.float32) + 0.5, "var"), const("w2", 8, 8, 3, 3),
         const("wf", 5, 8), const("bf", 5)])
    # a depthwise conv, Clip (ReLU6), grouped conv, strided 1-D conv
    out["mobile"] = model(os.path.join(tmp, "mobile.onnx"), [
        h.make_node("Conv", ["x", "wd"], ["d"], group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("Clip", ["d", "lo", "hi"], ["c"]),
        h.make_node("Conv", ["c", "wg", "bg"], ["y"], group=2),
    ], [vi("x", [1, 8, 15, 15])], [vi("y", [1, 4, 8, 8])],
        [const("wd", 8, 1, 3, 3), nh.from_array(np.array(0, np.float32), "lo"), nh.from_array(np.array(6, np.float32), "hi"),
         const("wg", 4, 4, 1, 1), const("bg", 4)])
    # BERT-style layer: Gemm + erf GELU chain, MatMul / Div, broadcast mask, Softmax, residual
    # through Reshape, LayerNorm, Gather, Transpose, Cast/Sub/Mul mask arithmetic
    S, H, D = 16, 2, 8
    C = H * D
    nodes = [
        h.make_node("Gather", ["emb", "ids"], ["e"]),
        h.make_node("LayerNormalization", ["e", "g0", "b0"], ["x"], axis=-1, epsilon=1e-12),
        h.make_node("Reshape", ["x", "flat"], ["x2"]),
        h.make_node("Gemm", ["x2", "wq", "bq"], ["q2"], transB=1),
        h.make_node("Gemm", ["x2", "wk", "bk"], ["k2"], transB=1),
        h.make_node("Reshape", ["q2", "heads"], ["q3"]),
        h.make_node("Transpose", ["q3"], ["q"], perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["k2", "heads"], ["k3"]),
        h.make_node("Transpose", ["k3"], ["kt"], perm=[0, 2, 3, 1]),
        h.make_node("MatMul", ["q", "kt"], ["sc"]),
        h.make_node("Div", ["sc", "sqrtd"], ["sd"]),
        h.make_node("Cast", ["mask"], ["mf"], to=T.FLOAT),
        h.make_node("Sub", ["one", "mf"], ["inv"]),
        h.make_node("Mul", ["inv", "big"], ["madd"]),
        h.make_node("Unsqueeze", ["madd", "ax12"], ["m4"]),
        h.make_node("Add", ["sd", "m4"], ["sm"]),
        h.make_node("Softmax", ["sm"], ["pr"], axis=-1),
        h.make_node("MatMul", ["pr", "q"], ["ctx"]),
        h.make_node("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["ct", "flat"], ["c2"]),
        h.make_node("Gemm", ["c2", "wo", "bo"], ["o2"], transB=1),
        h.make_node("Reshape", ["o2", "back"], ["o3"]),
        h.make_node("Add", ["x", "o3"], ["r"]),
        h.make_node("LayerNormalization", ["r", "g1", "b1"], ["ln"], axis=-1),
        h.make_node("Reshape", ["ln", "flat"], ["l2"]),
        h.make_node("Gemm", ["l2", "w1", "b1f"], ["f1"], transB=1),
        h.make_node("Div", ["f1", "sqrt2"], ["gd"]),
        h.make_node("Erf", ["gd"], ["ge"]),
        h.make_node("Add", ["ge", "one"], ["g1p"]),
        h.make_node("Mul", ["f1", "g1p"], ["gm"]),
        h.make_node("Mul", ["gm", "half"], ["gelu"]),
        h.make_node("Gemm", ["gelu", "w2", "b2f"], ["f2"], transB=1),
        h.make_node("Reshape", ["f2", "back"], ["y"]),
    ]
    inits = [const("emb", 50, C, scale=1.0), const("g0", C), const("b0", C), const("wq", C, C), const("bq", C), const("wk", C, C),
             const("bk", C), const("wo", C, C), const("bo", C), const("g1", C), const("b1", C), const("w1", 4 * C, C),
             const("b1f", 4 * C), const("w2", C, 4 * C), const("b2f", C),
             nh.from_array(np.array([-1, C], np.int64), "flat"), nh.from_array(np.array([2, S, H, D], np.int64), "heads"),
             nh.from_array(np.array([2, S, C], np.int64), "back"), nh.from_array(np.array(np.sqrt(D), np.float32), "sqrtd"),
             nh.from_array(np.array(1.0, np.float32), "one"), nh.from_array(np.array(-10000.0, np.float32), "big"),
             nh.from_array(np.array([1, 2], np.int64), "ax12"), nh.from_array(np.array(1.4142135, np.float32), "sqrt2"),
             nh.from_array(np.array(0.5, np.float32), "half")]
    out["bert"] = model(os.path.join(tmp, "bert.onnx"), nodes, [vi("ids", [2, S], T.INT64), vi("mask", [2, S], T.INT64)],
                        [vi("y", [2, S, C])], inits)
    # layout ops, Where, a reduction, and a host fallback in between (Mod has no device kernel)
    out["layout"] = model(os.path.join(tmp, "layout.onnx"), [
        h.make_node("Slice", ["x", "st", "en", "axs", "stp"], ["s"]),
        h.make_node("Split", ["s"], ["s1", "s2"], axis=1, num_outputs=2),
        h.make_node("Concat", ["s2", "s1", "s2"], ["c"], axis=1),
        h.make_node("Mod", ["c", "three"], ["md"], fmod=1),
        h.make_node("Expand", ["md", "eshape"], ["ex"]),
        h.make_node("Greater", ["ex", "zero"], ["gt"]),
        h.make_node("Where", ["gt", "ex", "negx"], ["w"]),
        h.make_node("ReduceMean", ["w", "rax"], ["rm"], keepdims=1),
        h.make_node("Transpose", ["rm"], ["y"], perm=[2, 0, 1, 3, 4]),
    ], [vi("x", [3, 8, 10, 6]), vi("negx", [6])], [vi("y", [1, 2, 2, 5, 6])],
        [nh.from_array(np.array([0, 1, 9], np.int64), "st"), nh.from_array(np.array([3, 7, -11], np.int64), "en"),
         nh.from_array(np.array([0, 1, 2], np.int64), "axs"), nh.from_array(np.array([2, 1, -2], np.int64), "stp"),
         nh.from_array(np.array(3.0, np.float32), "three"), nh.from_array(np.array([2, 2, 9, 5, 6], np.int64), "eshape"),
         nh.from_array(np.array([2], np.int64), "rax"),
         nh.from_array(np.array(0.0, np.float32), "zero")], opset=18)
    return out


def outputs(d):
    return {f: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d))}


def main():
    c = Checker("test_cuda")
    for sub in ("run", "bench"):
        r = run([sub, "--help"])
        for flag in ("--device", "--precision", "--no-cuda-graph"):
            c.check(flag in r.stdout, f"{sub} --help lists {flag}")
    tmp = tempfile.mkdtemp()
    r = run(["run", SMALL, "--random", "--precision", "fp16"])
    c.check(r.returncode == 2 and "only --device cuda" in r.stderr, f"--precision fp16 on the cpu: exit 2: {r.returncode} {r.stderr}")
    r = run(["run", SMALL, "--random", "--device", "cuda", "--executor", "ref"])
    c.check(r.returncode == 2 and "cuda executor" in r.stderr, f"--device cuda --executor ref: exit 2: {r.returncode} {r.stderr}")
    probe = run(["run", SMALL, "--random", "--device", "cuda", "-O", os.path.join(tmp, "probe")])
    if probe.returncode != 0:
        ok = probe.returncode == 3 and ("no CUDA executor" in probe.stderr or "no usable CUDA GPU" in probe.stderr or
                                              "could not be loaded" in probe.stderr)
        c.check(ok, f"without a GPU: exit 3 naming why: {probe.returncode} {probe.stderr}")
        c.check(len(probe.stderr.strip().splitlines()) == 1, f"one line: {probe.stderr!r}")
        c.check(not os.path.exists(os.path.join(tmp, "probe")), "nothing written")
        print(f"no usable GPU here ({probe.stderr.strip()}): the device checks are skipped")
        c.finish()
    # ---- a GPU: outputs against the cpu executor ----
    for name, path in models(tmp).items():
        ins = []
        m = onnx.load(path)
        for i, e in enumerate(m.graph.input):
            dims = [d.dim_value for d in e.type.tensor_type.shape.dim]
            if e.type.tensor_type.elem_type == T.INT64:
                v = (rng.integers(0, 50, dims) if e.name == "ids" else
                     np.array([[1] * 12 + [0] * 4, [1] * 16], np.int64)).astype(np.int64)
            else:
                v = rng.standard_normal(dims).astype(np.float32)
            f = os.path.join(tmp, f"{name}_{i}.npy")
            np.save(f, v)
            ins += ["-i", f"{e.name}={f}"]
        ref_dir = os.path.join(tmp, f"{name}_cpu")
        r = run(["run", path, "-O", ref_dir] + ins)
        if not c.check(r.returncode == 0, f"{name}: cpu run: {r.stderr}"):
            continue
        ref = outputs(ref_dir)
        for prec, tol in (("fp32", 1e-4), ("tf32", 1e-2), ("fp16", 3e-2), ("bf16", 8e-2)):
            for extra in ([], ["--no-cuda-graph"]):
                d = os.path.join(tmp, f"{name}_{prec}_{len(extra)}")
                r = run(["run", path, "--device", "cuda", "--precision", prec, "-O", d] + ins + extra)
                if not c.check(r.returncode == 0, f"{name} {prec} {extra}: {r.stderr}"):
                    continue
                got = outputs(d)
                for k, v in ref.items():
                    err = float(np.max(np.abs(got[k].astype(np.float64) - v)) / max(1e-30, float(np.max(np.abs(v)))))
                    c.check(got[k].shape == v.shape and err <= tol, f"{name} {prec} {extra} {k}: relative error {err:.3g} > {tol}")
        # repeated runs (the second and later replay a CUDA graph): the same bytes every time
        r = run(["bench", path, "--device", "cuda", "--iterations", "5", "--json"] + ins)
        if c.check(r.returncode == 0, f"{name}: bench --device cuda: {r.stderr}"):
            doc = json.loads(r.stdout)
            c.check(doc.get("executor") == "cuda" and "gpu" in doc and "name" in doc["gpu"], f"{name}: bench reports the GPU")
            c.check("copy_ms" in doc and doc["copy_ms"]["inputs_to_device"] >= 0, f"{name}: bench reports the copies")
        r = run(["bench", path, "--device", "cuda", "--iterations", "3", "--profile", "--top", "50"] + ins)
        if name == "bert":
            c.check("gelu" in r.stdout and "+div" in r.stdout and "+add" in r.stdout, f"bert: fusions named in the profile: {r.stdout}")
        if name == "layout":
            c.check("(fallback)" in r.stdout and "Mod" in r.stdout, f"layout: Mod falls back to the host: {r.stdout}")
    c.finish()


if __name__ == "__main__":
    main()
