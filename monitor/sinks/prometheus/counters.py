"""The Prometheus series of ``docs/metrics.md``: counters kept in memory, last-run gauges read from the store.

Two halves, both living in one injected ``CollectorRegistry`` (never the global one):

* ``Metrics`` owns what only this process can count (runs, failures by reason, durations, output
  checks, environment changes, promotions, missed/skipped runs, config reloads, build info).
  ``declare(settings)`` creates every labelled child when the config loads, so every series
  exists from the first scrape at 0; ``observe(result)`` moves them after each check.
* ``StoreCollector`` (``monitor/sinks/prometheus/collector.py``) answers each scrape from the store
  (a fixed number of queries), the current config and the files on disk, so the last-run
  gauges survive a restart and never drift from the history. A store that fails at scrape time
  costs those gauges, not the scrape: ``onnxmon_store_up`` turns 0 and the counters are served.

What ``Metrics`` remembers of each model (its outputs, facts, active baseline, last success) is read
from the config, the disk and the store by ``model_states.ModelStates``; ``Metrics`` counts. An
output none of those sources names appears once a run has seen it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from monitor import __version__
from monitor.config.settings import ModelConfig, Settings
from monitor.files import baseline_meta
from monitor.results import CheckResult, Verdict
from monitor.sinks.prometheus import label_values, model_counts, since_start
from monitor.sinks.prometheus.fleet_gauges import FleetGauges
from monitor.sinks.prometheus.model_states import ModelState, ModelStates
from monitor.store import RunRecord, Store, pick_latest

log = logging.getLogger(__name__)

Clock = Callable[[], float]
# Five of the ten buckets there were (so a query naming one of them still finds it), chosen for check
# durations: a small model's check, a large one's, a slow one, a first-session build, the long tail.
# Each bucket is a series per model: 13 series per model were a fifth of a 200-model scrape, now 8.
DURATION_BUCKETS = (0.5, 2.5, 10.0, 60.0, 300.0)
VERDICTS = tuple(v.value for v in Verdict)


class Metrics:
    """Counters of runs and their outcomes, and the per-model state the collector needs."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        store: Store | None = None,
        node: str | None = None,
        clock: Clock = time.time,
        version: str = __version__,
        startup_environment: Mapping[str, Any] | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.node = node
        self.clock = clock
        self.started_at = clock()
        self.settings: Settings | None = None
        self.environment: Mapping[str, Any] = dict(startup_environment or {})
        self._models = ModelStates(store, node)
        self._states = self._models.by_name
        self._lock = threading.RLock()
        r = registry
        counts = model_counts.ModelCounts()  # the labelled counters: one collector over plain numbers
        self.runs = counts.counter("onnxmon_runs", "Runs finished, any verdict.", ["model"])
        self.run_failures = counts.counter(
            "onnxmon_run_failures", "Runs not passing, by primary reason.", ["model", "reason"]
        )
        self.run_errors = counts.counter(
            "onnxmon_run_errors", "Runs that ended in error: precision was not measured.", ["model"]
        )
        self.out_of_tolerance = counts.counter(
            "onnxmon_output_out_of_tolerance", "Runs in which the output failed.", ["model", "output"]
        )
        self.output_checks = counts.counter(
            "onnxmon_output_checks", "Runs in which the output was compared.", ["model", "output"]
        )
        self.environment_changes = counts.counter(
            "onnxmon_environment_changes", "Runs whose environment differs from the previous run.", ["model"]
        )
        self.baseline_promotions = counts.counter(
            "onnxmon_baseline_promotions", "New active baselines seen for the model.", ["model"]
        )
        self.missed_runs = counts.counter(
            "onnxmon_scheduler_missed_runs", "Runs not started: start time passed the grace time.", ["model"]
        )
        self.skipped_runs = counts.counter(
            "onnxmon_scheduler_skipped_runs", "Runs not started: the previous one was still going.", ["model"]
        )
        self.backed_off_runs = counts.counter(
            "onnxmon_scheduler_backed_off_runs",
            "Runs not started: the model is backed off after runs that could not run (not an overlap).",
            ["model"],
        )
        self.session_builds = counts.counter("onnxmon_worker_session_builds", "Sessions workers built.", ["model"])
        self.run_duration = counts.histogram(
            "onnxmon_run_duration_seconds", "Wall time of a run.", ["model"], buckets=DURATION_BUCKETS
        )
        # every model's series from its declaration on (run_failures{reason} and the outputs' apart)
        self._per_model: tuple[model_counts.Counts | model_counts.Histograms, ...] = (
            self.runs,
            self.run_errors,
            self.environment_changes,
            self.baseline_promotions,
            self.missed_runs,
            self.skipped_runs,
            self.backed_off_runs,
            self.session_builds,
            self.run_duration,
        )
        r.register(counts)
        self.fleet = FleetGauges(r)  # this node's place in the fleet vote, set by the daemon after its own vote
        self.reload_ok = Gauge(
            "onnxmon_config_last_reload_successful", "1 when the last config (re)load succeeded.", registry=r
        )
        self.reload_timestamp = Gauge(
            "onnxmon_config_last_reload_success_timestamp_seconds", "Unix time of the last good (re)load.", registry=r
        )
        self.spooled = Gauge("onnxmon_results_spooled", "Results waiting on disk for the history database.", registry=r)
        # the history sink's counts since start: counters, and their old gauge names for one release
        self.since_start = since_start.SinceStart()
        r.register(self.since_start)
        Gauge("onnxmon_build_info", "Always 1; the onnxmon version.", ["version"], registry=r).labels(version).set(1)
        self.reload_ok.set(1)
        self.reload_timestamp.set(self.started_at)

    # --- configuration -------------------------------------------------------------------------

    def declare(self, settings: Settings) -> None:
        """Create the children of every configured model/output/reason; drop those of models that left."""
        latest = pick_latest(self._models.latest_runs(), self.node)
        with self._lock:
            first = self.settings is None
            for model in settings.models:
                self._declare_model(settings, model, latest.get(model.name), first)
            for gone in set(self._states) - {m.name for m in settings.models}:
                self._forget(gone)
            self.settings = settings

    def _declare_model(self, settings: Settings, model: ModelConfig, last: RunRecord | None, first: bool) -> None:
        declared = self._models.declare(settings, model, last, first)
        name = model.name
        if declared.promoted:
            self.baseline_promotions.inc(name)
        for gone in declared.gone_outputs:
            self._remove_output(name, gone)
        for per_model in self._per_model:
            per_model.declare(name)
        # run_failures{reason} children appear with their first run: 23 reasons x every model
        # pre-declared were 30 % of a 200-model scrape. Alerts use the pre-declared run_errors.
        for output in declared.state.outputs:
            self.out_of_tolerance.declare(name, output)
            self.output_checks.declare(name, output)

    def _forget(self, model: str) -> None:
        state = self._models.forget(model)
        for output in state.outputs:
            self._remove_output(model, output)
        for per_model in self._per_model:
            per_model.remove(model)
        for reason in state.reasons_seen:
            self.run_failures.remove(model, reason)
        self.fleet.forget(model)

    def _remove_output(self, model: str, output: str) -> None:
        self.out_of_tolerance.remove(model, output)
        self.output_checks.remove(model, output)

    def config_reloaded(self, ok: bool) -> None:
        """Record a config (re)load; a failed one keeps the previous config and its series."""
        self.reload_ok.set(1 if ok else 0)
        if ok:
            self.reload_timestamp.set(self.clock())

    # --- events ----------------------------------------------------------------------------------

    def observe(self, result: CheckResult) -> None:
        """Move the counters for one finished run; a model not in the config is ignored (bounded labels)."""
        with self._lock:
            state = self._states.get(result.model)
            if state is None:
                log.warning("result for model %r, which is not in the config: not exported", result.model)
                return
            name = result.model
            self.runs.inc(name)
            self.run_duration.observe(name, value=max(0.0, result.duration_s))
            if result.verdict is Verdict.ERROR:
                self.run_errors.inc(name)
            if isinstance(worker := result.details.get("worker"), Mapping) and worker.get("session_built") is True:
                self.session_builds.inc(name)
            if result.verdict is not Verdict.PASS:
                reason = label_values.primary_reason(result)
                state.reasons_seen.add(reason)
                self.run_failures.inc(name, reason)
            else:
                state.last_success = max(state.last_success, result.finished_at)
            if result.verdict is not Verdict.ERROR:
                for output in result.outputs:
                    if output.name not in state.outputs:
                        state.outputs.append(output.name)
                    if output.is_measured:
                        self.output_checks.inc(name, output.name)
                    if output.verdict is Verdict.FAIL:
                        self.out_of_tolerance.inc(name, output.name)
            fingerprint = result.environment_fingerprint
            if fingerprint:
                if state.fingerprint and fingerprint != state.fingerprint:
                    self.environment_changes.inc(name)
                state.fingerprint = fingerprint
                self.environment = dict(result.environment)
            if result.baseline_id:
                if state.baseline_id and result.baseline_id != state.baseline_id:
                    self.baseline_promotions.inc(name)
                state.baseline_id = result.baseline_id
            fallback = label_values.provider_fallback(
                result.providers_requested, result.providers_effective, result.all_reasons()
            )
            if fallback is not None:
                state.fallback = fallback
            identity = result.details.get("model")
            if isinstance(identity, Mapping) and identity.get("sha256"):
                opset = identity.get("opset")
                state.facts = replace(
                    state.facts, sha256=str(identity["sha256"]), opset="" if opset is None else str(opset)
                )

    def record_missed(self, model: str) -> None:
        """A scheduled run was not started because its start time passed beyond the grace time."""
        if model in self._states:
            self.missed_runs.inc(model)

    def record_skipped(self, model: str) -> None:
        """A scheduled run was not started because the previous run of the model was still going."""
        if model in self._states:
            self.skipped_runs.inc(model)

    def record_backed_off(self, model: str) -> None:
        """A scheduled run was not started because the model is backed off (``monitor/daemon/backoff.py``)."""
        if model in self._states:
            self.backed_off_runs.inc(model)

    def baseline_promoted(self, model: str, baseline_id: str | None = None) -> None:
        """Count a promotion now; with ``baseline_id`` the next run on it is not counted a second time."""
        with self._lock:
            state = self._states.get(model)
            if state is None or (baseline_id is not None and baseline_id == state.baseline_id):
                return
            self.baseline_promotions.inc(model)
            if baseline_id is not None:
                state.baseline_id = baseline_id

    # --- reads for the collector ---------------------------------------------------------------

    def states(self) -> dict[str, ModelState]:
        """A copy of every configured model's state, in config order."""
        with self._lock:
            return self._models.copies()

    def active_baseline(self, root: Path, model: str) -> baseline_meta.BaselineMeta | None:
        """The active baseline's metadata (``active_baselines.py``: ACTIVE re-read when it moves)."""
        return self._models.active_baseline(root, model)
