"""Declared types are claims, not facts (issue 9): an OCR-like model (opset 12, input [1, 1, 64,
image_width], a Conv stack, a Reshape whose target comes from Shape/Gather/Concat) that declares its
output float[1, seqlen] while it computes [W', 1, 256]. onnxruntime only warns about that and
onnx.checker accepts it; `optimize --fuse --verify` must keep what the model computes (onnxruntime
gives the same shapes and values before and after, at two widths), warn naming the output, and
write a declaration onnxruntime agrees with. `check` still reports the contradiction (a warning)."""
import atexit
import shutil
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import Checker, run  # noqa: E402

ort.set_default_logger_severity(3)  # the warnings of interest are read from a child process
c = Checker("optimize declared types")
tmp = tempfile.mkdtemp(prefix="onnxtool-declared-")
atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # no temp folders left behind
WIDTHS = (100, 37)  # W' = ceil(W / 2): 50 and 19


def ocr_model(declared_out):
    rng = np.random.default_rng(0)

    def w(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [w("w1", [8, 1, 3, 3]), w("b1", [8]), w("w2", [16, 8, 3, 3]), w("b2", [16]), w("w3", [32, 16, 3, 3]),
             w("b3", [32]), numpy_helper.from_array(np.array([3], np.int64), "idx3"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Shape", ["r3"], ["s"]),
        helper.make_node("Gather", ["s", "idx3"], ["wd"], axis=0),
        helper.make_node("Concat", ["wd", "one", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["r3", "target"], ["out"]),
    ]
    g = helper.make_graph(nodes, "ocr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64, "image_width"])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, declared_out)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)], ir_version=7)


def ort_run(path, width):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(width).random((1, 1, 64, width)).astype(np.float32)
    return s.run(None, {"x": x})[0]


def ort_warns(path, width):
    """Whether onnxruntime warns that the declared output shape does not match (its log, stderr)."""
    code = ("import sys, numpy as np, onnxruntime as ort\n"
            "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
            "s.run(None, {'x': np.zeros((1, 1, 64, int(sys.argv[2])), np.float32)})\n")
    p = subprocess.run([sys.executable, "-c", code, path, str(width)], capture_output=True, text=True, timeout=120)
    c.check(p.returncode == 0, f"onnxruntime fails on {path}: {p.stderr[-500:]}")
    return "VerifyOutputSizes" in p.stderr or "does not match" in p.stderr


def declared_dims(model):
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in model.graph.output[0].type.tensor_type.shape.dim]


def agrees(decl, shape):
    return len(decl) == len(shape) and all(not isinstance(d, int) or d == s for d, s in zip(decl, shape))


src = os.path.join(tmp, "ocr.onnx")
m = ocr_model([1, "seqlen"])
onnx.checker.check_model(m, full_check=True)  # the oracle accepts the lie
onnx.save(m, src)
# The premise: onnxruntime computes rank 3 and only warns.
for width in WIDTHS:
    want = ort_run(src, width)
    c.check(want.shape == ((width + 1) // 2, 1, 256), f"onnxruntime computes {want.shape} at width {width}")
c.check(ort_warns(src, WIDTHS[0]), "onnxruntime does not warn about the wrong declaration of the input model")

# check still finds the contradiction: a warning (onnx.checker accepts the model, onnxruntime runs
# it), an error under --strict.
r = run(["check", src])
c.check(r.returncode == 0 and "'out'" in r.stderr + r.stdout and "declared" in r.stderr + r.stdout and "1 warning" in r.stderr,
        f"check: exit {r.returncode}, {r.stdout.strip()} {r.stderr.strip()}")
r = run(["check", "--strict", src])
c.check(r.returncode == 1, f"check --strict: exit {r.returncode}")

out = os.path.join(tmp, "ocr_opt.onnx")
r = run(["optimize", src, "--fuse", "--verify", "-o", out])
c.check(r.returncode == 0, f"optimize --fuse --verify: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
warns = [l for l in r.stderr.splitlines() if "warning:" in l and "'out'" in l]
c.check(len(warns) == 1 and "declared float32[1,seqlen]" in warns[0] and "computes float32[" in warns[0],
        f"one warning naming output 'out': {r.stderr.strip()}")
if os.path.exists(out):
    opt = onnx.load(out)
    try:
        onnx.checker.check_model(opt, full_check=True)
        c.check(True, "")
    except Exception as e:  # noqa: BLE001
        c.check(False, f"onnx.checker rejects the output: {str(e).splitlines()[0]}")
    decl = declared_dims(opt)
    for width in WIDTHS:
        want, got = ort_run(src, width), ort_run(out, width)
        c.check(got.shape == want.shape, f"width {width}: onnxruntime shape {got.shape}, want {want.shape}")
        c.check(got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5),
                f"width {width}: onnxruntime values differ")
        c.check(agrees(decl, got.shape), f"width {width}: the written model declares {decl}, computes {got.shape}")
    c.check(not ort_warns(out, WIDTHS[1]), "onnxruntime still warns about the written declaration")

# A declaration that inference cannot refute (a symbol) is kept as written, and no warning.
src2 = os.path.join(tmp, "ocr_ok.onnx")
onnx.save(ocr_model(["seqlen", 1, 256]), src2)
out2 = os.path.join(tmp, "ocr_ok_opt.onnx")
r = run(["optimize", src2, "--fuse", "--verify", "-o", out2])
c.check(r.returncode == 0 and "warning" not in r.stderr, f"consistent declaration: exit {r.returncode}: {r.stderr.strip()}")
if os.path.exists(out2):
    c.check(declared_dims(onnx.load(out2)) == ["seqlen", 1, 256], f"declaration changed: {declared_dims(onnx.load(out2))}")

c.finish()
