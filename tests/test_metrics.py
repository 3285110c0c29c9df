"""The /metrics contract: real check results, a real store and registry, scraped as Prometheus would.

``RealDaemon`` here is a small but real implementation of ``monitor.api.app.DaemonHandle`` (a SQLite
store, a registry, the three sinks, ``run_check``); ``tests/test_api.py`` reuses it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import math
import os
import platform
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor import capture
from monitor.api.app import create_app
from monitor.check import run_check
from monitor.config import settings
from monitor.config.plan import plan_for
from monitor.config.settings import Schedule, Settings
from monitor.errors import ConfigError
from monitor.files import baselines
from monitor.results import (
    REASON_CODES,
    AppliedTolerance,
    CheckResult,
    OutputMetrics,
    OutputStats,
    Verdict,
    worst_output,
)
from monitor.runtime import envsnap
from monitor.sinks import Sink
from monitor.sinks.database import DatabaseSink
from monitor.sinks.log import LogSink
from monitor.sinks.prometheus import runtime_info
from monitor.sinks.prometheus.collector import install
from monitor.sinks.prometheus.counters import Metrics
from monitor.sinks.prometheus.sink import PrometheusSink
from monitor.store import Store
from tests import modelzoo
from tests.conftest import need_binary
from tests.test_dashboard import documented_metrics
from tests.workspace import Workspace

BOUNDED = {"model", "output", "reason", "verdict"}


class RealDaemon:
    """A real ``DaemonHandle``: checks run in-process (the real daemon isolates them in a child)."""

    def __init__(self, settings: Settings, store: Store, *, startup_env: dict[str, Any] | None = None) -> None:
        self._settings = settings
        self._store = store
        self._registry = CollectorRegistry()
        self.scheduler_running = True
        self.metrics = install(self._registry, store, settings, startup_environment=startup_env or {})
        self.logger = logging.getLogger("tests.onnxmon.checks")
        self.sinks: list[Sink] = [DatabaseSink(store), PrometheusSink(self.metrics), LogSink(self.logger)]

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def store(self) -> Store:
        return self._store

    @property
    def registry(self) -> CollectorRegistry:
        return self._registry

    def readiness(self) -> dict[str, bool]:
        return {
            "config_loaded": True,
            "store_reachable": self._store.ping(),
            "scheduler_running": self.scheduler_running,
        }

    def dispatch(self, result: CheckResult) -> CheckResult:
        for sink in self.sinks:
            sink.write(result)
        return result

    def run_now(self, model: str) -> CheckResult:
        return self.dispatch(run_check(plan_for(self._settings, model)))

    def reload(self) -> bool:
        try:
            fresh = settings.load(self._settings.source, environ={})
        except ConfigError:
            self.metrics.config_reloaded(False)
            return False
        self._settings = fresh
        self.metrics.declare(fresh)
        self.metrics.config_reloaded(True)
        return True

    def promote(self, baseline_id: str, by: str) -> str:
        baseline = baselines.promote(self._settings.store.baselines_dir, baseline_id, by=by)
        meta = baseline.meta
        self._store.record_baseline(
            {
                "baseline_id": meta.id,
                "model": meta.model,
                "created_at": meta.created_at,
                "source": meta.source,
                "model_sha256": meta.model_sha256,
                "benchset": meta.benchset,
                "benchset_sha256": meta.benchset_sha256,
                "environment": dict(meta.environment),
            }
        )
        self._store.record_promotion(meta.model, meta.id, by)
        self.metrics.baseline_promoted(meta.model, meta.id)
        return meta.model


@dataclass(frozen=True)
class Scenario:
    """One workspace, checked three times: ``clf`` passing, then drifted, and ``fresh`` without a baseline."""

    ws: Workspace
    settings: Settings
    passing: CheckResult
    failing: CheckResult
    no_baseline: CheckResult
    baseline_id: str


def build_scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """Capture a baseline of ``clf``, check it, drift it and check again; check ``fresh`` (no baseline)."""
    ws = Workspace(tmp_path_factory.mktemp("ws"))
    model = modelzoo.classifier()
    # rtol 0 on logits: its error_ratio is then exact without a per-element value from compare.py
    ws.add_model(
        "clf",
        model,
        tolerance={"outputs": {"logits": {"atol": 1e-4, "rtol": 0.0}}},
        decisions={"logits": {"kind": "argmax"}},  # so that the decision series are exported too
    )
    ws.add_model("fresh", modelzoo.classifier(seed=1), schedule={"cron": "0 */6 * * *", "jitter": "1m"})
    baseline = capture.capture_baseline(plan_for(ws.settings(), "clf"))
    settings = ws.settings()
    passing = run_check(plan_for(settings, "clf"))
    ws.replace_model("clf", modelzoo.perturb_initializer(model, "w2", 1e-2))
    failing = run_check(plan_for(settings, "clf"))
    no_baseline = run_check(plan_for(settings, "fresh"))
    assert (passing.verdict, failing.verdict, no_baseline.verdict) == (Verdict.PASS, Verdict.FAIL, Verdict.ERROR)
    return Scenario(ws, settings, passing, failing, no_baseline, baseline.id)


def migrated_store(tmp_path: Path) -> Iterator[Store]:
    """A real SQLite history file, migrated to head."""
    with Store(f"sqlite:///{tmp_path / 'history.db'}") as s:
        s.upgrade()
        yield s


@pytest.fixture
def daemon(scenario: Scenario, store: Store) -> RealDaemon:
    return RealDaemon(scenario.settings, store, startup_env=dict(scenario.passing.environment))


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    """``{(sample name, labels): value}`` of one scrape (the body ``/metrics`` serves), parsed by the client."""
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for sample_name, labels in samples if sample_name == name]


# --- series exist from the start -------------------------------------------------------------------


def test_every_configured_series_exists_before_any_run(daemon: RealDaemon, scenario: Scenario) -> None:
    s = scrape(daemon.registry)
    for model in ("clf", "fresh"):
        assert value(s, "onnxmon_runs_total", model=model) == 0
        assert value(s, "onnxmon_run_duration_seconds_count", model=model) == 0
        assert value(s, "onnxmon_run_errors_total", model=model) == 0
        assert not series(s, "onnxmon_run_failures_total"), "reason children appear with their first run"
        for counter in (
            "environment_changes",
            "baseline_promotions",
            "scheduler_missed_runs",
            "scheduler_skipped_runs",
        ):
            assert value(s, f"onnxmon_{counter}_total", model=model) == 0
        assert value(s, "onnxmon_last_run_timestamp_seconds", model=model) == daemon.metrics.started_at
        assert value(s, "onnxmon_last_success_timestamp_seconds", model=model) == 0
        assert value(s, "onnxmon_last_run_success", model=model) == 0
        assert [value(s, "onnxmon_last_run_verdict", model=model, verdict=v) for v in ("pass", "fail", "error")] == [
            0
        ] * 3
        assert value(s, "onnxmon_provider_fallback", model=model) == 0
        for output in ("logits", "prob"):  # clf: from its baseline; fresh: from its model graph
            assert value(s, "onnxmon_output_checks_total", model=model, output=output) == 0
            assert value(s, "onnxmon_output_out_of_tolerance_total", model=model, output=output) == 0
            assert math.isnan(value(s, "onnxmon_output_max_abs_error", model=model, output=output))
            assert math.isnan(value(s, "onnxmon_output_error_over_tolerance", model=model, output=output))
    assert value(s, "onnxmon_output_tolerance_atol", model="clf", output="logits") == 1e-4
    assert value(s, "onnxmon_output_tolerance_rtol", model="clf", output="prob") == 1e-4
    assert value(s, "onnxmon_schedule_interval_seconds", model="clf") == 900
    assert value(s, "onnxmon_schedule_interval_seconds", model="fresh") == 6 * 3600 + 60
    assert value(s, "onnxmon_environment_matches_baseline", model="clf") == 1  # start-up snapshot = baseline's
    assert value(s, "onnxmon_environment_matches_baseline", model="fresh") == 0  # no baseline
    assert value(s, "onnxmon_store_up") == 1
    assert value(s, "onnxmon_config_last_reload_successful") == 1
    (info,) = series(s, "onnxmon_baseline_info")[:1]
    assert {i["model"]: i["source"] for i in series(s, "onnxmon_baseline_info")} == {"clf": "capture", "fresh": "none"}
    assert info["baseline_id"] == scenario.baseline_id and len(info["environment"]) == 16
    model_info = {i["model"]: i for i in series(s, "onnxmon_model_info")}
    assert len(model_info["fresh"]["model_sha256"]) == 64 and model_info["fresh"]["opset"].isdigit()
    (runtime,) = series(s, "onnxmon_runtime_info")
    assert runtime["onnxruntime_version"] and runtime["gpu_name"] == "" and runtime["node"]


def test_a_failing_run_moves_the_counters_and_the_gauges(daemon: RealDaemon, scenario: Scenario) -> None:
    daemon.dispatch(scenario.passing)
    daemon.dispatch(scenario.failing)
    s = scrape(daemon.registry)
    assert value(s, "onnxmon_runs_total", model="clf") == 2
    assert value(s, "onnxmon_run_duration_seconds_count", model="clf") == 2
    # check-level reasons come first: the swapped model file is the primary reason
    assert value(s, "onnxmon_run_failures_total", model="clf", reason="model_changed") == 1
    assert [labels["reason"] for labels in series(s, "onnxmon_run_failures_total")] == ["model_changed"]
    assert value(s, "onnxmon_run_errors_total", model="clf") == 0, "a drift is not an error"
    assert value(s, "onnxmon_output_checks_total", model="clf", output="logits") == 2
    assert value(s, "onnxmon_output_out_of_tolerance_total", model="clf", output="logits") == 1
    assert value(s, "onnxmon_last_run_success", model="clf") == 0
    assert value(s, "onnxmon_last_run_verdict", model="clf", verdict="fail") == 1
    assert value(s, "onnxmon_last_run_timestamp_seconds", model="clf") == pytest.approx(
        scenario.failing.finished_at, abs=1e-3
    )
    assert value(s, "onnxmon_last_success_timestamp_seconds", model="clf") == pytest.approx(
        scenario.passing.finished_at, abs=1e-3
    )
    logits = next(o for o in scenario.failing.outputs if o.name == "logits")
    assert value(s, "onnxmon_output_max_abs_error", model="clf", output="logits") == logits.metrics.max_abs_error > 0
    ratio = value(s, "onnxmon_output_error_over_tolerance", model="clf", output="logits")
    assert value(s, "onnxmon_output_error_ratio", model="clf", output="logits") == ratio, "the old name, one release"
    assert ratio == pytest.approx(logits.metrics.max_abs_error / 1e-4) and ratio > 1
    assert value(s, "onnxmon_output_cosine_similarity", model="clf", output="prob") < 1
    assert value(s, "onnxmon_output_nondeterministic", model="clf", output="prob") == 0


def test_an_error_run_blanks_the_output_values_and_counts_its_reason(daemon: RealDaemon, scenario: Scenario) -> None:
    daemon.dispatch(scenario.no_baseline)
    s = scrape(daemon.registry)
    assert value(s, "onnxmon_run_failures_total", model="fresh", reason="no_baseline") == 1
    assert value(s, "onnxmon_run_errors_total", model="fresh") == 1
    assert value(s, "onnxmon_last_run_verdict", model="fresh", verdict="error") == 1
    assert math.isnan(value(s, "onnxmon_output_rms_error", model="fresh", output="prob"))
    assert value(s, "onnxmon_output_checks_total", model="fresh", output="prob") == 0


def test_label_sets_stay_bounded_to_the_config(daemon: RealDaemon, scenario: Scenario) -> None:
    stranger = CheckResult(model="not-configured", verdict=Verdict.FAIL, started_at=1.0, finished_at=2.0)
    for result in (scenario.passing, scenario.failing, scenario.no_baseline, stranger):
        daemon.metrics.observe(result)
    s = scrape(daemon.registry)
    documented = documented_metrics()
    for name, labels in s:
        keys = {k for k, _ in labels}
        if not name.endswith("_info"):
            assert keys - {"le"} <= BOUNDED, name
        label = dict(labels)
        assert label.get("model", "clf") in {"clf", "fresh"}, name
        assert label.get("output", "prob") in {"logits", "prob"}, name
        # onnxmon_last_run_info says reason="none" for a run that passed (or no run yet)
        none = {"none"} if name == "onnxmon_last_run_info" else set()
        assert label.get("reason", "timeout") in REASON_CODES | none, name
        base = name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum").removesuffix("_created")
        assert base in documented or f"{base}_total" in documented or name == "onnxmon_store_up", name
    assert len(s) < 600


@pytest.mark.process
def test_a_scrape_passes_promtool_check_metrics(daemon: RealDaemon, scenario: Scenario) -> None:
    promtool = need_binary("prometheus", "promtool")
    daemon.dispatch(scenario.passing)
    daemon.dispatch(scenario.failing)
    text = TestClient(create_app(daemon)).get("/metrics").content  # the body /metrics serves
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout + done.stderr == b"", (done.stdout + done.stderr).decode()


def test_the_scrape_carries_the_daemon_process_series_documented_in_the_contract(daemon: RealDaemon) -> None:
    # prometheus_client's ProcessCollector and PlatformCollector, on the daemon's own registry (issue 40)
    text = generate_latest(daemon.registry).decode()
    exported = {
        sample.name: (family.type, set(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    documented = {n: v for n, v in documented_metrics().items() if n.startswith(("process_", "python_"))}
    assert len(documented) >= 7
    for name, (kind, labels) in documented.items():
        assert name in exported, f"{name} is in docs/metrics.md but not exported"
        assert exported[name][:2] == (kind, set(labels)), name
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # starttime, since boot
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line[:6] == "btime ")
    assert exported["process_start_time_seconds"][2] == pytest.approx(boot + ticks / os.sysconf("SC_CLK_TCK"), abs=1)
    assert exported["process_resident_memory_bytes"][2] > 0
    assert exported["process_open_fds"][2] == pytest.approx(len(os.listdir("/proc/self/fd")), abs=3)
    (python,) = [s.labels for f in text_string_to_metric_families(text) for s in f.samples if s.name == "python_info"]
    assert python["version"] == platform.python_version()


# Registered by the daemon's warm pool (daemon/root.py), which this module's RealDaemon has not:
# tests/test_worker_gpu_memory.py scrapes it from a real pool.
WARM_POOL_ONLY = {"onnxmon_worker_gpu_memory_bytes"}
# Set by the daemon's own fleet vote after a check (daemon/fleetvote.py), which RealDaemon.dispatch does not
# run: tests/test_fleet.py scrapes them after real votes.
VOTE_ONLY = {"onnxmon_fleet_consistent", "onnxmon_fleet_group"}


def test_every_metric_in_the_contract_is_exported(daemon: RealDaemon, scenario: Scenario) -> None:
    daemon.dispatch(scenario.passing)
    daemon.dispatch(scenario.failing)
    text = generate_latest(daemon.registry).decode()
    exported: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_bucket") if family.type == "histogram" else sample.name
            exported.setdefault(name, (family.type, set()))[1].update(set(sample.labels) - {"le"})
    for name, (kind, labels) in documented_metrics().items():
        if not name.startswith("onnxmon_") or ":" in name or name in WARM_POOL_ONLY | VOTE_ONLY:
            continue  # series made by Prometheus and recording rules; the warm pool's own
        assert name in exported, f"{name} is in docs/metrics.md but not exported"
        assert exported[name] == (kind, set(labels)), name


def test_a_store_failing_at_scrape_time_still_gives_a_valid_scrape(scenario: Scenario, tmp_path: Path) -> None:
    broken = Store(f"sqlite:///{tmp_path / 'missing-dir' / 'history.db'}")
    daemon = RealDaemon(scenario.settings, broken)
    daemon.metrics.observe(scenario.passing)
    s = scrape(daemon.registry)
    assert value(s, "onnxmon_store_up") == 0
    assert value(s, "onnxmon_runs_total", model="clf") == 1
    assert value(s, "onnxmon_output_tolerance_atol", model="clf", output="logits") == 1e-4
    assert not series(s, "onnxmon_last_run_timestamp_seconds"), "no last-run values rather than wrong ones"


def test_last_run_gauges_and_the_previous_environment_survive_a_restart(
    daemon: RealDaemon, scenario: Scenario, store: Store
) -> None:
    daemon.dispatch(scenario.passing)
    daemon.dispatch(scenario.failing)
    restarted = RealDaemon(scenario.settings, store)
    s = scrape(restarted.registry)
    assert value(s, "onnxmon_runs_total", model="clf") == 0, "counters restart at 0"
    assert value(s, "onnxmon_last_run_verdict", model="clf", verdict="fail") == 1
    assert value(s, "onnxmon_last_success_timestamp_seconds", model="clf") == pytest.approx(
        scenario.passing.finished_at, abs=1e-3
    )
    moved = dict(scenario.passing.environment) | {"fingerprint": "f" * 64}
    restarted.metrics.observe(CheckResult("clf", Verdict.PASS, 1.0, 2.0, environment=moved))
    assert value(scrape(restarted.registry), "onnxmon_environment_changes_total", model="clf") == 1


def test_a_restarted_target_exports_the_recent_failures_and_the_environment_change_from_its_first_scrape(
    daemon: RealDaemon, scenario: Scenario, store: Store
) -> None:
    # In Kubernetes an upgrade is a restart; the new pod's first checks finish before its first
    # scrape. What the alerts need must be true at that first sample, so it is read from the store.
    moved = dict(scenario.passing.environment) | {"fingerprint": "e" * 64}
    later = scenario.failing.finished_at + 5

    def at(result: CheckResult, offset: float) -> CheckResult:
        return dataclasses.replace(result, environment=moved, started_at=later + offset, finished_at=later + offset + 1)

    upgraded = at(scenario.failing, 0)
    daemon.dispatch(scenario.passing)
    daemon.dispatch(scenario.failing)  # before the restart: 1 failing run
    restarted = RealDaemon(scenario.settings, store)
    restarted.dispatch(upgraded)  # after it, on another stack: the 2nd, before any scrape
    s = scrape(restarted.registry)
    assert value(s, "onnxmon_recent_runs", model="clf") == 3
    assert value(s, "onnxmon_output_recent_failing_runs", model="clf", output="logits") == 2
    assert value(s, "onnxmon_recent_failing_runs", model="clf") == 2
    assert value(s, "onnxmon_recent_error_runs", model="clf") == 0
    (change,) = store.events(model="clf", kind="environment_changed")
    assert value(s, "onnxmon_environment_changed_timestamp_seconds", model="clf") == change.at.timestamp()
    assert change.at.timestamp() == pytest.approx(upgraded.started_at, abs=1e-3)
    assert value(s, "onnxmon_environment_changes_total", model="clf") == 1
    assert value(s, "onnxmon_environment_changed_timestamp_seconds", model="fresh") == 0
    assert value(s, "onnxmon_recent_runs", model="fresh") == 0
    for n in range(1, 5):  # four passing runs push the failures out of the window
        restarted.dispatch(at(scenario.passing, 10.0 * n))
    s = scrape(restarted.registry)
    assert value(s, "onnxmon_recent_runs", model="clf") == 4
    assert value(s, "onnxmon_output_recent_failing_runs", model="clf", output="logits") == 0


def test_recent_error_runs_count_error_verdicts_only(daemon: RealDaemon, scenario: Scenario) -> None:
    daemon.dispatch(scenario.no_baseline)
    daemon.dispatch(scenario.no_baseline)
    s = scrape(daemon.registry)
    assert value(s, "onnxmon_recent_error_runs", model="fresh") == 2
    assert value(s, "onnxmon_recent_failing_runs", model="fresh") == 0
    assert value(s, "onnxmon_recent_runs", model="fresh") == 2


def test_a_fail_within_tolerance_counts_in_the_models_recent_failing_runs(tmp_path: Path) -> None:
    # A model re-saved with only its doc_string changed: every run fails as model_changed while
    # every output is within tolerance; OnnxmonCheckFailing reads this count (issue 40).
    ws = Workspace(tmp_path / "ws")
    model = modelzoo.classifier()
    ws.add_model("clf", model)
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    model.doc_string = "re-saved with another description"
    ws.replace_model("clf", model)
    for store in migrated_store(tmp_path):
        daemon = RealDaemon(ws.settings(), store)
        results = [daemon.run_now("clf") for _ in range(2)]
        assert all(r.verdict is Verdict.FAIL and r.all_reasons()[0].code == "model_changed" for r in results)
        assert all(o.verdict is Verdict.PASS for r in results for o in r.outputs)
        s = scrape(daemon.registry)
        assert value(s, "onnxmon_recent_failing_runs", model="clf") == 2
        assert value(s, "onnxmon_recent_error_runs", model="clf") == 0
        assert value(s, "onnxmon_output_recent_failing_runs", model="clf", output="logits") == 0


def test_a_reload_adds_new_models_and_removes_those_that_left(daemon: RealDaemon, scenario: Scenario) -> None:
    daemon.metrics.config_reloaded(False)
    assert value(scrape(daemon.registry), "onnxmon_config_last_reload_successful") == 0
    only_fresh = scenario.settings.model_copy(update={"models": [scenario.settings.model("fresh")]})
    daemon.metrics.declare(only_fresh)
    daemon.metrics.config_reloaded(True)
    s = scrape(daemon.registry)
    assert {labels["model"] for labels in series(s, "onnxmon_runs_total")} == {"fresh"}
    assert {labels["model"] for labels in series(s, "onnxmon_output_max_abs_error")} == {"fresh"}
    assert value(s, "onnxmon_config_last_reload_successful") == 1
    daemon.metrics.declare(scenario.settings)
    assert value(scrape(daemon.registry), "onnxmon_runs_total", model="clf") == 0


def test_promotion_is_counted_once_whether_announced_or_seen_in_a_run(daemon: RealDaemon, scenario: Scenario) -> None:
    daemon.metrics.baseline_promoted("clf", "clf-new")
    daemon.metrics.observe(CheckResult("clf", Verdict.PASS, 1.0, 2.0, baseline_id="clf-new"))
    daemon.metrics.observe(CheckResult("clf", Verdict.PASS, 3.0, 4.0, baseline_id="clf-newer"))
    daemon.metrics.record_missed("clf")
    daemon.metrics.record_skipped("clf")
    s = scrape(daemon.registry)
    assert value(s, "onnxmon_baseline_promotions_total", model="clf") == 2
    assert value(s, "onnxmon_scheduler_missed_runs_total", model="clf") == 1
    assert value(s, "onnxmon_scheduler_skipped_runs_total", model="clf") == 1


def test_metrics_never_touch_the_global_registry(scenario: Scenario, store: Store) -> None:
    from prometheus_client import REGISTRY

    before = set(REGISTRY._names_to_collectors)
    Metrics(CollectorRegistry(), store=store).declare(scenario.settings)
    assert set(REGISTRY._names_to_collectors) == before


# --- the values, as tables -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [
        (Schedule(interval=900), 900),
        (Schedule(interval=60, jitter=30), 90),
        (Schedule(cron="*/5 * * * *"), 300),
        (Schedule(cron="0 */6 * * *", jitter=60), 21660),
        (Schedule(cron="0 9 * * 1-5"), 3 * 86400),  # Friday 09:00 to Monday 09:00
    ],
)
def test_schedule_interval_is_the_longest_gap_between_starts(schedule: Schedule, seconds: float) -> None:
    assert schedule.longest_gap_seconds(now=dt.datetime(2025, 3, 5, tzinfo=dt.UTC)) == seconds


def stats(dtype: str = "float32", atol: float = 1e-3, rtol: float = 0.0, **metrics: Any) -> OutputStats:
    return OutputStats("y", Verdict.PASS, OutputMetrics(**metrics), AppliedTolerance(atol=atol, rtol=rtol), dtype=dtype)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (stats(max_abs_error=0.0), 0.0),
        (stats(max_abs_error=2e-3), 2.0),
        (stats(atol=0.0, max_abs_error=1e-9), math.inf),
        (stats(max_abs_error=1e-4, nan_mismatch_count=1), math.inf),
        (stats(max_abs_error=1e-4, inf_mismatch_count=2), math.inf),
        (stats("int64", mismatch_count=1, max_abs_error=1.0), math.inf),
        (stats("int64", mismatch_count=0), 0.0),
        (stats(rtol=1e-4, max_abs_error=5e-4), math.nan),  # needs the per-element value from compare.py
    ],
)
def test_error_ratio_is_exact_or_nan(output: OutputStats, expected: float) -> None:
    got = output.error_ratio
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_worst_output_ranks_a_nan_error_worst_whatever_the_order() -> None:
    """The log line names the output the store records as the run's worst: NaN is never "smaller"."""
    unknown = dataclasses.replace(stats(max_abs_error=math.nan), name="nan")
    far = dataclasses.replace(stats(max_abs_error=5.0), name="far")
    assert worst_output([unknown, far]) is unknown and worst_output([far, unknown]) is unknown
    assert worst_output([]) is None


def test_runtime_labels_come_from_the_snapshot_fields() -> None:
    snapshot = envsnap.EnvSnapshot(
        {
            "onnxruntime.version": envsnap.Field("1.20.1", True),
            "onnxruntime.package": envsnap.Field("onnxruntime-gpu", True),
            "cuda.runtime.version": envsnap.Field("12.4", True),
            "cuda.cudnn.version": envsnap.Field("9.1.0", True),
            "nvml.driver_version": envsnap.Field("550.54", True),
            "gpu.0.name": envsnap.Field("NVIDIA L4", True),
            "gpu.1.name": envsnap.Field("NVIDIA A100", True),
            "gpu.2.name": envsnap.Field("NVIDIA L4", True),
            "k8s.node": envsnap.Field("gpu-node-3", False),
        }
    ).to_dict()
    assert runtime_info.runtime_labels(snapshot) == {
        "onnxruntime_version": "1.20.1",
        "onnxruntime_package": "onnxruntime-gpu",
        "cuda_version": "12.4",
        "cudnn_version": "9.1.0",
        "driver_version": "550.54",
        "gpu_name": "NVIDIA A100,NVIDIA L4",
        "node": "gpu-node-3",
    }


# --- sinks -----------------------------------------------------------------------------------------


def test_the_log_sink_writes_one_json_line_per_result(scenario: Scenario, caplog: pytest.LogCaptureFixture) -> None:
    sink = LogSink(logging.getLogger("tests.logsink"))
    with caplog.at_level(logging.INFO, logger="tests.logsink"):
        sink.write(scenario.failing)
        sink.write(scenario.no_baseline)
    failing, error = (json.loads(r.getMessage()) for r in caplog.records)
    assert failing["model"] == "clf" and failing["verdict"] == "fail"
    assert "model_changed" in failing["reasons"] and failing["worst_output"]["verdict"] == "fail"
    assert failing["baseline_id"] == scenario.baseline_id and len(failing["environment"]) == 16
    assert error["reasons"] == ["no_baseline"] and error["worst_output"] is None
    assert str(scenario.ws.root) not in caplog.text, "no paths (reason details) in the log line"


def test_the_log_sink_encodes_non_finite_numbers(caplog: pytest.LogCaptureFixture) -> None:
    output = OutputStats("y", Verdict.FAIL, OutputMetrics(max_abs_error=math.inf), AppliedTolerance(1e-5, 1e-4))
    with caplog.at_level(logging.INFO, logger="tests.logsink"):
        LogSink(logging.getLogger("tests.logsink")).write(CheckResult("m", Verdict.FAIL, 0.0, 1.0, outputs=(output,)))
    line = json.loads(caplog.records[0].getMessage())
    assert line["worst_output"]["max_abs_error"] == "Infinity"
