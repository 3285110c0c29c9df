"""Models produced by a real converter (skl2onnx) go through the same check as hand-built ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from skl2onnx import to_onnx
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.results import Verdict
from tests.workspace import Workspace


def training_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(200, 6)).astype(np.float32)
    target = features @ rng.normal(size=6) + 0.1 * rng.normal(size=200)
    return features, target


def logistic_pipeline(seed: int = 0) -> onnx.ModelProto:
    features, target = training_data(seed)
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(features, target > 0)
    return to_onnx(pipeline, features[:1], options={id(pipeline.steps[-1][1]): {"zipmap": False}})


def forest(seed: int = 0) -> onnx.ModelProto:
    features, target = training_data(seed)
    model = RandomForestRegressor(n_estimators=8, max_depth=5, random_state=seed).fit(features, target)
    return to_onnx(model, features[:1])


def mlp(seed: int = 0) -> onnx.ModelProto:
    features, target = training_data(seed)
    model = MLPRegressor(hidden_layer_sizes=(16,), max_iter=300, random_state=seed).fit(features, target)
    return to_onnx(model, features[:1])


CONVERTED = {"logistic_pipeline": logistic_pipeline, "forest": forest, "mlp": mlp}


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", sorted(CONVERTED))
def test_a_converted_model_passes_against_its_own_baseline(tmp_path: Path, name: str) -> None:
    ws = Workspace(tmp_path)
    ws.add_model(name, CONVERTED[name](), count=6, dims={"X:0": 4})
    capture.capture_baseline(plan_for(ws.settings(), name))
    result = run_check(plan_for(ws.settings(), name))
    assert result.verdict is Verdict.PASS, result.all_reasons()
    assert result.outputs, "a converter's outputs are compared"


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", sorted(CONVERTED))
def test_a_retrained_converted_model_is_caught_as_drift(tmp_path: Path, name: str) -> None:
    ws = Workspace(tmp_path)
    ws.add_model(name, CONVERTED[name](seed=0), count=6, dims={"X:0": 4})
    capture.capture_baseline(plan_for(ws.settings(), name))
    ws.replace_model(name, CONVERTED[name](seed=1))
    result = run_check(plan_for(ws.settings(), name))
    assert result.verdict is Verdict.FAIL
    codes = {r.code for r in result.all_reasons()}
    assert "model_changed" in codes
    assert codes & {"atol_rtol", "exact_mismatch"}, "the numbers moved too"


def test_an_integer_label_output_is_compared_exactly(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("clf", logistic_pipeline(), count=6, dims={"X:0": 4})
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    result = run_check(plan_for(ws.settings(), "clf"))
    label = next(o for o in result.outputs if o.name == "label")
    assert label.dtype == "int64"
    assert label.metrics.max_ulp is None
