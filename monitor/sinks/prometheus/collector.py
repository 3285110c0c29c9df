"""``StoreCollector``: the last-run gauges of ``docs/metrics.md``, computed at scrape time.

Each scrape reads the store (each model's last run, the stored diagnoses of those that did not
pass, every model's recent window: a fixed number of statements whatever the number of models),
the current config and the active baselines on disk, so the gauges survive a restart and never
drift from the history. Nothing of a scrape is kept for the next one but the tolerances a config
resolves to (``_tolerance``, held with that config). A store that fails costs these gauges, not
the scrape: ``onnxmon_store_up`` turns 0 and the counters of
``monitor.sinks.prometheus.counters.Metrics`` are still served. ``install`` wires both halves, and
the client's ``process_*`` and ``python_info`` collectors, into a registry; ``/metrics`` is the
client's own rendering of it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from monitor.config.settings import ModelConfig, Settings
from monitor.results import CAUSE_CODES, AppliedTolerance, Verdict, fingerprint_of
from monitor.sinks.prometheus import label_values, last_run_info, runtime_info
from monitor.sinks.prometheus.counters import VERDICTS, Clock, Metrics
from monitor.sinks.prometheus.model_states import ModelState
from monitor.store import RECENT_RUNS, RecentState, RunRecord, Store, incidents, pick_latest

log = logging.getLogger(__name__)
BASELINE_LABELS = ("model", "baseline_id", "source", "environment")


class StoreCollector(Collector):
    """Latest-value gauges, computed at scrape time from one store read plus config and disk."""

    def __init__(self, metrics: Metrics, store: Store) -> None:
        self.metrics = metrics
        self.store = store
        self._tolerances: tuple[Settings | None, dict[tuple[str, str], AppliedTolerance]] = (None, {})

    def describe(self) -> Iterable[Metric]:
        # Describing without samples keeps registration from querying the store.
        return list(_Families().all())

    def collect(self) -> Iterable[Metric]:
        """Every family of the store gauges, read now from the store, the config and the disk."""
        families = _Families()
        try:
            latest: dict[str, RunRecord] | None = pick_latest(self.store.latest_per_model(), self.metrics.node)
            families.store_up.add_metric([], 1.0)
        except Exception as exc:  # never fail a scrape for the store: say so and serve the rest
            log.warning("store unreachable at scrape time: %s", exc)
            latest = None
            families.store_up.add_metric([], 0.0)
        settings = self.metrics.settings
        if settings is None:
            return list(families.all())
        states = self.metrics.states()
        scrape = _Scrape(
            settings,
            latest,
            self._causes(latest),
            self._recent(latest, [model.name for model in settings.models if model.name in states]),
            fingerprint_of(self.metrics.environment),
        )
        runtime = runtime_info.runtime_labels(self.metrics.environment)
        families.runtime_info.add_metric([runtime[k] for k in runtime_info.RUNTIME_LABELS], 1.0)
        for model in settings.models:
            state = states.get(model.name)
            if state is not None:
                self._model(families, scrape, model, state)
        return list(families.all())

    def _causes(self, latest: dict[str, RunRecord] | None) -> dict[int, str] | None:
        """The stored diagnoses' causes of the last runs that did not pass (one query, none when all pass).

        A diagnosis lands after its run (``daemon/attach.py``). None when the store cannot say.
        """
        failing = [r.id for r in (latest or {}).values() if r.verdict is not Verdict.PASS]
        if not failing:
            return {}
        try:
            return incidents.causes(self.store, failing)
        except Exception as exc:  # the run's own details still answer; the scrape goes on
            log.warning("store unreachable reading the diagnoses: %s", exc)
            return None

    def _recent(self, latest: dict[str, RunRecord] | None, models: list[str]) -> dict[str, RecentState] | None:
        """The store's count of each model's last runs, on its last run's node (one read per node).

        A model that never ran has an empty window; None when the store cannot answer (no values
        rather than wrong ones; the scrape still answers).
        """
        if latest is None:
            return None
        by_node: dict[str | None, list[str]] = {}
        for name in models:
            last = latest.get(name)
            if last is not None:
                by_node.setdefault(last.node, []).append(name)
        found = {name: RecentState() for name in models if name not in latest}
        try:
            for node, names in by_node.items():
                found.update(self.store.recent_states(names, node))
        except Exception as exc:
            log.warning("store unreachable reading the recent runs: %s", exc)
            return None
        return found

    def _tolerance(self, settings: Settings, model: ModelConfig, output: str) -> AppliedTolerance:
        """``settings.tolerance_for`` (pydantic merges, ~0.1 ms each) computed once per config."""
        if self._tolerances[0] is not settings:
            self._tolerances = (settings, {})
        key = (model.name, output)
        cache = self._tolerances[1]
        if key not in cache:
            cache[key] = settings.tolerance_for(model, output)
        return cache[key]

    def _model(self, f: _Families, scrape: _Scrape, model: ModelConfig, state: ModelState) -> None:
        """The model's series in every family: the config's, the disk's, and (store answering) its last run's.

        One labels dict per model and one per output serve every family they label (the client keeps
        the dict it is given): a scrape at 200 models holds thousands of samples at once, and the
        fewer objects it allocates, the less of it goes to the garbage collector.
        """
        settings, latest, name = scrape.settings, scrape.latest, model.name
        own = {"model": name}
        per_output = {output: {"model": name, "output": output} for output in state.outputs}
        meta = self.metrics.active_baseline(settings.store.baselines_dir, name)
        _add(f.model_info, {"model": name, "model_sha256": state.facts.sha256, "opset": state.facts.opset}, 1.0)
        baseline_labels = (
            [name, meta.id, label_values.baseline_source_label(meta.source), (meta.environment_fingerprint or "")[:16]]
            if meta
            else [name, "", "none", ""]
        )
        _add(f.baseline_info, dict(zip(BASELINE_LABELS, baseline_labels, strict=True)), 1.0)
        _add(f.interval, own, state.interval)
        for output, labels in per_output.items():
            tolerance = self._tolerance(settings, model, output)
            _add(f.atol, labels, tolerance.atol)
            _add(f.rtol, labels, tolerance.rtol)
            _add(f.max_mismatch, labels, tolerance.max_mismatch_ratio)
        if latest is None:
            return  # store down: no last-run values rather than wrong ones
        last = latest.get(name)
        _add(f.last_run, own, last.finished_at.timestamp() if last is not None else self.metrics.started_at)
        success = state.last_success
        if last is not None and last.verdict is Verdict.PASS:
            success = max(success, last.finished_at.timestamp())
        _add(f.last_success, own, success)
        _add(f.last_success_flag, own, 1.0 if last is not None and last.verdict is Verdict.PASS else 0.0)
        for verdict in VERDICTS:
            flag = 1.0 if last is not None and last.verdict == verdict else 0.0
            _add(f.last_verdict, {"model": name, "verdict": verdict}, flag)
        fallback = (
            label_values.provider_fallback(last.providers_requested, last.providers_effective, last.reasons)
            if last is not None
            else None
        )
        _add(f.fallback, own, state.fallback if fallback is None else fallback)
        cause = diagnosed_cause(last, scrape.causes)
        _add(f.diagnosis, {"model": name, "cause": cause}, 1.0)
        recent = scrape.recent.get(name) if scrape.recent is not None else None
        likely = _likely_cause(last, cause, recent)
        info = last_run_info.labels(name, last, likely)
        _add(f.last_run_info, dict(zip(last_run_info.LABELS, info, strict=True)), 1.0)
        run_fingerprint = (last.environment_fingerprint if last is not None else None) or scrape.env_fingerprint
        matches = meta is not None and run_fingerprint is not None and run_fingerprint == meta.environment_fingerprint
        _add(f.env_matches, own, 1.0 if matches else 0.0)
        if recent is not None:
            _add(f.recent_runs, own, float(recent.runs))
            _add(f.recent_errors, own, float(recent.errors))
            _add(f.recent_failed, own, float(recent.failed))
            for output, labels in per_output.items():
                _add(f.recent_failing, labels, float(recent.failing.get(output, 0)))
            _add(f.env_changed_at, own, _timestamp(recent.environment_changed_at))
            _add(f.promoted_at, own, _timestamp(recent.baseline_promoted_at))
        measured = {o.name: o for o in last.outputs} if last is not None and last.verdict is not Verdict.ERROR else {}
        for output, labels in per_output.items():
            stats = measured.get(output)
            if stats is None or not stats.is_measured:
                for family in f.per_output_values():
                    _add(family, labels, math.nan)
                continue
            m = stats.metrics
            _add(f.max_abs, labels, m.max_abs_error)
            _add(f.max_rel, labels, m.max_rel_error)
            _add(f.rms, labels, m.rms_error)
            _add(f.cosine, labels, m.cosine_similarity)
            _add(f.mismatch, labels, m.mismatch_ratio)
            _add(f.nondeterministic, labels, 1.0 if stats.is_nondeterministic else 0.0)
            _add(f.error_over_tolerance, labels, stats.error_ratio)
            _add(f.error_ratio, labels, stats.error_ratio)
        for output in model.decisions:  # only what the config says is decided: bounded, and NaN until measured
            stats = measured.get(output)
            labels = per_output.get(output) or {"model": name, "output": output}
            decided = stats.decisions if stats is not None else None
            _add(f.decisions_flipped, labels, decided.ratio if decided is not None else math.nan)
            warned = 1.0 if stats is not None and stats.warnings else 0.0 if stats is not None else math.nan
            _add(f.numeric_warning, labels, warned)


def _add(family: Metric, labels: dict[str, str], value: float) -> None:
    """One sample of ``family``, labelled by ``labels`` as given (``Metric.samples`` holds the client's ``Sample``)."""
    family.samples.append(Sample(family.name, labels, value))


def _timestamp(when: datetime | None) -> float:
    return when.timestamp() if when is not None else 0.0


def _likely_cause(last: RunRecord | None, cause: str, recent: RecentState | None) -> str:
    """What a page names as the likely cause: the last run's own diagnosis, else the newest of the alert's
    window (``RecentState.cause``: a fail's diagnosis lands after the run, and the page fires on a later one)."""
    if cause != "none" or last is None or last.verdict is Verdict.PASS or recent is None:
        return cause
    return recent.cause if recent.cause in CAUSE_CODES else "none"


def diagnosed_cause(last: RunRecord | None, causes: Mapping[int, str] | None = None) -> str:
    """The first hypothesis of the last run's newest stored diagnosis: a ``CAUSE_CODES`` value, else ``none``.

    From the ``diagnoses`` rows (``causes``, by run id); when the store could not say (None), from
    a diagnosis the run's own details carry. The label stays within the closed set plus ``none``.
    """
    if last is None or last.verdict is Verdict.PASS:
        return "none"
    if causes is not None:
        cause = causes.get(last.id)
        return cause if cause in CAUSE_CODES else "none"
    document = last.details.get("diagnosis")
    hypotheses = document.get("hypotheses") if isinstance(document, dict) else None
    cause = (
        hypotheses[0].get("cause")
        if isinstance(hypotheses, list) and hypotheses and isinstance(hypotheses[0], dict)
        else None
    )
    return cause if cause in CAUSE_CODES else "none"


@dataclass(frozen=True)
class _Scrape:
    """What one scrape read once for every model."""

    settings: Settings
    latest: dict[str, RunRecord] | None
    """Each model's last run on this node; None when the store did not answer."""
    causes: dict[int, str] | None
    """The stored diagnoses' causes by run id (``_causes``); None when the store could not say."""
    recent: dict[str, RecentState] | None
    """Each model's recent window (``_recent``); None when the store could not say."""
    env_fingerprint: str | None


class _Families:
    """One empty metric family per collector-made series, per scrape."""

    def __init__(self) -> None:
        def gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels or [])

        model, output = ["model"], ["model", "output"]
        self.store_up = gauge("onnxmon_store_up", "1 when the history store answered this scrape.")
        self.runtime_info = gauge(
            "onnxmon_runtime_info",
            "Always 1; the stack checks run on.",
            list(runtime_info.RUNTIME_LABELS),
        )
        self.model_info = gauge(
            "onnxmon_model_info", "Always 1; the model file checked.", ["model", "model_sha256", "opset"]
        )
        self.baseline_info = gauge("onnxmon_baseline_info", "Always 1; the active baseline.", list(BASELINE_LABELS))
        self.interval = gauge("onnxmon_schedule_interval_seconds", "Longest time between two scheduled starts.", model)
        self.last_run = gauge("onnxmon_last_run_timestamp_seconds", "Unix time the last run finished.", model)
        self.last_success = gauge("onnxmon_last_success_timestamp_seconds", "Unix time of the last pass.", model)
        self.last_success_flag = gauge("onnxmon_last_run_success", "1 when the last run passed.", model)
        self.last_verdict = gauge("onnxmon_last_run_verdict", "1 on the last run's verdict.", ["model", "verdict"])
        self.fallback = gauge("onnxmon_provider_fallback", "1 when a requested provider is not in use.", model)
        self.env_matches = gauge(
            "onnxmon_environment_matches_baseline", "1 when the environment equals the baseline's.", model
        )
        self.env_changed_at = gauge(
            "onnxmon_environment_changed_timestamp_seconds",
            "Unix time the environment last differed from the previous run's (from the store); 0 never.",
            model,
        )
        self.promoted_at = gauge(
            "onnxmon_baseline_promoted_timestamp_seconds",
            "Unix time a baseline of the model was last promoted (from the store); 0 never.",
            model,
        )
        self.recent_runs = gauge(
            "onnxmon_recent_runs",
            f"Runs the recent window holds (the model's last {RECENT_RUNS}, from the store).",
            model,
        )
        self.recent_errors = gauge(
            "onnxmon_recent_error_runs", "Runs of the recent window that ended in error (from the store).", model
        )
        self.recent_failed = gauge(
            "onnxmon_recent_failing_runs",
            "Runs of the recent window that ended in verdict fail, any reason (from the store).",
            model,
        )
        self.recent_failing = gauge(
            "onnxmon_output_recent_failing_runs",
            "Runs of the recent window in which the output was out of tolerance (from the store).",
            output,
        )
        self.diagnosis = gauge(
            "onnxmon_diagnosis_info",
            "Always 1; the most likely cause of the last run's diagnosis ('none' without one).",
            ["model", "cause"],
        )
        self.last_run_info = gauge(
            "onnxmon_last_run_info",
            "Always 1; why the last run ended as it did: reason, attribution, likely cause, error / tolerance"
            " bucket, environment fields changed against the baseline ('none' for each that does not apply).",
            list(last_run_info.LABELS),
        )
        self.max_abs = gauge("onnxmon_output_max_abs_error", "max |a-b|.", output)
        self.max_rel = gauge("onnxmon_output_max_rel_error", "max |a-b| / max(|b|, floor).", output)
        self.rms = gauge("onnxmon_output_rms_error", "sqrt(mean((a-b)^2)).", output)
        self.cosine = gauge("onnxmon_output_cosine_similarity", "Cosine similarity to the baseline.", output)
        self.mismatch = gauge("onnxmon_output_mismatch_ratio", "Share of elements breaking the rule.", output)
        self.nondeterministic = gauge("onnxmon_output_nondeterministic", "1 when repeats disagreed.", output)
        self.error_over_tolerance = gauge(
            "onnxmon_output_error_over_tolerance", "Worst error / tolerance; 1.0 is the line (not a 0-1 ratio).", output
        )
        self.error_ratio = gauge(
            "onnxmon_output_error_ratio",
            "DEPRECATED, removed in the next release: use onnxmon_output_error_over_tolerance (the same value).",
            output,
        )
        self.decisions_flipped = gauge(
            "onnxmon_output_decisions_flipped_ratio",
            "Share of the output's decisions (models[].decisions) that differ from the baseline's.",
            output,
        )
        self.numeric_warning = gauge(
            "onnxmon_output_numeric_warning",
            "1 when the last run's numeric drift of a decided output flipped no decision (tolerance.numeric: warn).",
            output,
        )
        self.atol = gauge("onnxmon_output_tolerance_atol", "Applied atol.", output)
        self.rtol = gauge("onnxmon_output_tolerance_rtol", "Applied rtol.", output)
        self.max_mismatch = gauge("onnxmon_output_tolerance_max_mismatch_ratio", "Applied max_mismatch_ratio.", output)

    def per_output_values(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            self.max_abs,
            self.max_rel,
            self.rms,
            self.cosine,
            self.mismatch,
            self.nondeterministic,
            self.error_over_tolerance,
            self.error_ratio,
        )

    def all(self) -> Iterator[GaugeMetricFamily]:
        yield from (v for v in vars(self).values() if isinstance(v, GaugeMetricFamily))


def install(
    registry: CollectorRegistry | None,
    store: Store,
    settings: Settings,
    *,
    node: str | None = None,
    startup_environment: Mapping[str, Any] | None = None,
    clock: Clock = time.time,
) -> Metrics:
    """Wire the counters and the store collector into ``registry`` and declare ``settings``' series.

    ``registry=None`` makes a fresh one (never the process-global default registry); it is
    ``metrics.registry`` afterwards.
    """
    registry = registry if registry is not None else CollectorRegistry()
    # `<name>_created` doubles every counter/histogram child and nothing reads it (process-wide switch).
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = Metrics(registry, store=store, node=node, clock=clock, startup_environment=startup_environment)
    metrics.declare(settings)
    collector = StoreCollector(metrics, store)
    registry.register(collector)
    # The client's process_* (CPU, memory, file descriptors, start time; read from /proc at each
    # scrape, none where there is no /proc) and python_info: on this registry, not the global one.
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return metrics
