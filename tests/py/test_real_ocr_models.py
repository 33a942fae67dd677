"""Real OCR models: the PaddleOCR nets (PP-OCRv4 text detection and recognition, the mobile v2.0
direction classifier) that the rapidocr-onnxruntime package bundles, as paddle2onnx wrote them
(opset 11/12, dynamic dims written as -1 or as named dims, hundreds of Constant nodes).
For each, at the shapes rapidocr feeds them: `check` accepts it (as onnx.checker does), `run`
matches ONNX Runtime, and `optimize` writes a model that onnx.checker (full) accepts and that
ONNX Runtime runs with the original's outputs at two input sizes.
scripts/setup installs rapidocr-onnxruntime without its dependencies (scripts/requirements-models.txt)."""
import importlib.util
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import Checker, run  # noqa: E402

# model file -> two input shapes of "x" (NCHW; rapidocr resizes text lines to height 48)
MODELS = {
    "ch_PP-OCRv4_det_infer.onnx": [(1, 3, 320, 320), (1, 3, 256, 416)],
    "ch_PP-OCRv4_rec_infer.onnx": [(1, 3, 48, 320), (2, 3, 48, 160)],
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": [(1, 3, 48, 192), (3, 3, 48, 192)],
}


def models_dir():
    spec = importlib.util.find_spec("rapidocr_onnxruntime")  # locates it without importing it (cv2)
    if spec is None or not spec.origin:
        sys.exit("rapidocr-onnxruntime is not installed in the venv: run scripts/setup")
    return os.path.join(os.path.dirname(spec.origin), "models")


def session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def main():
    c = Checker("real OCR models")
    d = models_dir()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for name, shapes in MODELS.items():
            src = os.path.join(d, name)
            r = run(["check", src])
            c.check(r.returncode == 0, f"{name}: check exits 0: {r.stdout}{r.stderr}")
            sess = session(src)
            x = rng.random(shapes[0], dtype=np.float32) * 2 - 1  # normalised image values
            xp = os.path.join(tmp, "x.npy")
            np.save(xp, x)
            out_dir = os.path.join(tmp, "out_" + name)
            r = run(["run", src, "-i", f"x={xp}", "-O", out_dir])
            want = sess.run(None, {"x": x})
            if c.check(r.returncode == 0, f"{name}: run: {r.stderr}"):
                for o, w in zip(sess.get_outputs(), want):
                    got = np.load(os.path.join(out_dir, o.name.replace("/", "_") + ".npy"))
                    c.check(got.shape == w.shape and np.allclose(got, w, rtol=1e-3, atol=1e-4),
                            f"{name}: run output {o.name} vs onnxruntime: "
                            f"{np.max(np.abs(got - w)) if got.shape == w.shape else (got.shape, w.shape)}")
            dst = os.path.join(tmp, "opt_" + name)
            r = run(["optimize", src, "-o", dst])
            if not c.check(r.returncode == 0, f"{name}: optimize: {r.stderr}"):
                continue
            try:
                onnx.checker.check_model(dst, full_check=True)
                c.check(True, "")
            except Exception as e:  # noqa: BLE001
                c.check(False, f"{name}: the optimized model fails onnx.checker: {e}")
            opt = session(dst)
            for shape in shapes:
                f = {"x": rng.random(shape, dtype=np.float32) * 2 - 1}
                a, b = sess.run(None, f), opt.run(None, f)
                c.check(all(p.shape == q.shape and np.allclose(p, q, rtol=1e-4, atol=1e-5) for p, q in zip(a, b)),
                        f"{name}: optimized outputs differ at input {shape}")
            print(f"{name}: nodes {len(onnx.load(src).graph.node)} -> {len(onnx.load(dst).graph.node)}")
    c.finish()


if __name__ == "__main__":
    main()
