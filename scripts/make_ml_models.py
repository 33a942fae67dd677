#!/usr/bin/env python3
"""Writes small classical-ML models as converters really write them (skl2onnx, onnxmltools) to
testdata/models/ml/, for tests/py/test_ml_models.py. Not run by CI: the converters and training
libraries (scikit-learn, skl2onnx, onnxmltools, lightgbm, xgboost) are large and only needed to
regenerate the files. Each model is a few KB; the training data is synthetic and seeded.

usage: python -m venv /tmp/mlvenv && /tmp/mlvenv/bin/pip install scikit-learn skl2onnx onnxmltools \
           lightgbm xgboost-cpu onnx onnxruntime
       /tmp/mlvenv/bin/python scripts/make_ml_models.py [OUTDIR]
"""
import os
import sys

import numpy as np
import onnx
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType, Int64TensorType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def data(n=200, f=4, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f)).astype(np.float32)
    w = rng.normal(size=(f, classes))
    y = np.argmax(x @ w + 0.3 * rng.normal(size=(n, classes)), axis=1)
    return x, y


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "testdata", "models", "ml")
    os.makedirs(out, exist_ok=True)
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Normalizer, OneHotEncoder, StandardScaler
    from sklearn.svm import SVC, SVR
    from sklearn.tree import DecisionTreeRegressor

    x, y = data()
    yr = (x[:, 0] * 2 - x[:, 1] + 0.1 * x[:, 2] ** 2).astype(np.float32)
    models = {}
    # ZipMap (the default): probabilities as a sequence of maps; the default domain listed twice
    models["sk_scaler_logreg_zipmap"] = to_onnx(make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y), x[:1])
    models["sk_scaler_logreg"] = to_onnx(make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y), x[:1],
                                         options={"zipmap": False})
    models["sk_random_forest"] = to_onnx(RandomForestClassifier(n_estimators=4, max_depth=4, random_state=0).fit(x, y),
                                         x[:1], options={"zipmap": False})
    models["sk_random_forest_ml3"] = to_onnx(RandomForestClassifier(n_estimators=3, max_depth=3, random_state=1).fit(x, y),
                                             x[:1], options={"zipmap": False},
                                             target_opset={"": 17, "ai.onnx.ml": 3})
    models["sk_gbr"] = to_onnx(GradientBoostingRegressor(n_estimators=5, max_depth=3, random_state=0).fit(x, yr), x[:1])
    models["sk_tree_regressor"] = to_onnx(DecisionTreeRegressor(max_depth=4, random_state=0).fit(x, yr), x[:1])
    models["sk_svc"] = to_onnx(SVC(probability=False).fit(x[:60], y[:60]), x[:1], options={"zipmap": False})
    models["sk_svr"] = to_onnx(SVR().fit(x[:60], yr[:60]), x[:1])
    models["sk_pca_normalizer"] = to_onnx(make_pipeline(PCA(n_components=3), Normalizer()).fit(x), x[:1])
    models["sk_kmeans"] = to_onnx(KMeans(n_clusters=3, n_init=2, random_state=0).fit(x), x[:1])
    models["sk_mlp"] = to_onnx(MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0).fit(x, y), x[:1],
                               options={"zipmap": False})
    cats = np.random.default_rng(3).integers(0, 4, size=(50, 2)).astype(np.int64)
    models["sk_onehot"] = to_onnx(OneHotEncoder(handle_unknown="ignore").fit(cats), cats[:1],
                                  initial_types=[("X", Int64TensorType([None, 2]))])

    import lightgbm
    import onnxmltools
    import xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType as MlFloat
    lgbm = lightgbm.LGBMClassifier(n_estimators=5, num_leaves=7, verbose=-1, random_state=0).fit(x, y)
    models["lgbm_classifier"] = onnxmltools.convert_lightgbm(lgbm, initial_types=[("X", MlFloat([None, 4]))],
                                                             zipmap=False, target_opset=15)
    xgb = xgboost.XGBRegressor(n_estimators=5, max_depth=3, random_state=0).fit(x, yr)
    models["xgb_regressor"] = onnxmltools.convert_xgboost(xgb, initial_types=[("X", MlFloat([None, 4]))],
                                                          target_opset=15)
    for name, m in models.items():
        path = os.path.join(out, name + ".onnx")
        onnx.save(m, path)
        print(f"{path}: {os.path.getsize(path)} bytes, opsets "
              + ", ".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in m.opset_import))


if __name__ == "__main__":
    main()
