"""Oracle of the opset-conversion golden tests (tests/passes/convert_opset_*.onnxtxt).

usage: convert_check.py ORIGINAL CONVERTED OPSET [--seed N]

ORIGINAL is a model in ONNX's textual syntax or binary; CONVERTED must import ai.onnx OPSET, have
an IR version its onnx release allows, pass onnx.checker's full check (with shape inference), and
compute the same outputs as ORIGINAL, each model run at its own opset by ONNX Runtime (which
honours the old semantics, e.g. Softmax before 13), or by onnx.reference.ReferenceEvaluator where
ONNX Runtime cannot load one of them (ReferenceEvaluator ignores some old semantics), on random
inputs (rtol 1e-5, atol 1e-6).
"""
import sys

import numpy as np
import onnx
import onnx.checker
import onnx.helper
import onnx.parser
from onnx.reference import ReferenceEvaluator


def load(path):
    if path.endswith(".onnxtxt"):
        with open(path) as f:
            return onnx.parser.parse_model(f.read())
    return onnx.load(path)


def inputs_for(model, rng):
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feeds[vi.name] = rng.integers(0, 4, shape).astype(dtype)
    return feeds


def main():
    orig, conv, opset = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
    seed = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--seed" else 0
    got = {o.domain or "ai.onnx": o.version for o in conv.opset_import}
    if got.get("ai.onnx") != opset:
        sys.exit(f"converted model imports ai.onnx {got.get('ai.onnx')}, expected {opset}")
    onnx.checker.check_model(conv, full_check=True)
    feeds = inputs_for(orig, np.random.default_rng(seed))
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        sessions = [ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
                    for m in (orig, conv)]
        want, have = (sess.run(None, feeds) for sess in sessions)
        oracle = "onnxruntime"
    except Exception:  # noqa: BLE001 - ORT refuses opsets/ops it lacks
        want = ReferenceEvaluator(orig).run(None, feeds)
        have = ReferenceEvaluator(conv).run(None, feeds)
        oracle = 'onnx.reference'
    if len(want) != len(have):
        sys.exit(f"{len(have)} outputs, expected {len(want)}")
    for i, (w, h) in enumerate(zip(want, have)):
        w, h = np.asarray(w), np.asarray(h)
        if w.shape != h.shape or w.dtype != h.dtype:
            sys.exit(f"output {i}: {h.dtype}{list(h.shape)}, expected {w.dtype}{list(w.shape)}")
        if not np.allclose(h.astype(np.float64) if h.dtype != np.bool_ else h,
                           w.astype(np.float64) if w.dtype != np.bool_ else w, rtol=1e-5, atol=1e-6, equal_nan=True):
            sys.exit(f"output {i} differs: max abs diff {np.max(np.abs(h.astype(np.float64) - w.astype(np.float64)))}")
    print(f"ok: opset {opset}, ir_version {conv.ir_version}, {len(want)} outputs equal ({oracle})")


if __name__ == "__main__":
    main()
