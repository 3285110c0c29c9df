"""One model × its benchmark set → a ``CheckResult``. ``run_check`` never raises.

This is the only module that joins running and comparing: it loads the active baseline,
replays the baseline's benchmark set through a session built exactly as configured,
compares every output, records the environment the numbers came from, and turns every
problem on the way into data: drift is a ``fail`` with reasons, anything that stops the
measurement is an ``error`` with a bounded reason code.

Memory is bounded by one sample, not by the benchmark set: each sample runs (with its
repeats), its baseline outputs are loaded (``Baseline.sample_outputs``), both are fed to a
``outputs.Comparison`` and dropped before the next sample runs. The comparison needs the
baseline's element counts up front (read from the ``.npy`` headers) to size its chunked pass.
The timeout covers the whole check, comparison included: it is one deadline from the start.

Attribution of a failing check, in order of precedence: ``model_changed`` (the model
file hash, or the hash of one of its external-data files, differs from the baseline's),
``benchset_changed``, ``env_changed`` (a stable environment field differs, or a provider fell
back), otherwise ``numeric`` (same stack, different numbers).
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor import exportcheck, modeldiff
from monitor.compare import outputs
from monitor.config.plan import CheckPlan
from monitor.errors import BaselineError, BenchsetError, ConfigError, ModelError, MonitorError
from monitor.files import baselines, benchsets, modelfile
from monitor.results import CheckResult, OutputStats, Reason, Verdict, error_result
from monitor.runtime import envsnap, footprint
from monitor.runtime.kept import FreshModels, ModelSource
from monitor.runtime.session import Deadline, RunTimeout, Session

Clock = Callable[[], float]
EnvCapture = Callable[[], "envsnap.EnvSnapshot"]
SampleSink = Callable[[int, Mapping[str, np.ndarray]], None]

_ERROR_CODES: tuple[tuple[type[MonitorError], str], ...] = (
    (ModelError, "model_error"),
    (BenchsetError, "benchset_error"),
    (BaselineError, "baseline_error"),
    (ConfigError, "config_error"),
)


@dataclass(frozen=True)
class Replay:
    """Raw outputs of one replay: per output, one array per sample (none when streamed), plus repeat spread."""

    outputs: dict[str, list[np.ndarray]]
    spread: dict[str, float]
    seconds: float


def run_check(
    plan: CheckPlan,
    *,
    clock: Clock = time.time,
    capture_env: EnvCapture | None = None,
    models: ModelSource | None = None,
) -> CheckResult:
    """Check ``plan``'s model against its active baseline. Failures become an ``error`` result.

    The plan (``monitor.config.plan.plan_for``) is resolved by the caller, so an unknown model
    name is the caller's usage error, not a check result. A check that could not measure still
    says when the model file is not the baseline's (``with_model_change``). ``models`` gives the
    model's identity and session: fresh by default, kept between checks by a warm worker
    (``runtime.kept.KeptModels``); the benchmark set and the baseline are verified either way.
    """
    result = _run_check(plan, clock=clock, capture_env=capture_env, models=models or FreshModels())
    result = with_model_change(plan, result) if result.verdict is Verdict.ERROR else result
    return exportcheck.with_export_checks(plan, result, clock=clock)  # lint warnings, batch invariance


def with_model_change(plan: CheckPlan, result: CheckResult) -> CheckResult:
    """``result`` plus ``model_changed`` reasons when the model file (or its external data) differs.

    Why: a swapped model usually fails before anything is compared (other inputs, other
    outputs), and "error: model_error" alone hides the cause an on-call engineer needs first.
    Never raises: without a readable baseline or model file there is nothing to add.
    """
    if any(r.code == "model_changed" for r in result.reasons):
        return result
    try:
        baseline = baselines.active(plan.baselines_dir, plan.model.name)
        if baseline is None:
            return result
        identity = modelfile.identify(plan.model.path)
    except Exception:
        return result
    added: list[Reason] = []
    if identity.sha256 != baseline.meta.model_sha256:
        detail = f"{plan.model.path} sha256 {identity.sha256[:12]} != baseline {baseline.meta.model_sha256[:12]}"
        added.append(Reason("model_changed", detail))
    added += external_data_changes(plan.model.path.name, identity.external_data, baseline.meta.external_data)
    if not added:
        return result
    added, described = describe_model_change(added, baseline, plan.model.path)
    details = {**result.details, "model_diff": described}
    return dataclasses.replace(result, reasons=(*result.reasons, *added), model_sha256=identity.sha256, details=details)


def describe_model_change(
    reasons: list[Reason], baseline: baselines.Baseline, path: Path
) -> tuple[list[Reason], dict[str, Any]]:
    """The static diff of the model file against the baseline's manifest, and its summary in the reason.

    The first ``model_changed`` reason gains the diff's summary ("tensor conv1.weight changed,
    read by Conv_3"; "412 initializers float32->float16"); the whole diff (lists capped) goes to
    ``details["model_diff"]`` for the API and the run page. A baseline without a manifest (made
    before manifests existed) or a file ``onnx`` cannot read yields a note, never a failed check.
    """
    try:
        manifest = baseline.document(baselines.MODEL_MANIFEST)
        if manifest is None:
            return reasons, {"note": f"baseline {baseline.id} keeps no model manifest; re-capture to get a diff"}
        diff = modeldiff.diff_against_manifest(manifest, modeldiff.load_model(path), old_name=baseline.id)
    except MonitorError as exc:
        return reasons, {"note": f"no model diff: {exc}"}
    described = diff.to_dict(limit=50)
    if not diff:  # another file with the same graph: re-serialized, or metadata/doc strings edited
        described["summary"] = [
            "same values, nodes and types as the baseline's model: only bytes the diff does not compare"
            " differ (metadata, doc strings, value_info shapes, serialization)"
        ]
    first = next(i for i, r in enumerate(reasons) if r.code == "model_changed")
    summary = "; ".join((*described["summary"], *_named_changes(described)))
    changed = dataclasses.replace(reasons[first], detail=f"{reasons[first].detail}: {summary}"[:2000])
    return [*reasons[:first], changed, *reasons[first + 1 :]], described


def _named_changes(described: Mapping[str, Any], most: int = 3) -> tuple[str, ...]:
    """For a few changed weights, each by name with the nodes that read it: the culprit, by itself."""
    tensors = described.get("changed_tensors", [])
    attributes = described.get("changed_attributes", [])
    if len(tensors) + len(attributes) > most:
        return ()
    named = []
    for tensor in tensors:
        readers = ", ".join(f"{c['node']} ({c['op_type']})" for c in tensor.get("consumers", [])[:most])
        named.append(
            f"{tensor['name']} {tensor.get('status', 'changed')}" + (f", read by {readers}" if readers else "")
        )
    for attribute in attributes:
        named.append(f"attribute {attribute.get('attribute')} of {attribute.get('node')} changed")
    return tuple(named)


def _run_check(plan: CheckPlan, *, clock: Clock, capture_env: EnvCapture | None, models: ModelSource) -> CheckResult:
    started = clock()
    model_name = plan.name
    try:
        return _check(plan, started, clock, capture_env or models.capture_env, models)
    except RunTimeout as exc:
        return error_result(model_name, "timeout", str(exc), started, clock())
    except MonitorError as exc:
        code = next((c for kind, c in _ERROR_CODES if isinstance(exc, kind)), "config_error")
        return error_result(model_name, code, str(exc), started, clock())
    except Exception as exc:  # a bug or an ORT failure: still a verdict, never a crash
        where = traceback.extract_tb(exc.__traceback__)[-1]
        detail = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno}){footprint.cap_note(exc)}"
        code = "run_error" if "onnxruntime" in type(exc).__module__ else "internal_error"
        return error_result(model_name, code, detail, started, clock())


def _check(plan: CheckPlan, started: float, clock: Clock, capture_env: EnvCapture, models: ModelSource) -> CheckResult:
    model = plan.model
    deadline = started + plan.timeout_s
    (files := models.files).begin_check()  # the set's and baseline's tensors: read afresh or kept while unchanged
    identity = models.identify(model.path)
    baseline = baselines.active(plan.baselines_dir, model.name)
    if baseline is None:
        return error_result(
            model.name,
            "no_baseline",
            f"no active baseline for {model.name!r}: run `onnxmon baseline capture {model.name}`",
            started,
            clock(),
        )
    named = (baseline.meta.benchset, baseline.meta.benchset_version)
    bench = benchsets.open_benchset(plan.benchsets_dir, *named, files=files)
    session, reused = models.session(model, identity)
    tolerances = plan.tolerances(session.output_names)
    comparison = outputs.Comparison(
        list(baseline.meta.outputs),
        session.output_names,
        tolerances,
        samples=baseline.meta.sample_count,
        elements=baseline.element_counts(files=files),
        decisions=model.decisions,  # counted per sample beside the metrics (compare/decisions.py)
    )

    def feed(index: int, produced: Mapping[str, np.ndarray]) -> None:
        if index < baseline.meta.sample_count:  # a count mismatch is judged by finish()
            comparison.feed(produced, baseline.sample_outputs(index, files=files))

    replay = replay_benchset(session, bench, plan.repeats, deadline=deadline, clock=clock, each=feed, files=files)
    snapshot = capture_env()
    stats = comparison.finish(len(bench))
    stats = tuple(_with_repeat_spread(o, replay.spread.get(o.name)) for o in stats)

    reasons: list[Reason] = []
    if session.info.fallback:
        reasons.append(
            Reason(
                "provider_fallback",
                f"requested {list(session.info.requested)} but the session runs on {list(session.info.effective)}",
            )
        )
    if identity.sha256 != baseline.meta.model_sha256:
        reasons.append(
            Reason(
                "model_changed",
                f"{model.path} sha256 {identity.sha256[:12]} != baseline {baseline.meta.model_sha256[:12]}",
            )
        )
    reasons.extend(external_data_changes(model.path.name, identity.external_data, baseline.meta.external_data))
    if bench.sha256 != baseline.meta.benchset_sha256:
        reasons.append(
            Reason(
                "benchset_changed",
                f"benchset {bench.name} v{bench.version} sha256 {bench.sha256[:12]}"
                f" != baseline {baseline.meta.benchset_sha256[:12]}",
            )
        )
    # A reference fed other inputs than the benchmark set (BGR vs RGB, another mean/std): say so first.
    reasons.extend(Reason("input_mismatch", detail) for detail in baseline.input_mismatches())
    env_changes = _env_changes(baseline.meta.environment, snapshot)
    verdict = Verdict.worst([o.verdict for o in stats] + ([Verdict.FAIL] if reasons else []))
    details: dict[str, Any] = {
        "session": session.info.to_dict(),
        "model": identity.to_dict(),
        "benchset_version": bench.version,
        "env_diff": env_changes,
        "baseline_source": baseline.meta.source,  # a reference is the framework's numbers, not ORT's
    }
    details.update({"input_casts": dict(session.input_casts)} if session.input_casts else {})
    details.update({"warm": kept} if (kept := models.note()) is not None else {})
    if any(r.code == "model_changed" for r in reasons):
        reasons, details["model_diff"] = describe_model_change(reasons, baseline, model.path)
    current = _current_benchset_version(plan, files)
    if current is not None and current != bench.version:
        details["benchset_note"] = (
            f"benchset {bench.name} has a newer version v{current}; the baseline uses v{bench.version}."
            f" Re-capture to adopt it: onnxmon baseline capture {model.name}"
        )
    return CheckResult(
        model=model.name,
        verdict=verdict,
        started_at=started,
        finished_at=clock(),
        reasons=tuple(reasons),
        outputs=stats,
        baseline_id=baseline.id,
        model_sha256=identity.sha256,
        benchset=bench.name,
        benchset_sha256=bench.sha256,
        providers_requested=session.info.requested,
        providers_effective=session.info.effective,
        sample_count=len(bench),
        # load_s is this check's own session build: 0 when a warm worker reused its session
        timings={"load_s": 0.0 if reused else session.info.load_seconds, "replay_s": replay.seconds},
        environment=snapshot.to_dict(),
        attribution=attribute(verdict, reasons, env_changes),
        details=details,
    )


def external_data_changes(model_file: str, now: Mapping[str, str], before: Mapping[str, str]) -> list[Reason]:
    """One ``model_changed`` reason per external-data file whose sha256 differs from the baseline's.

    A model saved with external data keeps its weights beside the ``.onnx``: an edited weight
    file leaves the ``.onnx`` hash unchanged, so each file is compared on its own and named.
    A file the model newly references, or no longer references, is a change too.
    """
    reasons = []
    for location in sorted(set(now) | set(before)):
        old, new = before.get(location), now.get(location)
        if old == new:
            continue
        if old is None:
            detail = f"{model_file} now references external data {location} (not in the baseline)"
        elif new is None:
            detail = f"{model_file} no longer references external data {location} (the baseline's had it)"
        else:
            detail = f"external data {location} of {model_file} sha256 {new[:12]} != baseline {old[:12]}"
        reasons.append(Reason("model_changed", detail))
    return reasons


def attribute(verdict: Verdict, reasons: list[Reason], env_changes: list[dict[str, Any]]) -> str | None:
    """Why a failing check failed, by precedence; None unless the verdict is ``fail``."""
    if verdict is not Verdict.FAIL:
        return None
    codes = {r.code for r in reasons}
    for code in ("model_changed", "benchset_changed", "input_mismatch"):  # input_mismatch: fed differently
        if code in codes:
            return code
    if "provider_fallback" in codes or any(c.get("stable") for c in env_changes):
        return "env_changed"
    return "numeric"


def replay_benchset(
    session: Session,
    bench: benchsets.Benchset,
    repeats: int,
    *,
    deadline: float | None = None,
    clock: Clock = time.time,
    each: SampleSink | None = None,
    files: benchsets.TensorFiles = benchsets.FRESH,
) -> Replay:
    """Run every sample ``repeats`` times (inputs read through ``files``); keep the first run and the spread.

    With ``each``, a sample's first-run outputs go to ``each(index, outputs)`` as soon as it has
    run and are not kept (``Replay.outputs`` stays empty): memory holds one sample, not the set.
    ``Replay.seconds`` counts the replay only, not the time spent in ``each``.
    """
    produced: dict[str, list[np.ndarray]] = {name: [] for name in session.output_names}
    spread: dict[str, float] = {}
    began = time.perf_counter()
    elsewhere = 0.0
    with Deadline(_remaining(deadline, clock)) as guard:
        for index in range(len(bench)):
            feeds = bench.load_sample(index, files=files)
            where = f"benchset {bench.name!r} sample {index}"
            runs = [session.run(feeds, guard=guard, where=where) for _ in range(repeats)]
            for name in session.output_names:
                if repeats > 1:
                    spread[name] = max(spread.get(name, 0.0), outputs.repeat_spread([r[name] for r in runs]))
                if each is None:
                    produced[name].append(runs[0][name])
            if each is not None:
                handed = time.perf_counter()
                first = runs[0]
                del feeds, runs  # the sink holds the only reference from here on
                each(index, first)
                del first
                elsewhere += time.perf_counter() - handed
    return Replay(outputs=produced, spread=spread, seconds=time.perf_counter() - began - elsewhere)


def _remaining(deadline: float | None, clock: Clock) -> float | None:
    if deadline is None:
        return None
    left = deadline - clock()
    if left <= 0:
        raise RunTimeout("check exceeded its timeout before all samples ran")
    return left


def _with_repeat_spread(stats: OutputStats, spread: float | None) -> OutputStats:
    """Attach run-to-run spread; a spread above the output's atol fails it as nondeterministic."""
    if spread is None:
        return stats
    metrics = dataclasses.replace(stats.metrics, nondeterminism_max_abs=spread)
    if spread <= stats.tolerance.atol:
        return dataclasses.replace(stats, metrics=metrics)
    detail = f"repeats differ by up to {spread:.3g} (> atol {stats.tolerance.atol:g})"
    reasons = (*stats.reasons, Reason("nondeterministic", detail, stats.name))
    verdict = Verdict.worst([stats.verdict, Verdict.FAIL])
    return dataclasses.replace(stats, metrics=metrics, reasons=reasons, verdict=verdict)


def _env_changes(baseline_env: Mapping[str, Any], snapshot: envsnap.EnvSnapshot) -> list[dict[str, Any]]:
    if not baseline_env.get("fingerprint"):
        return []
    return [c.to_dict() for c in envsnap.diff(envsnap.EnvSnapshot.from_dict(dict(baseline_env)), snapshot)]


def _current_benchset_version(plan: CheckPlan, files: benchsets.TensorFiles) -> int | None:
    try:
        return benchsets.open_benchset(plan.benchsets_dir, plan.model.benchset, files=files).version
    except MonitorError:
        return None
