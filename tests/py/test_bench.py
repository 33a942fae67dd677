"""`onnxtool bench`: exit codes (usage 2, --device cuda 3), the --json document's fields and
their consistency (percentiles ordered, iteration count as asked), --profile naming the kernels
that ran and the nodes that fell back; and `run --executor cpu` giving ONNX Runtime's outputs on
the bundled CNN, with `run -v` naming the fallbacks."""
import atexit
import shutil
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import SOURCE_DIR, Checker, run  # noqa: E402

SMALL = os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")


def mlp_with_fallback(tmp):
    """MatMul + Add + Relu (fast kernels) then a Cos: Cos has no
    fast kernel, so it falls back."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                           helper.make_node("Add", ["m", "b"], ["a"], name="add"),
                           helper.make_node("Relu", ["a"], ["r"], name="relu"),
                           helper.make_node("Cos", ["r"], ["y"], name="cos")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [w, b])
    p = os.path.join(tmp, "mlp.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    return p


def rows_by_mask(tmp):
    """NonZero -> Gather -> MatMul -> Cos: the MatMul's row count is known only at run time (a
    lazy fast kernel), the Cos has no fast kernel; the output is named as exporters name values."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "w")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    g = helper.make_graph([helper.make_node("NonZero", ["mask"], ["nz"], name="nonzero"),
                           helper.make_node("Squeeze", ["nz", "axes"], ["idx"], name="squeeze"),
                           helper.make_node("Gather", ["x", "idx"], ["rows"], name="gather"),
                           helper.make_node("MatMul", ["rows", "w"], ["m"], name="mm"),
                           helper.make_node("Cos", ["m"], ["onnx::Cos_7"], name="cos")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 6]),
                           helper.make_tensor_value_info("mask", TensorProto.BOOL, [10])],
                          [helper.make_tensor_value_info("onnx::Cos_7", TensorProto.FLOAT, ["k", 5])], [w, axes])
    p = os.path.join(tmp, "rows.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    return p


def check_lazy(c, tmp):
    """`run -v` and `bench --profile` say which kernel ran for a data-dependent shape: the lazy
    fast kernel for the MatMul, the reference fallback for the Cos; `run -O` keeps ':' in names."""
    model = rows_by_mask(tmp)
    x = np.random.default_rng(4).standard_normal((10, 6)).astype(np.float32)
    mask = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 1], bool)
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "mask.npy"), mask)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x, "mask": mask})[0]
    out = os.path.join(tmp, "lazy_out")
    ins = ["-i", os.path.join(tmp, "x.npy"), "-i", os.path.join(tmp, "mask.npy")]
    r = run(["-v", "run", model, "--executor", "cpu", "-O", out] + ins)
    c.check(r.returncode == 0, f"run rows.onnx: {r.stderr}")
    f = os.path.join(out, "onnx::Cos_7.npy")
    c.check(os.path.exists(f) and np.allclose(np.load(f), want, rtol=1e-5, atol=1e-6),
            f"run -O writes onnx::Cos_7.npy with ONNX Runtime's values: {os.listdir(out) if os.path.isdir(out) else r.stderr}")
    c.check("node 'cos' (Cos): fallback to the reference kernel" in r.stderr and "node 'mm'" not in r.stderr,
            f"run -v: the Cos falls back, the MatMul does not: {r.stderr}")
    r = run(["bench", model, "--iterations", "3", "--threads", "1", "--profile", "--json", "--top", "10"] + ins)
    c.check(r.returncode == 0, f"bench rows.onnx: {r.stderr}")
    if r.returncode == 0:
        prof = json.loads(r.stdout)["profile"]
        nodes = {n["node"]: n for n in prof["top_nodes"]}
        mm = nodes.get("mm", {})
        c.check(mm.get("kernel") == "cpu.matmul.f32 (lazy)" and not mm.get("fallback") and mm.get("flops") == 2 * 6 * 6 * 5,
                f"bench --profile names the lazy MatMul kernel and its FLOPs: {mm}")
        c.check("cos" in [f["node"] for f in prof["fallback_nodes"]] and "mm" not in [f["node"] for f in prof["fallback_nodes"]],
                f"fallbacks: {prof['fallback_nodes']}")


def main():
    c = Checker("bench")
    tmp = tempfile.mkdtemp(prefix="onnxtool-bench-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # no temp folders left behind

    r = run(["bench", SMALL, "--iterations", "20", "--threads", "1", "--json"])
    c.check(r.returncode == 0, f"bench --json exits 0: {r.stderr}")
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    for key in ["schema_version", "model", "executor", "device", "cpu", "threads", "inputs", "load_ms", "prepare_ms",
                "iterations", "latency_ms", "throughput_per_s", "peak_rss_kib"]:
        c.check(key in doc, f"--json has {key}")
    if doc:
        c.check(doc["schema_version"] == 2 and doc["executor"] == "cpu" and doc["threads"] == 1, "schema 2, cpu, 1 thread")
        c.check(len(doc.get("rows", [])) == 1 and doc["rows"][0]["latency_ms"] == doc["latency_ms"],
                "one row, the same as the top-level fields")
        c.check(doc["iterations"] == 20, f"20 iterations, got {doc['iterations']}")
        lat = doc["latency_ms"]
        order = [lat[k] for k in ["min", "median", "p90", "p95", "p99", "p999", "max"]]
        c.check(all(a <= b for a, b in zip(order, order[1:])) and order[0] > 0, f"percentiles ordered: {order}")
        c.check(lat["min"] <= lat["mean"] <= lat["max"], "mean within min..max")
        c.check(doc["inputs"] == [{"name": "input", "dtype": "float32", "shape": [1, 1, 28, 28], "declared_shape": "[batch,1,28,28]"}],
                f"inputs: {doc['inputs']}")
        c.check(doc["cpu"]["isa"] in ("avx512", "avx2", "portable"), f"isa: {doc['cpu']}")
        c.check(doc["peak_rss_kib"] > 0 and doc["throughput_per_s"] > 0, "rss and throughput")

    # Peak RSS is the bench process's own: not the high-water mark of the process that started it
    # (getrusage's ru_maxrss survives fork + exec on Linux, so a 300 MiB parent made a 15 MiB run
    # report 300 MiB).
    def bench_rss():
        r = run(["bench", SMALL, "--iterations", "3", "--threads", "1", "--json"])
        return json.loads(r.stdout)["peak_rss_kib"] if r.returncode == 0 else -1
    alone = bench_rss()  # the build's own footprint (an ASan build's shadow memory included)
    ballast = b"\x01" * (300 << 20)  # touched: resident in this process
    rss = bench_rss()
    c.check(0 < alone and 0 < rss < alone + 100 * 1024,
            f"bench's peak RSS is its own (parent holds 300 MiB): {rss} KiB, {alone} KiB without the ballast")
    del ballast

    r = run(["bench", SMALL, "--iterations", "5", "--shape", "input=3,1,28,28", "--executor", "ref", "--json"])
    c.check(r.returncode == 0 and json.loads(r.stdout)["inputs"][0]["shape"] == [3, 1, 28, 28], f"--shape and ref: {r.stderr}")

    # several --shape of one input: a row each; an input named once keeps its dims in every row
    r = run(["bench", SMALL, "--iterations", "3", "--shape", "input=1,1,28,28", "--shape", "input=4,1,28,28",
             "--shape", "input=2,1,28,28", "--json"])
    rows = json.loads(r.stdout).get("rows", []) if r.returncode == 0 else []
    c.check([x["inputs"][0]["shape"][0] for x in rows] == [1, 4, 2] and all(x["iterations"] == 3 for x in rows),
            f"three shape rows: {r.stderr} {[x['inputs'] for x in rows]}")
    r = run(["bench", SMALL, "--iterations", "3", "--shape", "input=1,1,28,28", "--shape", "input=5,1,28,28"])
    c.check(r.returncode == 0 and "row 2 of 2" in r.stdout and "summary (median latency per shape row)" in r.stdout
            and "input[5,1,28,28]" in r.stdout, f"text rows and summary: {r.stdout} {r.stderr}")
    r = run(["bench", SMALL, "--iterations", "3", "--shape", "input=1,1,28,28", "--shape", "input=1,1,28"])
    c.check(r.returncode == 2 and "rank" in r.stderr and "latency" not in r.stdout,
            f"a bad row is refused before any timing: {r.returncode} {r.stderr}")

    r = run(["bench", SMALL, "--iterations", "5"])
    c.check(r.returncode == 0 and "latency ms:" in r.stdout and "median" in r.stdout and "throughput:" in r.stdout,
            f"text report: {r.stdout} {r.stderr}")

    # exit codes
    r = run(["bench", SMALL, "--device", "cuda", "--iterations", "3"])
    # a build without the CUDA toolkit, or a machine without a GPU: exit 3 saying which; with one: a run
    c.check((r.returncode == 3 and ("no CUDA executor" in r.stderr or "no usable CUDA GPU" in r.stderr or
                                     "could not be loaded" in r.stderr)) or
            (r.returncode == 0 and "gpu:" in r.stdout), f"--device cuda exits 3 or runs: {r.returncode} {r.stderr}")
    r = run(["bench", SMALL, "--executor", "nope"])
    c.check(r.returncode == 2, f"unknown executor exits 2: {r.returncode}")
    r = run(["bench", SMALL, "--iterations", "3", "--duration", "1"])
    c.check(r.returncode == 2 and "exclude each other" in r.stderr, f"--iterations with --duration exits 2: {r.stderr}")
    r = run(["bench", SMALL, "--shape", "input=1,2,3"])
    c.check(r.returncode == 2, f"wrong-rank --shape exits 2: {r.returncode}")
    r = run(["bench", os.path.join(tmp, "missing.onnx")])
    c.check(r.returncode == 2, f"missing model exits 2: {r.returncode}")

    # --profile: the fast kernels by name, Cos as the one fallback
    mlp = mlp_with_fallback(tmp)
    r = run(["bench", mlp, "--iterations", "10", "--threads", "1", "--profile", "--json", "--shape", "x=4,16",
             "--graph-opt", "0"])
    c.check(r.returncode == 0, f"--profile runs: {r.stderr}")
    if r.returncode == 0:
        prof = json.loads(r.stdout)["profile"]
        kernels = {n["node"]: n["kernel"] for n in prof["top_nodes"]}
        # MatMul + bias Add + Relu run as one fused GEMM step, named after the MatMul
        c.check(kernels.get("mm") == "cpu.matmul.f32+Add+Relu" and "add" not in kernels and "relu" not in kernels,
                f"fast kernels named: {kernels}")
        c.check([f["node"] for f in prof["fallback_nodes"]] == ["cos"], f"fallbacks: {prof['fallback_nodes']}")
        c.check(prof["node_count"] == 4 and abs(sum(o["share"] for o in prof["ops"]) - 1) < 1e-6, "shares sum to 1")
        mm = [o for o in prof["ops"] if o["op"] == "MatMul"][0]
        c.check(mm["flops"] == 2 * 4 * 16 * 8, f"MatMul FLOPs from shapes: {mm['flops']}")
    # At the default -O3 the plan's own copy of the model has the MatMul + Add as one Gemm (the
    # file is untouched); the executor then fuses the Relu into it.
    r = run(["bench", mlp, "--iterations", "5", "--threads", "1", "--profile", "--json", "--shape", "x=4,16"])
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    kernels = {n["node"]: (n["op"], n["kernel"]) for n in doc.get("profile", {}).get("top_nodes", [])}
    c.check(doc.get("graph_opt") == 3 and kernels.get("mm", ("", ""))[0] == "Gemm" and
            kernels["mm"][1].startswith("cpu.") and kernels["mm"][1].endswith("+Relu") and
            doc["profile"]["node_count"] == 3, f"-O3 plan: Gemm + Relu, Cos: {kernels} {r.stderr}")
    c.check(len(onnx.load(mlp).graph.node) == 4, "the model file keeps its 4 nodes")
    r = run(["bench", mlp, "--iterations", "3", "--profile", "--top", "2", "--graph-opt", "0"])
    c.check(r.returncode == 0 and "fallback nodes (reference kernels): 1 of 4" in r.stdout and "cos (Cos): ref." in r.stdout,
            f"text profile lists the fallback: {r.stdout}")

    # Symbolic dims are fixed to the inputs' dims before prepare: the plan is built in prepare
    # (logged once, before the report), the input line shows what was declared.
    x2 = np.random.default_rng(4).standard_normal((2, 16)).astype(np.float32)
    np.save(os.path.join(tmp, "x2.npy"), x2)
    r = run(["-vv", "bench", mlp, "--iterations", "3", "--threads", "1", "-i", "x=" + os.path.join(tmp, "x2.npy"), "--json"])
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check(doc.get("inputs") == [{"name": "x", "dtype": "float32", "shape": [2, 16], "declared_shape": "[n,16]"}],
            f"declared shape reported: {doc.get('inputs')} {r.stderr[-300:]}")
    c.check(r.stderr.count("cpu executor: prepared") == 1, f"one plan, built once: {r.stderr[-500:]}")
    r = run(["bench", mlp, "--iterations", "3", "--threads", "1", "-i", "x=" + os.path.join(tmp, "x2.npy")])
    c.check(r.returncode == 0 and "input:       x float32 [2,16] (declared [n,16])" in r.stdout, f"text input line: {r.stdout}")
    r = run(["bench", SMALL, "--iterations", "3", "--threads", "1", "--json", "--shape", "input=1,1,28,28"])
    c.check(r.returncode == 0 and "declared_shape" not in json.loads(r.stdout)["inputs"][0], "static inputs: no declared_shape")

    # run --executor cpu: ONNX Runtime's outputs; -v names the fallbacks
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    np.save(os.path.join(tmp, "x.npy"), x)
    want = ort.InferenceSession(mlp, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    out = os.path.join(tmp, "out")
    r = run(["-v", "run", mlp, "--executor", "cpu", "-i", os.path.join(tmp, "x.npy"), "-O", out])
    c.check(r.returncode == 0, f"run --executor cpu: {r.stderr}")
    if r.returncode == 0:
        got = np.load(os.path.join(out, "y.npy"))
        c.check(np.allclose(got, want, rtol=1e-4, atol=1e-5), "run --executor cpu matches onnxruntime")
        c.check("node 'cos' (Cos): fallback to the reference kernel" in r.stderr and "1 of 3 nodes ran on reference kernels" in r.stderr,  # the plan: Gemm, Relu, Cos
                f"run -v names the fallback: {r.stderr}")
    xs = np.random.default_rng(2).standard_normal((3, 1, 28, 28)).astype(np.float32)
    np.save(os.path.join(tmp, "input.npy"), xs)
    want = ort.InferenceSession(SMALL, providers=["CPUExecutionProvider"]).run(None, {"input": xs})[0]
    r = run(["run", SMALL, "--executor", "cpu", "-i", os.path.join(tmp, "input.npy"), "-O", out])
    c.check(r.returncode == 0 and np.allclose(np.load(os.path.join(out, "probs.npy")), want, rtol=1e-4, atol=1e-5),
            f"small_cnn on cpu matches onnxruntime: {r.stderr}")
    check_lazy(c, tmp)
    c.finish()


if __name__ == "__main__":
    main()
