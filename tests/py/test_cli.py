"""The CLI as users and scripts see it: help and version, exit codes, one-line errors, inspect
--json against the onnx package as oracle, convert with external data, stdin/stdout, refusal to
write binary to a terminal, atomic outputs."""
import atexit
import json
import os
import re
import pty
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import BUILD_DIR, ONNXTOOL, SOURCE_DIR, Checker, backend_data_models, node_test_models, run  # noqa: E402

SMALL = os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")


def np_name(elem_type):
    special = {TensorProto.BFLOAT16: "bfloat16", TensorProto.FLOAT8E4M3FN: "float8e4m3fn",
               TensorProto.FLOAT8E4M3FNUZ: "float8e4m3fnuz", TensorProto.FLOAT8E5M2: "float8e5m2",
               TensorProto.FLOAT8E5M2FNUZ: "float8e5m2fnuz", TensorProto.UINT4: "uint4", TensorProto.INT4: "int4",
               TensorProto.FLOAT4E2M1: "float4e2m1", TensorProto.FLOAT8E8M0: "float8e8m0",
               TensorProto.UINT2: "uint2", TensorProto.INT2: "int2", TensorProto.FLOAT6E2M3: "float6e2m3",
               TensorProto.FLOAT6E3M2: "float6e3m2", TensorProto.STRING: "string", TensorProto.BOOL: "bool"}
    if elem_type in special:
        return special[elem_type]
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name


def expected_io(vi):
    t = vi.type
    if t.HasField("tensor_type"):
        dtype = np_name(t.tensor_type.elem_type)
        if not t.tensor_type.HasField("shape"):
            return {"name": vi.name, "dtype": dtype, "shape": None}
        dims = []
        for d in t.tensor_type.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None))
        return {"name": vi.name, "dtype": dtype, "shape": dims}
    return None  # non-tensor types: only the name is compared


def expected_inspect(m):
    g = m.graph
    hist = {}
    for n in g.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        hist[key] = hist.get(key, 0) + 1
    count = 0
    nbytes = 0
    for t in g.initializer:
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        count += n
        if t.data_type == TensorProto.STRING:
            nbytes += sum(len(s) for s in t.string_data)
        else:
            bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4, TensorProto.INT2: 2,
                    TensorProto.UINT2: 2, TensorProto.FLOAT6E2M3: 6, TensorProto.FLOAT6E3M2: 6}.get(t.data_type)
            if bits is None:
                bits = 8 * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
            nbytes += (n * bits + 7) // 8
    for s in g.sparse_initializer:
        count += int(np.prod(s.values.dims)) if len(s.values.dims) else 1
    return {
        "ir_version": m.ir_version,
        "opset_imports": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
        "producer": {"name": m.producer_name, "version": m.producer_version},
        "node_count": len(g.node),
        "op_histogram": hist,
        "initializer_count": len(g.initializer) + len(g.sparse_initializer),
        "parameter_count": count,
        "parameter_bytes": nbytes if not g.sparse_initializer else None,
    }


def check_inspect_json(c, path):
    r = run(["inspect", "--json", path])
    if not c.check(r.returncode == 0, f"inspect {path}: exit {r.returncode}: {r.stderr.strip()}"):
        return
    got = json.loads(r.stdout)
    m = onnx.load(path, load_external_data=False)
    exp = expected_inspect(m)
    c.check(got["schema_version"] == 1, "schema_version")
    for k, v in exp.items():
        if v is None:
            continue
        c.check(got[k] == v, f"inspect {path}: {k} = {got[k]!r}, onnx says {v!r}")
    for key, vis in (("inputs", m.graph.input), ("outputs", m.graph.output)):
        c.check(len(got[key]) == len(vis), f"inspect {path}: {key} count")
        for g_io, vi in zip(got[key], vis):
            e = expected_io(vi)
            if e is None:
                c.check(g_io["name"] == vi.name, f"inspect {path}: {key} name")
            else:
                c.check(g_io == e, f"inspect {path}: {key} {g_io} vs {e}")


def test_help_and_usage(c):
    r = run(["--version"])
    c.check(r.returncode == 0 and r.stdout.startswith("onnxtool "), f"--version: {r.stdout!r}")
    r = run(["--help"])
    c.check(r.returncode == 0 and all(s in r.stdout for s in ("inspect", "check", "convert", "run", "--quiet", "--verbose")),
            "--help lists subcommands and global flags")
    for sub, flags in (("inspect", ["--json", "--nodes", "--initializers"]),
                       ("check", ["--json"]),
                       ("convert", ["--output", "--external-data", "--size-threshold", "--inline"]),
                       ("run", ["--input", "--inputs-dir", "--random", "--seed", "--shape", "--output-dir", "--output-format",
                                "--compare", "--rtol", "--atol", "--executor", "--json"])):
        r = run([sub, "--help"])
        c.check(r.returncode == 0 and all(f in r.stdout for f in flags), f"{sub} --help lists {flags}")
        page = os.path.join(SOURCE_DIR, "man", f"onnxtool-{sub}.1")
        text = open(page).read().replace("\\-", "-") if os.path.exists(page) else ""
        c.check(all(f in text for f in flags), f"man page of {sub} documents {flags}")
        readme = open(os.path.join(SOURCE_DIR, "README.md")).read()
        c.check(all(f in readme for f in flags), f"README documents {sub} {flags}")
    # every long flag of every subcommand's --help is in its man page and in the README
    readme = open(os.path.join(SOURCE_DIR, "README.md")).read()
    for sub in ("inspect", "check", "optimize", "quantize", "convert", "run", "bench"):
        r = run([sub, "--help"])
        flags = sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", r.stdout)) - {"--help"})
        c.check(r.returncode == 0 and len(flags) >= 3, f"{sub} --help lists its flags: {flags}")
        page = os.path.join(SOURCE_DIR, "man", f"onnxtool-{sub}.1")
        text = open(page).read().replace("\\-", "-") if os.path.exists(page) else ""
        c.check(not [f for f in flags if f not in text], f"man page of {sub} lacks {[f for f in flags if f not in text]}")
        c.check(not [f for f in flags if f not in readme], f"README lacks {sub} {[f for f in flags if f not in readme]}")
    c.check(run([]).returncode == 2, "no subcommand: exit 2")
    c.check(run(["frobnicate"]).returncode == 2, "unknown subcommand: exit 2")
    c.check(run(["inspect", "--bogus", SMALL]).returncode == 2, "unknown flag: exit 2")
    r = run(["inspect", "/nonexistent/model.onnx"])
    c.check(r.returncode == 2 and "/nonexistent/model.onnx" in r.stderr and r.stderr.count("\n") == 1,
            f"missing file: exit 2, one line naming it: {r.stderr!r}")
    with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
        f.write(b"\x0a\xff\xff\xff\xff\x0f garbage")
        f.flush()
        r = run(["inspect", f.name])
        c.check(r.returncode == 2 and f.name in r.stderr and "Traceback" not in r.stderr,
                f"corrupt file: exit 2 naming it: {r.stderr!r}")


def test_inspect(c):
    models = node_test_models() + backend_data_models() + [SMALL]
    if os.path.basename(os.path.normpath(BUILD_DIR)).endswith("asan"):
        # The sanitizer pass exercises memory safety, not field values: one process per model
        # under ASan costs minutes, so it inspects every tenth model (the release pass does all).
        models = models[::10] + [SMALL]
    for p in models:
        check_inspect_json(c, p)
    r = run(["inspect", "--json", "--nodes", "--initializers", SMALL])
    j = json.loads(r.stdout)
    m = onnx.load(SMALL)
    c.check([n["name"] for n in j["nodes"]] == [n.name for n in m.graph.node], "--nodes names")
    c.check(j["nodes"][0] == {"name": "conv1", "op_type": "Conv", "domain": "", "inputs": ["input", "conv1.weight", "conv1.bias"],
                              "outputs": ["c1"]}, f"--nodes entry {j['nodes'][0]}")
    c.check(j["initializers"][0] == {"name": "conv1.weight", "dtype": "float32", "shape": [8, 1, 3, 3]}, "--initializers entry")
    r = run(["inspect", SMALL])
    c.check(r.returncode == 0 and "Conv" in r.stdout and "batch" in r.stdout and "9.1K parameters" in r.stdout,
            "human summary")
    with open(SMALL, "rb") as f:
        r = subprocess.run([ONNXTOOL, "inspect", "--json", "-"], stdin=f, capture_output=True, text=True)
    c.check(r.returncode == 0 and json.loads(r.stdout)["node_count"] == 10, "inspect from stdin")
    # closed pipe: not an error, no crash
    p = subprocess.Popen(f"'{ONNXTOOL}' inspect --nodes '{SMALL}' | head -1", shell=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()
    c.check(p.returncode == 0 and b"rror" not in err, f"closed pipe: {err!r}")
    print(f"inspect --json matched onnx on {len(models)} models")


def test_convert(c, tmp):
    rng = np.random.RandomState(1)
    inits = [numpy_helper.from_array(rng.rand(64, 64).astype(np.float32), "big"),
             numpy_helper.from_array(np.arange(64, dtype=np.float32), "small")]
    g = helper.make_graph([helper.make_node("MatMul", ["x", "big"], ["y"]), helper.make_node("Add", ["y", "small"], ["z"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 64])], inits)
    src = os.path.join(tmp, "src.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    os.makedirs(os.path.join(tmp, "out"))
    ext = os.path.join(tmp, "out", "ext.onnx")
    r = run(["convert", src, "-o", ext, "--external-data", "weights.bin"])
    c.check(r.returncode == 0, f"convert --external-data: {r.stderr}")
    meta = onnx.load(ext, load_external_data=False)
    c.check(meta.graph.initializer[0].data_location == TensorProto.EXTERNAL, "big tensor moved out")
    c.check(meta.graph.initializer[1].data_location != TensorProto.EXTERNAL, "small tensor stays inline")
    c.check(os.path.exists(os.path.join(tmp, "out", "weights.bin")), "external file written")
    full = onnx.load(ext)
    c.check(np.array_equal(numpy_helper.to_array(full.graph.initializer[0]), numpy_helper.to_array(inits[0])),
            "external bytes equal")
    onnx.checker.check_model(ext, full_check=True)
    back = os.path.join(tmp, "back.onnx")
    r = run(["convert", ext, "-o", back, "--inline"])
    c.check(r.returncode == 0, f"convert --inline: {r.stderr}")
    c.check(onnx.load(back) == onnx.load(src), "external -> inline gives the original model")
    r = run(["convert", src, "-o", os.path.join(tmp, "t.onnx"), "--external-data", "--size-threshold", "0"])
    c.check(r.returncode == 0 and os.path.exists(os.path.join(tmp, "t.onnx.data")), "default external name OUT.data")
    t = onnx.load(os.path.join(tmp, "t.onnx"), load_external_data=False)
    c.check(all(i.data_location == TensorProto.EXTERNAL for i in t.graph.initializer), "--size-threshold 0 moves all")
    # stdout: a pipe is fine, a terminal is refused
    r = subprocess.run([ONNXTOOL, "convert", src, "-o", "-"], capture_output=True)
    c.check(r.returncode == 0 and onnx.load_from_string(r.stdout) == onnx.load(src), "convert to stdout")
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(ONNXTOOL, [ONNXTOOL, "convert", src, "-o", "-"])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    c.check(os.WEXITSTATUS(status) == 2 and b"terminal" in out, f"refuses to write to a terminal: {out!r}")
    # failures leave nothing behind
    bad = os.path.join(tmp, "nodir", "x.onnx")
    r = run(["convert", src, "-o", bad])
    c.check(r.returncode == 2 and not os.path.exists(bad), "unwritable output: exit 2, no file")
    r = run(["convert", src, "-o", os.path.join(tmp, "e.onnx"), "--external-data", "../escape.bin"])
    c.check(r.returncode == 2 and not os.path.exists(os.path.join(tmp, "e.onnx")), "external path escaping: exit 2")
    c.check(not [f for f in os.listdir(tmp) if ".tmp." in f], "no temporary files left")
    r = run(["convert", src, "-o", os.path.join(tmp, "x.onnx"), "--inline", "--external-data"])
    c.check(r.returncode == 2, "--inline with --external-data is a usage error")
    # --shape takes the same forms as inspect's (1x1x28x28, n,1,28,28) and repeats
    cnn = os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")
    for spec, want in [("input=3x1x28x28", [3, 1, 28, 28]), ("input=n,1,28,28", ["n", 1, 28, 28])]:
        out = os.path.join(tmp, "shaped.onnx")
        r = run(["convert", cnn, "-o", out, "--infer-shapes", "--shape", spec])
        m = onnx.load(out) if r.returncode == 0 else None
        dims = [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] if m else None
        c.check(dims == want, f"convert --shape {spec}: input dims {dims}, want {want}: {r.stderr}")
        vi = {v.name: v for v in m.graph.value_info} if m else {}
        c.check(m is not None and not r.stderr.strip(), f"convert --shape {spec}: warnings {r.stderr!r}")
        c.check(len(vi) > 0, f"convert --shape {spec}: no value_info written")


def main():
    c = Checker("cli")
    tmp = tempfile.mkdtemp(prefix="onnxtool-cli-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # no temp folders left behind
    try:
        test_help_and_usage(c)
        test_inspect(c)
        test_convert(c, tmp)
    finally:
        shutil.rmtree(tmp)
    c.finish()


if __name__ == "__main__":
    main()
