"""Make the converter-made corpus models in ``tests/corpus/sklearn/`` (run by hand, output committed).

skl2onnx is how most tabular models reach ONNX Runtime, and its defaults are what people deploy:
a classifier's probabilities come out as a ZipMap, ``seq(map(int64, float))``, not a tensor.
The set: a logistic regression with the default ZipMap and with ``zipmap=False``, a random-forest
regressor (a TreeEnsembleRegressor node) and a scaler + PCA + gradient-boosting pipeline
(ZipMap again). Trained on *string* labels (non-ASCII, a slash and a space among them, as class
names from real data have): a logistic regression whose ``output_label`` is a ``tensor(string)``
and whose ZipMap has string keys, ``seq(map(string, float))``; and a decision tree converted with
``zipmap="columns"``, one float output per class, named after the class (``sémeu/ä b``), so
hostile output names reach file names, tables, pages and metric labels. Small on purpose: every
file stays well under 100 kB.

    .venv/bin/python tests/corpus/make_sklearn.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType
from sklearn.datasets import make_classification, make_regression
from sklearn.decomposition import PCA
from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier

OUT = Path(__file__).resolve().parent / "sklearn"
FEATURES = 6
TYPES = [("input", FloatTensorType([None, FEATURES]))]
LABELS = ["cat", "dog", "émeu/ä b"]  # string class names, one non-ASCII with a slash and a space


def main() -> None:
    OUT.mkdir(exist_ok=True)
    x, y = make_classification(n_samples=200, n_features=FEATURES, n_informative=4, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    logreg = LogisticRegression(max_iter=500).fit(x, y)
    save(to_onnx(logreg, initial_types=TYPES, target_opset={"": 17, "ai.onnx.ml": 3}), "logreg_zipmap.onnx")
    save(
        to_onnx(logreg, initial_types=TYPES, options={"zipmap": False}, target_opset={"": 17, "ai.onnx.ml": 3}),
        "logreg_nozipmap.onnx",
    )
    pipeline = make_pipeline(
        StandardScaler(), PCA(n_components=4), GradientBoostingClassifier(n_estimators=8, max_depth=2)
    )
    pipeline.fit(x, y)
    save(to_onnx(pipeline, initial_types=TYPES, target_opset={"": 17, "ai.onnx.ml": 3}), "pipeline.onnx")
    xr, yr = make_regression(n_samples=200, n_features=FEATURES, random_state=0)
    forest = RandomForestRegressor(n_estimators=6, max_depth=4, random_state=0).fit(xr.astype(np.float32), yr)
    save(to_onnx(forest, initial_types=TYPES, target_opset={"": 17, "ai.onnx.ml": 3}), "forest_regressor.onnx")
    names = np.array(LABELS)[y]
    strings = LogisticRegression(max_iter=500).fit(x, names)
    save(to_onnx(strings, initial_types=TYPES, target_opset={"": 17, "ai.onnx.ml": 3}), "logreg_strings.onnx")
    tree = DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, names)
    columns = {id(tree): {"zipmap": "columns"}}
    save(
        to_onnx(tree, initial_types=TYPES, options=columns, target_opset={"": 17, "ai.onnx.ml": 3}),
        "tree_columns.onnx",
    )


def save(model: object, name: str) -> None:
    data = model.SerializeToString()  # type: ignore[attr-defined]
    (OUT / name).write_bytes(data)
    print(f"{OUT / name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
