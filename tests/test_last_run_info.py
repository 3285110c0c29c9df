"""``onnxmon_last_run_info``: why a model's last run ended as it did, in bounded label values.

The alert rules read it in their annotations (``deploy/prometheus/alerts.yaml``), so a page says the
reason, attribution, likely cause, how far over tolerance and which environment fields changed.
Ground truth here is the check result itself (its reasons, its outputs' errors and tolerances).
"""

from __future__ import annotations

import pytest

from monitor.sinks.prometheus import last_run_info
from monitor.store import Store, incidents
from tests.test_metrics import RealDaemon, Scenario, scrape, series


@pytest.fixture
def daemon(scenario: Scenario, store: Store) -> RealDaemon:
    return RealDaemon(scenario.settings, store, startup_env=dict(scenario.passing.environment))


def test_error_buckets_are_closed_and_one_is_the_line() -> None:
    assert [last_run_info.error_bucket(r) for r in (None, float("nan"), 0.0, 0.99, 1.0, 1.5, 164.0, 1e6)] == [
        "none",
        "none",
        "<1",
        "<1",
        "1-2",
        "1-2",
        "100-1000",
        ">=1000",
    ]
    assert set(last_run_info.ERROR_BUCKETS) == {"none", "<1", "1-2", "2-10", "10-100", "100-1000", ">=1000"}


def test_changed_environment_fields_name_stable_fields_versions_first_and_count_the_rest() -> None:
    changes = [
        {"field": "onnxruntime.build_info", "old": "a", "new": "b", "stable": True},
        {"field": "gpu.temperature", "old": 40, "new": 80, "stable": False},  # volatile: never named
        {"field": "onnxruntime.version", "old": "1.17.0", "new": "1.18.0", "stable": True},
        {"field": "cudnn.version", "old": "9.1", "new": "9.3", "stable": True},
        {"field": "nvml.driver_version", "old": "550", "new": "555", "stable": True},
    ]
    assert last_run_info.environment_changed(changes) == "cudnn.version,nvml.driver_version,onnxruntime.version +1 more"
    assert last_run_info.environment_changed(changes[:3]) == "onnxruntime.version,onnxruntime.build_info"
    assert last_run_info.environment_changed([changes[1]]) == "none"
    assert last_run_info.environment_changed([]) == "none"


def test_the_last_runs_info_says_why_it_failed(daemon: RealDaemon, scenario: Scenario) -> None:
    assert {i["model"]: i["verdict"] for i in series(scrape(daemon.registry), "onnxmon_last_run_info")} == {
        "clf": "none",
        "fresh": "none",
    }, "one series per configured model from the first scrape"
    daemon.dispatch(scenario.passing)
    daemon.dispatch(scenario.failing)
    daemon.dispatch(scenario.no_baseline)
    info = {i["model"]: i for i in series(scrape(daemon.registry), "onnxmon_last_run_info")}
    failing = scenario.failing
    # the check's own reasons: a swapped model file is check-level, so it comes first
    assert info["clf"]["reason"] == failing.all_reasons()[0].code == "model_changed"
    assert info["clf"]["attribution"] == failing.attribution == "model_changed"
    worst = max(o.metrics.max_abs_error / o.tolerance.atol for o in failing.outputs if o.name == "logits")
    assert worst > 1
    expected = next(
        label for bound, label in ((2, "1-2"), (10, "2-10"), (100, "10-100"), (1000, "100-1000")) if worst < bound
    )
    assert info["clf"]["error_over_tolerance"] == expected
    assert info["clf"]["environment_changed"] == "none", "same machine as the baseline's"
    assert info["clf"]["cause"] == "undiagnosed", "a fail no diagnosis has named"
    assert info["fresh"] == {
        "model": "fresh",
        "verdict": "error",
        "reason": "no_baseline",
        "attribution": "none",
        "cause": "none",
        "error_over_tolerance": "none",
        "environment_changed": "none",
    }


def test_a_passing_run_says_none(daemon: RealDaemon, scenario: Scenario) -> None:
    daemon.dispatch(scenario.passing)
    (clf,) = [i for i in series(scrape(daemon.registry), "onnxmon_last_run_info") if i["model"] == "clf"]
    assert (clf["verdict"], clf["reason"], clf["attribution"], clf["error_over_tolerance"]) == (
        "pass",
        "none",
        "none",
        "<1",
    )


def test_a_page_on_a_later_fail_names_the_diagnosis_of_an_earlier_one_in_its_window(
    daemon: RealDaemon, scenario: Scenario, store: Store
) -> None:
    """A fail's diagnosis lands after its run; the alert fires on a later fail of the same window, whose
    own diagnosis is not there yet: the page names the window's newest diagnosis, not ``none``."""
    daemon.dispatch(scenario.failing)
    (first,) = [r for r in store.latest_per_model() if r.model == "clf"]
    document = {"hypotheses": [{"cause": "model_weights_changed", "confidence": 0.8}]}
    incidents.record_diagnosis(store, first.id, document)
    daemon.dispatch(scenario.failing)
    (second,) = [r for r in store.latest_per_model() if r.model == "clf"]
    assert second.id != first.id and incidents.diagnosis(store, second.id) is None
    info = {i["model"]: i for i in series(scrape(daemon.registry), "onnxmon_last_run_info")}
    assert info["clf"]["cause"] == "model_weights_changed"
    diagnosed = series(scrape(daemon.registry), "onnxmon_diagnosis_info")
    assert {d["model"]: d["cause"] for d in diagnosed}["clf"] == "none", "diagnosis_info stays the last run's own"
    daemon.dispatch(scenario.passing)
    info = {i["model"]: i for i in series(scrape(daemon.registry), "onnxmon_last_run_info")}
    assert info["clf"]["cause"] == "none", "a pass names no cause"
