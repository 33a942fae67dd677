"""`onnxtool optimize` end to end: pipelines and presets on the CLI, outputs that pass onnx.checker
(full check) and give onnxruntime's outputs of the input model, symbolic dims kept, --verify,
--json, --bisect, --disable, --shape, and bad input (exit 2, one line, no output file)."""
import atexit
import shutil
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from onnxtool_test import BUILD_DIR, SOURCE_DIR, Checker, node_test_models, run  # noqa: E402

c = Checker("optimize")
tmp = tempfile.mkdtemp(prefix="onnxtool-optimize-")
atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # no temp folders left behind


def ort_outputs(path, feeds):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def random_feeds(model, dims):
    rng = np.random.default_rng(0)
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 2) for d in t.shape.dim]
        if t.elem_type == onnx.TensorProto.INT64:
            feeds[i.name] = rng.integers(0, 10, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.random(shape).astype(np.float32)
    return feeds


def input_dims(model):
    return [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input]


def check_optimized(src, args, dims, label):
    out = os.path.join(tmp, label + ".onnx")
    r = run(["optimize", src, "-o", out, "--json"] + args)
    if not c.check(r.returncode == 0, f"{label}: optimize {' '.join(args)} exit {r.returncode}: {r.stderr.strip()}"):
        return None
    doc = json.loads(r.stdout)
    m_in, m_out = onnx.load(src), onnx.load(out)
    try:
        onnx.checker.check_model(m_out, full_check=True)
        c.check(True, "")
    except Exception as e:  # noqa: BLE001
        c.check(False, f"{label}: onnx.checker rejects the output: {str(e).splitlines()[0]}")
    if m_in.ir_version >= 4:
        c.check(input_dims(m_in) == input_dims(m_out), f"{label}: input dims changed {input_dims(m_in)} -> {input_dims(m_out)}")
    c.check([o.name for o in m_in.graph.output] == [o.name for o in m_out.graph.output], f"{label}: output names changed")
    feeds = random_feeds(m_in, dims)
    want, got = ort_outputs(src, feeds), ort_outputs(out, feeds)
    for w, g in zip(want, got):
        c.check(np.allclose(g, w, rtol=1e-4, atol=1e-5), f"{label}: onnxruntime outputs differ, max {np.max(np.abs(g - w))}")
    c.check(doc["after"]["nodes"] == len(m_out.graph.node) + sum(0 for _ in []), f"{label}: JSON node count")
    return doc


# --- pipelines on the command line
r = run(["optimize", "--list-passes"])
c.check(r.returncode == 0 and "fold-constants" in r.stdout and "eliminate-dead" in r.stdout, "--list-passes")
defs = open(os.path.join(SOURCE_DIR, "passes", "passes.def")).read()
for line in r.stdout.splitlines():
    c.check(f'ONNXTOOL_PASS("{line.split()[0]}"' in defs, f"--list-passes shows {line.split()[0]} which passes.def lacks")
for level in ["-O0", "-O1", "-O2", "-O3"]:
    p = run(["optimize", "--print-pipeline", level]).stdout.strip()
    again = run(["optimize", "--print-pipeline", "--passes", p]).stdout.strip() if p else ""
    c.check(p == again, f"{level}: printed pipeline does not round trip: {p!r} vs {again!r}")
fused = run(["optimize", "--print-pipeline", "-O2", "--fuse"]).stdout.strip()
c.check(fused == run(["optimize", "--print-pipeline", "-O3"]).stdout.strip(), "-O2 --fuse is -O3")

cnn = os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx")
for bad, what in [(["--passes", "fold-constant"], "unknown pass 'fold-constant'"),
                  (["--passes", "fold-constants{nope=1}"], "has no option 'nope'"),
                  (["--disable", "nope"], "--disable nope"),
                  (["-O7"], "-O")]:
    out = os.path.join(tmp, "bad.onnx")
    r = run(["optimize", cnn, "-o", out] + bad)
    c.check(r.returncode == 2, f"{bad}: exit {r.returncode}, want 2")
    c.check(what in r.stderr and len(r.stderr.strip().splitlines()) <= 2, f"{bad}: message {r.stderr!r}")
    c.check(not os.path.exists(out), f"{bad}: an output file was written")
trunc = os.path.join(tmp, "trunc.onnx")
open(trunc, "wb").write(open(cnn, "rb").read()[:1000])
r = run(["optimize", trunc, "-o", os.path.join(tmp, "t.onnx")])
c.check(r.returncode == 2 and "trunc.onnx" in r.stderr and not os.path.exists(os.path.join(tmp, "t.onnx")),
        f"truncated model: exit {r.returncode}: {r.stderr!r}")

# --- real models: the bundled CNN and a small BERT-like encoder with the exported op patterns
import make_bert_like  # noqa: E402

bert = os.path.join(tmp, "bert_tiny.onnx")
onnx.save(make_bert_like.build(2, hidden=64, ffn=128, vocab=100, heads=4), bert)
for src, dims, label in [(cnn, {"batch": 2}, "cnn"), (bert, {"batch": 2, "seq": 5}, "bert")]:
    for args in (["-O1"], ["-O2"], ["-O3", "--verify"], ["--fuse", "--verify-each"]):
        doc = check_optimized(src, args, dims, f"{label}{''.join(args)}")
        if doc and args[0] == "-O3":
            c.check(doc["verify"]["ok"], f"{label}: --verify not ok")
            c.check(doc["after"]["nodes"] < doc["before"]["nodes"], f"{label}: -O3 removed nothing")
            c.check(doc["pipeline"] == run(["optimize", "--print-pipeline", "-O3"]).stdout.strip(), f"{label}: JSON pipeline")

# --bisect: exactly N rewrites, and the last one named
r = run(["optimize", bert, "-o", os.path.join(tmp, "b.onnx"), "--bisect", "3", "--json"])
doc = json.loads(r.stdout) if r.returncode == 0 else {}
c.check(doc.get("rewrites") == 3 and doc.get("bisect", {}).get("last_rewrite"), f"--bisect 3: {r.stdout[-300:]} {r.stderr}")
c.check("--bisect 3: stopped after 3 rewrites" in r.stderr, f"--bisect message: {r.stderr!r}")
# --disable is repeatable and removes the pass from the run
r = run(["optimize", bert, "-o", os.path.join(tmp, "d.onnx"), "--json", "--disable", "fold-constants", "--disable", "eliminate-dead"])
names = [p["name"] for p in json.loads(r.stdout)["passes"]] if r.returncode == 0 else []
c.check(r.returncode == 0 and "fold-constants" not in names and "eliminate-dead" not in names and names,
        f"--disable twice: {r.stderr} {names}")
# --shape fixes input dims in the output (and lets shapes fold)
out = os.path.join(tmp, "fixed.onnx")
r = run(["optimize", cnn, "-o", out, "--shape", "input=3x1x28x28"])
c.check(r.returncode == 0 and input_dims(onnx.load(out))[0] == [3, 1, 28, 28], f"--shape: {r.stderr}")
r = run(["optimize", cnn, "-o", out, "--shape", "input=n,1,28,28"])
c.check(r.returncode == 0 and input_dims(onnx.load(out))[0] == ["n", 1, 28, 28], f"--shape rename: {r.stderr}")
# --verify names the first pass that changed the outputs: with zero tolerance, fusing BatchNormalization
# into the Conv's weights changes float rounding, and that is the pass to blame
convbn = os.path.join(SOURCE_DIR, "tests", "passes", "fuse_conv_bn.onnxtxt")
r = run(["optimize", convbn, "-o", os.path.join(tmp, "v.onnx"), "--passes", "eliminate-identity,fuse-conv-bn,eliminate-dead",
         "--verify", "--rtol", "0", "--atol", "0", "--json"])
doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
c.check(r.returncode == 1, f"--verify with zero tolerance: exit {r.returncode}, want 1: {r.stderr[-300:]}")
c.check("first pass that changed them: fuse-conv-bn (iteration 1)" in r.stderr, f"--verify culprit: {r.stderr[-400:]}")
c.check(doc.get("verify", {}).get("first_differing_pass") == "fuse-conv-bn (iteration 1)", f"--verify JSON: {doc.get('verify')}")

# --print-after prints the graph after a pass that changed it; an unknown pass is a usage error
folding = os.path.join(SOURCE_DIR, "tests", "passes", "fold_constants.onnxtxt")
r = run(["optimize", folding, "-o", os.path.join(tmp, "p.onnx"), "--print-after", "fold-constants", "--print-after", "all"])
c.check(r.returncode == 0 and "// ----- after fold-constants (iteration 1)" in r.stderr and "y = Mul (x, s)" in r.stderr,
        f"--print-after: {r.stderr[:500]}")
r = run(["optimize", cnn, "-o", os.path.join(tmp, "p.onnx"), "--print-after", "nope"])
c.check(r.returncode == 2 and "--print-after nope: no such pass" in r.stderr, f"--print-after nope: {r.stderr}")
# text output
r = run(["optimize", cnn, "-o", "-", "--to", "text"])
c.check(r.returncode == 0 and "Conv" in r.stdout and "=>" in r.stdout, f"--to text: {r.stderr}")

# --- external data: the output gets its own data file beside it; the input's stays untouched
ext_dir = os.path.join(tmp, "ext")
os.makedirs(ext_dir)
ext_in = os.path.join(ext_dir, "bert.onnx")
r = run(["convert", bert, "-o", ext_in, "--external-data", "--size-threshold", "256"])
c.check(r.returncode == 0, f"convert to external data: {r.stderr}")
before_bytes = open(ext_in + ".data", "rb").read()
ext_out = os.path.join(ext_dir, "bert.opt.onnx")
r = run(["optimize", ext_in, "-o", ext_out, "-O3"])
c.check(r.returncode == 0, f"optimize with external data: {r.stderr}")
c.check(open(ext_in + ".data", "rb").read() == before_bytes, "optimize replaced the input's external data file")
c.check(os.path.exists(ext_out + ".data"), f"no {ext_out}.data: {os.listdir(ext_dir)}")
feeds = random_feeds(onnx.load(bert), {"batch": 1, "seq": 4})
for w, g in zip(ort_outputs(bert, feeds), ort_outputs(ext_out, feeds)):
    c.check(np.allclose(g, w, rtol=1e-4, atol=1e-5), "external-data output differs in onnxruntime")
for w, g in zip(ort_outputs(bert, feeds), ort_outputs(ext_in, feeds)):
    c.check(np.array_equal(g, w), "the input model changed")

# --- IR version 3 (every initializer also an input): weights become constants, IR 4, data input kept
light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
doc = check_optimized(light, ["-O2"], {}, "ir3") if os.path.exists(light) else None
if doc:
    m = onnx.load(os.path.join(tmp, "ir3.onnx"))
    c.check(m.ir_version == 4 and [i.name for i in m.graph.input] == ["data_0"], f"IR 3: {m.ir_version} {[i.name for i in m.graph.input][:3]}")
    c.check(doc["after"]["nodes"] < doc["before"]["nodes"] - 30, f"IR 3: the ConstantOfShape weights were not folded: {doc['after']}")

# --- backend node tests: every function-expanded model (many nodes, constants) and a sample of the
# rest stay valid for onnx.checker after -O3.
models = node_test_models()
sample = [m for i, m in enumerate(models) if "_expanded" in m or i % 10 == 0]
if os.path.basename(os.path.normpath(BUILD_DIR)).endswith("asan"):
    # the sanitizer pass is about memory safety: a third of the sample is enough
    sample = sample[::3]
for m in sample:
    out = os.path.join(tmp, "node.onnx")
    r = run(["optimize", m, "-o", out, "-O3"])
    if not c.check(r.returncode == 0, f"{m}: exit {r.returncode}: {r.stderr.strip()[:300]}"):
        continue
    try:
        onnx.checker.check_model(onnx.load(out), full_check=True)
        c.check(True, "")
    except Exception as e:  # noqa: BLE001
        c.check(False, f"{m}: onnx.checker rejects the -O3 output: {str(e).splitlines()[0][:300]}")
c.finish()
