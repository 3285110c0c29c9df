"""A check's plan is resolved once from the config, carries what the check needs, and crosses processes."""

from __future__ import annotations

import multiprocessing
import pickle
from pathlib import Path

import pytest

from monitor.config.plan import CheckPlan, plan_for
from monitor.config.settings import Settings
from monitor.daemon import isolate
from monitor.errors import ConfigError
from monitor.results import AppliedTolerance
from tests import isolate_targets, modelzoo
from tests.workspace import Workspace


def settings_with_two_models(tmp_path: Path) -> Settings:
    ws = Workspace(tmp_path)
    ws.add_model(
        "clf",
        modelzoo.classifier(),
        repeats=3,
        timeout="20s",
        schedule={"interval": "5m"},
        tolerance={"default": {"atol": 1e-3}, "outputs": {"prob": {"rtol": 0.5, "cosine_min": 0.9}}},
        localize_on_fail=True,
    )
    ws.add_model("mlp", modelzoo.deep_mlp(layers=2))
    ws.extra["defaults"] = {"tolerance": {"rtol": 1e-2, "snr_min_db": 30}, "repeats": 2}
    ws.extra["daemon"] = {"auto_capture_baseline": True}
    return ws.settings()


def test_a_plan_holds_the_models_resolved_config(tmp_path: Path) -> None:
    settings = settings_with_two_models(tmp_path)
    plan = plan_for(settings, "clf")
    model = settings.model("clf")
    assert plan.model == model and plan.name == "clf"
    assert plan.benchset == settings.benchset(model.benchset)
    assert (plan.repeats, plan.timeout_s, plan.schedule.interval) == (3, 20.0, 300.0)
    assert plan.baselines_dir == settings.store.baselines_dir and plan.benchsets_dir == settings.store.benchsets_dir
    assert plan.auto_capture_baseline and plan.localize_on_fail
    defaults = plan_for(settings, "mlp")
    assert (defaults.repeats, defaults.timeout_s) == (2, settings.defaults.timeout)
    assert defaults.schedule == settings.defaults.schedule and not defaults.localize_on_fail


def test_a_plans_tolerances_are_exactly_the_settings_merge(tmp_path: Path) -> None:
    settings = settings_with_two_models(tmp_path)
    for name, outputs in (("clf", ["logits", "prob", "not-an-output"]), ("mlp", ["y"])):
        plan, model = plan_for(settings, name), settings.model(name)
        for output in outputs:
            assert plan.tolerance(output) == settings.tolerance_for(model, output)
    prob = plan_for(settings, "clf").tolerance("prob")
    assert prob == AppliedTolerance(atol=1e-3, rtol=0.5, cosine_min=0.9, snr_min_db=30.0)


def test_a_tolerance_for_an_output_the_model_lacks_is_a_config_error(tmp_path: Path) -> None:
    plan = plan_for(settings_with_two_models(tmp_path), "clf")
    assert set(plan.tolerances(["logits", "prob"])) == {"logits", "prob"}
    with pytest.raises(ConfigError, match=r"models\[clf\]\.tolerance\.outputs names \['prob'\]"):
        plan.tolerances(["logits"])


def test_an_unknown_model_is_a_config_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no model 'nope' in config; models are \['clf', 'mlp'\]"):
        plan_for(settings_with_two_models(tmp_path), "nope")


def test_a_plan_is_frozen_and_pickles(tmp_path: Path) -> None:
    plan = plan_for(settings_with_two_models(tmp_path), "clf")
    with pytest.raises(AttributeError):
        plan.timeout_s = 1.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(plan)) == plan


@pytest.mark.process
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_plan_crosses_the_isolation_boundary_unchanged(
    tmp_path: Path, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    if method == "spawn":  # the fallback isolate uses where there is no fork
        monkeypatch.setattr(isolate, "_context", multiprocessing.get_context("spawn"))
    plan = plan_for(settings_with_two_models(tmp_path), "clf")
    outcome = isolate.run(isolate_targets.echo, plan, timeout_s=60)
    assert outcome.kind == "ok", outcome.detail
    assert outcome.value is not None
    assert isinstance(outcome.value["value"], CheckPlan) and outcome.value["value"] == plan
