"""The CLI in shell pipelines and CI steps: outputs that would land on one file are refused before
anything is written, writing over the input is safe, a closed stdout pipe is not an error, opsets
newer than the build exit 3, --shape means one thing in every subcommand, -q prints nothing on
success, text models are recognised by content, every error is one `onnxtool: error:` line,
numbers are validated, and the JSON documents share one convention."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import ONNXTOOL, SOURCE_DIR, Checker, run  # noqa: E402

SMALL = os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")
SUBCOMMANDS = ("inspect", "check", "convert", "optimize", "run")


def shell(cmd, **kw):
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, **kw)


def ort_outputs(path, feeds):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def small_feeds(batch=2):
    return {"input": np.random.default_rng(0).standard_normal((batch, 1, 28, 28)).astype(np.float32)}


def full_check(path):
    try:
        onnx.checker.check_model(path, full_check=True)
        return True, ""
    except Exception as e:  # noqa: BLE001
        return False, str(e)


def save(model, path):
    onnx.save(model, path)
    return path


def relu_model(opset=17, name="x", dims=("batch", 4)):
    x = helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))
    g = helper.make_graph([helper.make_node("Relu", [name], ["y"])], "g", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def big_model():
    """A model of about 4 MB so that writing it fills any pipe buffer."""
    w = numpy_helper.from_array(np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_colliding_outputs(c, tmp):
    # 1. the data file = the model file: refused, nothing written, an existing file untouched
    e6 = os.path.join(tmp, "e6.onnx")
    r = run(["convert", SMALL, "-o", e6, "--external-data", "e6.onnx"])
    c.check(r.returncode == 2 and not os.path.exists(e6), f"--external-data = -o: exit 2, no file: {r.returncode} {r.stderr!r}")
    c.check(r.stderr.startswith("onnxtool: error:") and "e6.onnx" in r.stderr, f"names the file: {r.stderr!r}")
    with open(e6, "wb") as f:
        f.write(b"keep me")
    r = run(["convert", SMALL, "-o", e6, "--external-data", "./e6.onnx"])
    c.check(r.returncode == 2 and open(e6, "rb").read() == b"keep me", "an existing file is left unchanged")
    c.check(not [n for n in os.listdir(tmp) if ".tmp." in n], "no temporary files left")

    # run -O with two outputs whose file names collide ("a/b" and "a_b" both become a_b.npy)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("a/b", "a_b")]
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a/b"]), helper.make_node("Neg", ["x"], ["a_b"])], "g", [x], outs)
    m = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), os.path.join(tmp, "two.onnx"))
    outdir = os.path.join(tmp, "two_out")
    r = run(["run", m, "--random", "-O", outdir])
    c.check(r.returncode == 2 and not os.path.exists(outdir), f"run -O colliding output files: exit 2, nothing written: {r.stderr!r}")

    # writing over the input: inline, then with external data (the input's data file is mapped)
    feeds = small_feeds()
    want = ort_outputs(SMALL, feeds)
    for ext in (False, True):
        m = os.path.join(tmp, f"over{int(ext)}.onnx")
        args = ["convert", SMALL, "-o", m] + (["--external-data", "--size-threshold", "256"] if ext else [])
        c.check(run(args).returncode == 0, "convert for the overwrite test")
        r = run(["optimize", m, "-o", m, "--fuse"])
        ok, why = full_check(m)
        c.check(r.returncode == 0 and ok, f"optimize m -o m (external={ext}): exit 0 and a valid model: {r.stderr!r} {why}")
        if ok:
            got = ort_outputs(m, feeds)
            c.check(all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(got, want)),
                    f"optimize m -o m (external={ext}): the input's outputs")
        if ext:
            c.check(os.path.exists(m + ".data"), "the external data stays beside the model")


def test_closed_pipe(c, tmp):
    big = save(big_model(), os.path.join(tmp, "big.onnx"))
    for cmd in (f"'{ONNXTOOL}' convert '{big}' --to text -o - | head -1",
                f"'{ONNXTOOL}' convert '{big}' -o - | head -c 10",
                f"'{ONNXTOOL}' optimize '{big}' -O0 -o - | head -c 10"):
        r = shell(cmd)
        c.check(r.returncode == 0 and r.stderr == b"", f"{cmd}: exit 0 under pipefail, quiet: {r.returncode} {r.stderr[:200]!r}")


def test_newer_opset(c, tmp):
    m = save(relu_model(opset=99), os.path.join(tmp, "op99.onnx"))
    for args in (["run", m, "--random"], ["optimize", m, "-o", os.path.join(tmp, "op99.out.onnx")]):
        r = run(args)
        c.check(r.returncode == 3 and "99" in r.stderr and "ai.onnx" in r.stderr and r.stderr.count("\n") == 1,
                f"{args[0]} on opset 99: exit 3 naming domain and version: {r.returncode} {r.stderr!r}")
    c.check(not os.path.exists(os.path.join(tmp, "op99.out.onnx")), "optimize wrote nothing for opset 99")
    r = run(["run", m, "--random", "--allow-newer-opset"])
    c.check(r.returncode == 0 and "warning" in r.stderr and "99" in r.stderr,
            f"--allow-newer-opset runs with a warning: {r.returncode} {r.stderr!r}")


def shape_cmd(sub, model, tmp, spec):
    out = os.path.join(tmp, f"shape_{sub}.onnx")
    base = {"inspect": ["inspect", model], "check": ["check", model],
            "convert": ["convert", model, "-o", out, "--infer-shapes"], "optimize": ["optimize", model, "-o", out],
            "run": ["run", model, "--random"]}[sub]
    extra = []
    for s in spec if isinstance(spec, list) else [spec]:
        extra += ["--shape", s]
    return base + extra, out


def test_shape(c, tmp):
    bad = {"not an integer": "input=1.5,1,28,28", "a space": "input=a b,1,28,28", "wrong rank": "input=N,1,28",
           "no such input": "nope=1,1,28,28", "empty dim": "input=1,,28,28", "no =": "input",
           "repeated": ["input=1,1,28,28", "input=2,1,28,28"]}
    for sub in SUBCOMMANDS:
        for what, spec in bad.items():
            args, out = shape_cmd(sub, SMALL, tmp, spec)
            if os.path.exists(out):
                os.remove(out)
            r = run(args)
            c.check(r.returncode == 2 and r.stderr.startswith("onnxtool: error: --shape") and not os.path.exists(out),
                    f"{sub} --shape {what}: exit 2, one error, no output: {r.returncode} {r.stderr!r}")
        args, out = shape_cmd(sub, SMALL, tmp, "input=3x1x28x28")
        r = run(args)
        c.check(r.returncode == 0, f"{sub} --shape input=3x1x28x28: exit 0: {r.stderr!r}")
    # renaming a symbolic dim renames it everywhere: outputs read [N, 10]
    r = run(["inspect", SMALL, "--json", "--shape", "input=N,1,28,28"])
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check([o["shape"] for o in doc.get("outputs", [])] == [["N", 10]], f"inspect --shape renames the output's dim: {doc.get('outputs')}")
    for sub in ("convert", "optimize"):
        args, out = shape_cmd(sub, SMALL, tmp, "input=N,1,28,28")
        r = run(args)
        if c.check(r.returncode == 0, f"{sub} --shape rename: {r.stderr!r}"):
            m = onnx.load(out)
            dims = [d.dim_param or d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
            c.check(dims == ["N", 10], f"{sub} --shape input=N,...: the output declares [N, 10], got {dims}")
            c.check(full_check(out)[0], f"{sub} --shape: the output passes onnx.checker")
    # a symbol shared by two inputs: fixing it through one fixes the other
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    g = helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"])], "g", [x, z], [y])
    two = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), os.path.join(tmp, "shared.onnx"))
    r = run(["run", two, "--random", "--shape", "x=3,4", "--json"])
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check([o["shape"] for o in doc.get("outputs", [])] == [[3, 4]], f"run --shape x=3,4 sizes z too: {r.stderr!r} {doc.get('outputs')}")
    r = run(["inspect", two, "--shape", "x=N,4", "--shape", "z=M,4"])
    c.check(r.returncode == 2 and "batch" in r.stderr, f"one symbol renamed two ways: exit 2 naming it: {r.stderr!r}")


def test_random_strings(c, tmp):
    x = helper.make_tensor_value_info("s", TensorProto.STRING, [2])
    y = helper.make_tensor_value_info("t", TensorProto.STRING, [2])
    g = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "g", [x], [y])
    m = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), os.path.join(tmp, "str.onnx"))
    r = run(["run", m, "--random"])
    c.check(r.returncode == 2 and "random strings" in r.stderr and "-i" in r.stderr and "too large" not in r.stderr,
            f"run --random on a string input says to give it with -i: {r.stderr!r}")


def test_quiet_and_verify_line(c, tmp):
    out = os.path.join(tmp, "q.onnx")
    txt = os.path.join(tmp, "q.onnxtxt")
    for args in (["inspect", SMALL], ["check", SMALL], ["convert", SMALL, "-o", out], ["optimize", SMALL, "-o", out, "--stats"],
                 ["optimize", SMALL, "-o", out, "--verify"], ["convert", SMALL, "-o", txt], ["run", SMALL, "--random"]):
        r = run(["-q"] + args)
        c.check(r.returncode == 0 and r.stderr == "", f"-q {' '.join(args[:1])}: nothing on stderr: {r.stderr[:300]!r}")
    r = run(["optimize", SMALL, "-o", out, "--verify"])
    c.check(r.returncode == 0 and "verify: outputs equal on 2 input sets" in r.stderr,
            f"a passing --verify says so: {r.stderr!r}")


def test_text_by_content(c, tmp):
    txt = os.path.join(tmp, "m.onnxtxt")
    c.check(run(["convert", SMALL, "-o", txt]).returncode == 0, "convert to text")
    plain = os.path.join(tmp, "m.txt")
    with open(txt) as f, open(plain, "w") as g:
        g.write(f.read())
    r = run(["run", plain, "--random", "--json"])
    c.check(r.returncode == 0, f"run m.txt (text syntax, other extension): {r.stderr!r}")
    with open(txt, "rb") as f:
        r = subprocess.run([ONNXTOOL, "run", "-", "--random"], stdin=f, capture_output=True)
    c.check(r.returncode == 0, f"cat m.onnxtxt | run -: {r.stderr!r}")


def test_errors_one_line(c, tmp):
    empty = os.path.join(tmp, "empty.onnx")
    open(empty, "w").close()
    cases = [(["run", SMALL, "--random", "-O", empty], "empty.onnx"),
             (["run", SMALL, "--random", "-O", os.path.join(empty, "sub")], "empty.onnx"),
             (["bogus"], "bogus"), (["inspect", "--nope", SMALL], "--nope"), (["run"], "MODEL"),
             (["optimize", SMALL, "-o", os.path.join(tmp, "no", "such", "dir", "o.onnx")], "o.onnx")]
    for args, named in cases:
        r = run(args)
        lines = r.stderr.splitlines()
        c.check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("onnxtool: error: ") and named in lines[0]
                and "filesystem error" not in r.stderr,
                f"{args}: one 'onnxtool: error:' line naming {named}: {r.returncode} {r.stderr!r}")


def test_numbers(c, tmp):
    out = os.path.join(tmp, "n.onnx")
    for args in (["convert", SMALL, "-o", out, "--external-data", "--size-threshold", "-1"],
                 ["optimize", SMALL, "-o", out, "--max-iterations", "0"],
                 ["optimize", SMALL, "-o", out, "--max-iterations", "-1"],
                 ["optimize", SMALL, "-o", out, "--verify", "--rtol", "-1"],
                 ["optimize", SMALL, "-o", out, "--verify", "--atol", "-1"],
                 ["optimize", SMALL, "-o", out, "--verify", "--seed", "-1"],
                 ["optimize", SMALL, "-o", out, "--bisect", "-2"],
                 ["optimize", SMALL, "-o", out, "--passes", "eliminate-dead", "-O3"],
                 ["run", SMALL, "--random", "--seed", "-1"], ["run", SMALL, "--random", "--rtol", "-1"],
                 ["run", SMALL, "--random", "--executor", "bogus"]):
        if os.path.exists(out):
            os.remove(out)
        r = run(args)
        c.check(r.returncode == 2 and r.stderr.startswith("onnxtool: error:") and not os.path.exists(out),
                f"{args[0]} {' '.join(args[3:])}: exit 2: {r.returncode} {r.stderr!r}")
    r = run(["optimize", SMALL, "-o", out, "--bisect", "0"])
    c.check(r.returncode == 0 and "pass )" not in r.stderr and "before the first rewrite" in r.stderr,
            f"--bisect 0 says it stopped before the first rewrite: {r.stderr!r}")


def test_json(c, tmp):
    out = os.path.join(tmp, "j.onnx")
    docs = {}
    for sub, args in (("inspect", ["inspect", SMALL, "--json"]), ("check", ["check", SMALL, "--json"]),
                      ("run", ["run", SMALL, "--random", "--json"]), ("optimize", ["optimize", SMALL, "-o", out, "--json"])):
        r = run(args)
        try:
            docs[sub] = json.loads(r.stdout)
        except ValueError:
            docs[sub] = {}
        c.check(docs[sub].get("model") == SMALL, f"{sub} --json names the model under 'model': {list(docs[sub])[:4]}")
    first = docs["run"].get("outputs", [{}])[0].get("first", [])
    c.check(bool(first) and all(isinstance(v, float) for v in first), f"run --json 'first' holds numbers: {first}")
    r = subprocess.run([ONNXTOOL, "optimize", SMALL, "-o", "-", "--json"], capture_output=True)
    try:
        doc = json.loads(r.stderr)
    except ValueError:
        doc = {}
    c.check(doc.get("after", {}).get("file_size") == len(r.stdout) > 0,
            f"optimize -o - --json: JSON on stderr, the output's size: {doc.get('after', {}).get('file_size')} vs {len(r.stdout)}")
    r = run(["optimize", "--help"])
    c.check("stderr when -o -" in r.stdout.replace("\n", " ").replace("  ", " ") or "to stderr when -o -" in r.stdout,
            "optimize --help says where the JSON goes with -o -")


def test_missing_external_data(c, tmp):
    m = os.path.join(tmp, "ext.onnx")
    c.check(run(["convert", SMALL, "-o", m, "--external-data", "--size-threshold", "16"]).returncode == 0, "convert")
    os.remove(m + ".data")
    r = run(["check", m])
    lines = [ln for ln in r.stdout.splitlines() if "not found" in ln]
    n = len([t for t in onnx.load(m, load_external_data=False).graph.initializer if t.data_location == TensorProto.EXTERNAL])
    c.check(r.returncode == 1 and len(lines) == 1 and f"{n} tensors" in lines[0] and "ext.onnx.data" in lines[0],
            f"check: one line per missing data file with the count ({n}): {r.stdout!r}")


def test_docs(c, tmp):
    r = run(["--help"])
    c.check("convert" in r.stdout.splitlines()[0], f"the --help tagline names convert: {r.stdout.splitlines()[:1]}")
    # an op without inference whose outputs are all declared: first give-up is 'none' iff all known
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    g = helper.make_graph([helper.make_node("FusedGemm", ["x", "w"], ["y"], domain="com.microsoft")], "g", [x], [y], [w])
    m = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                               ir_version=8), os.path.join(tmp, "contrib.onnx"))
    r = run(["inspect", m, "--shapes"])
    known = [ln for ln in r.stdout.splitlines() if ln.startswith("shape inference:")]
    give = [ln for ln in r.stdout.splitlines() if ln.startswith("first give-up:")]
    all_known = bool(known) and (lambda p: p[2] == p[4])(known[0].split())
    c.check(bool(give) and ((give[0] == "first give-up: none") == all_known),
            f"first give-up is none exactly when every value is known: {known} {give}")


def test_invalid_input_not_rewritten(c, tmp):
    """optimize, convert --opset and quantize check the model they would write: made from an
    invalid input and invalid itself, it is refused (exit 2, the input's first error, no output
    file): every model onnxtool writes must pass onnx.checker. An invalid input whose result is
    valid is fine (convert --opset 21 of a deprecated GroupNormalization-18, a golden test)."""
    bad = os.path.join(tmp, "bad.onnxtxt")
    with open(bad, "w") as f:
        f.write('<ir_version: 8, opset_import: ["" : 17]>\ng (float[2] x) => (float[2] y)\n{\n  y = Add (x, nowhere)\n}\n')
    r = run(["check", bad])
    c.check(r.returncode == 1 and "input 'nowhere' is not defined" in r.stdout + r.stderr, f"check finds it: {r.stdout}")
    for cmd in (["optimize"], ["convert", "--opset", "18"], ["quantize", "--int8", "--dynamic"]):
        out = os.path.join(tmp, f"{cmd[0]}.onnx")
        r = run([cmd[0], bad, "-o", out] + cmd[1:])
        c.check(r.returncode == 2 and "input 'nowhere' is not defined" in r.stderr and
                f"the model {cmd[0]} made from it is invalid too" in r.stderr and r.stderr.count("\n") == 1,
                f"{cmd[0]} refuses an invalid model: {r.returncode} {r.stderr}")
        c.check(not os.path.exists(out), f"{cmd[0]} wrote nothing")
    # Warnings are no reason to refuse: a declared output shape that inference contradicts.
    warn = os.path.join(tmp, "warn.onnxtxt")
    with open(warn, "w") as f:
        f.write('<ir_version: 8, opset_import: ["" : 17]>\ng (float[2, 3] x) => (float[5] y)\n{\n  y = Relu (x)\n}\n')
    out = os.path.join(tmp, "warn_opt.onnx")
    r = run(["optimize", warn, "-o", out])
    c.check(r.returncode == 0 and os.path.exists(out), f"a model with warnings optimizes: {r.stderr}")
    if os.path.exists(out):
        onnx.checker.check_model(out, full_check=True)


def test_help_lists_flags_everywhere(c, tmp):
    for sub in SUBCOMMANDS:
        r = run([sub, "--help"])
        page = open(os.path.join(SOURCE_DIR, "man", f"onnxtool-{sub}.1")).read().replace("\\-", "-")
        readme = open(os.path.join(SOURCE_DIR, "README.md")).read()
        flags = ["--shape"] + (["--allow-newer-opset"] if sub in ("run", "optimize") else []) + \
                (["--keep-failed"] if sub == "optimize" else [])
        for f in flags:
            c.check(f in r.stdout and f in page and f in readme, f"{sub}: {f} in --help, the man page and the README")


def main():
    c = Checker("test_cli_safety")
    with tempfile.TemporaryDirectory() as tmp:
        for t in (test_colliding_outputs, test_closed_pipe, test_newer_opset, test_shape, test_random_strings,
                  test_quiet_and_verify_line, test_text_by_content, test_errors_one_line, test_numbers, test_json,
                  test_missing_external_data, test_docs, test_invalid_input_not_rewritten, test_help_lists_flags_everywhere):
            sub = os.path.join(tmp, t.__name__)
            os.makedirs(sub)
            t(c, sub)
    c.finish()


if __name__ == "__main__":
    main()
