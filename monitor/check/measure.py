"""One check's steps, in order: open what it compares, replay and compare, say why, assemble the result.

- ``open_inputs``: the model's identity, the active baseline, its benchmark set and the session
  (the session and the model file's digests as the check worker keeps them:
  ``runtime/worker_state.py``; everything else read afresh); no baseline is a result;
- ``measure``: the replay through the session, each sample's outputs compared with the
  baseline's as soon as they exist (``Comparison``), the environment snapshot, the
  repeat spread; the timeout covers it all, comparison included: one deadline from the start;
- ``reasons_of``: what differs from the baseline besides the numbers (provider fallback, model,
  external data, benchmark set, the reference's inputs);
- ``details_of``: what the run page and the API show beside the verdict;
- with ``checks.concurrency``, the same session from threads at once against the serial answers
  (``concurrency.py``);
- ``assemble``: the ``CheckResult``, from what was opened, measured and judged (``Judged``: the verdict,
  its reasons, the environment's changes, the details).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from monitor.check.concurrency import SerialDigests, check_concurrency
from monitor.check.reasons import attribute, describe_model_change, external_data_changes
from monitor.check.reasons import env_changes as environment_changes
from monitor.check.replay import Clock, Replay, replay_benchset, with_repeat_spread
from monitor.check.served import measure_served
from monitor.compare.accumulate import Comparison
from monitor.compare.digest import DigestAccumulator, run_digest
from monitor.config.plan import CheckPlan
from monitor.details import Details, EnvChange
from monitor.errors import MonitorError
from monitor.files import baselines, benchsets, modelfile
from monitor.results import CheckResult, OutputDigest, OutputStats, Reason, Verdict, error_result
from monitor.runtime import envsnap, stackkey
from monitor.runtime.session import Session
from monitor.runtime.worker_state import WorkerState
from monitor.serving import metadata

EnvCapture = Callable[[], "envsnap.EnvSnapshot"]


@dataclass(frozen=True)
class Opened:
    """What a check compares: the model file's identity, its session, the baseline and its benchmark set."""

    identity: modelfile.ModelIdentity
    baseline: baselines.Baseline
    bench: benchsets.Benchset
    session: Session
    built: bool  # the session was built for this check (not kept by the worker from an earlier one)


@dataclass(frozen=True)
class Measured:
    """The numbers: each output's stats (repeat spread included), the replay's timing, the environment, and
    what each output computed, as digests (``compare/digest.py``)."""

    outputs: tuple[OutputStats, ...]
    replay: Replay
    snapshot: envsnap.EnvSnapshot
    endpoint_s: float | None = None  # the endpoint's replay, when the model names one (check/served.py)
    digests: tuple[OutputDigest, ...] = ()


@dataclass(frozen=True)
class Judged:
    """The verdict and what it rests on: the reasons, the environment's changes, the details shown with it."""

    verdict: Verdict
    reasons: tuple[Reason, ...]
    env_changes: list[EnvChange]
    details: Details


def check(plan: CheckPlan, started: float, clock: Clock, capture_env: EnvCapture, worker: WorkerState) -> CheckResult:
    """The check's steps; raises what ``check._run_check`` turns into an ``error`` result."""
    opened = open_inputs(plan, worker)
    if opened is None:
        name = plan.model.name
        detail = f"no active baseline for {name!r}: run `onnxmon baseline capture {name}`"
        return error_result(name, "no_baseline", detail, started, clock())
    threads = plan.model.checks.concurrency or 1
    serial = SerialDigests() if threads > 1 else None
    deadline = started + plan.timeout_s
    measured = measure(plan, opened, deadline=deadline, clock=clock, capture_env=capture_env, serial=serial)
    reasons = reasons_of(plan, opened)
    served = None
    if plan.model.endpoint is not None:  # the endpoint's numbers become the run's; the local ones its control
        served = measure_served(
            plan,
            opened.session,
            opened.baseline,
            opened.bench,
            measured.outputs,
            deadline=started + plan.timeout_s,
            clock=clock,
        )
        snapshot = metadata.with_server(measured.snapshot, served.fields)
        measured = Measured(
            served.outputs, measured.replay, snapshot, endpoint_s=served.seconds, digests=served.digests
        )
        reasons.extend(served.reasons)
    env_changes = environment_changes(opened.baseline.meta.environment, measured.snapshot)
    verdict = Verdict.worst([o.verdict for o in measured.outputs] + ([Verdict.FAIL] if reasons else []))
    reasons, details = details_of(plan, opened, reasons, env_changes)
    if serial is not None:  # the same session from threads at once, against the serial answers
        found = check_concurrency(opened.session, opened.bench, serial, threads=threads, timeout_s=deadline - clock())
        details["concurrency"] = found.details
        reasons += found.reasons
        codes = {r.code for r in found.reasons}
        if codes:  # concurrency_variant fails; a timeout or an internal error could not finish measuring
            stopped = codes & {"timeout", "internal_error"}
            verdict = Verdict.worst([verdict, Verdict.ERROR if stopped else Verdict.FAIL])
    if served is not None:
        details["serving"] = served.details
    judged = Judged(verdict, tuple(reasons), env_changes, details)
    return assemble(plan, opened, measured, judged, started, clock())


def open_inputs(plan: CheckPlan, worker: WorkerState) -> Opened | None:
    """The identity, baseline, set and session of ``plan``'s model; None when it has no active baseline."""
    identity = worker.identify(plan.model.path)
    baseline = baselines.active(plan.baselines_dir, plan.model.name)
    if baseline is None:
        return None
    bench = benchsets.open_benchset(plan.benchsets_dir, baseline.meta.benchset, baseline.meta.benchset_version)
    session, built = worker.session(plan.model, identity)
    return Opened(identity, baseline, bench, session, built)


def measure(
    plan: CheckPlan,
    opened: Opened,
    *,
    deadline: float,
    clock: Clock,
    capture_env: EnvCapture,
    serial: SerialDigests | None = None,
) -> Measured:
    """Replay the set, comparing each sample's outputs with the baseline's as they come; then the snapshot.

    With ``serial``, each sample's answer is also kept as digests, for ``checks.concurrency``."""
    baseline, session = opened.baseline, opened.session
    comparison = Comparison(
        list(baseline.meta.outputs),
        session.output_names,
        plan.tolerances(session.output_names),
        samples=baseline.meta.sample_count,
        elements=baseline.element_counts(),
        decisions=plan.model.decisions,  # counted per sample beside the metrics (compare/decisions.py)
    )

    digests = DigestAccumulator(session.output_names)

    def feed(index: int, produced: Mapping[str, np.ndarray]) -> None:
        digests.feed(produced)
        if index < baseline.meta.sample_count:  # a count mismatch is judged by finish()
            comparison.feed(produced, baseline.sample_outputs(index))
        if serial is not None:
            serial.feed(index, produced)

    replay = replay_benchset(session, opened.bench, plan.repeats, deadline=deadline, clock=clock, each=feed)
    snapshot = capture_env()
    outputs = comparison.finish(len(opened.bench))
    spread = tuple(with_repeat_spread(o, replay.spread.get(o.name)) for o in outputs)
    return Measured(spread, replay, snapshot, digests=digests.finish())


def reasons_of(plan: CheckPlan, opened: Opened) -> list[Reason]:
    """What differs from the baseline besides the numbers, each as a reason (every one fails the check)."""
    info, identity, baseline, bench = opened.session.info, opened.identity, opened.baseline, opened.bench
    reasons: list[Reason] = []
    if info.fallback:
        detail = f"requested {list(info.requested)} but the session runs on {list(info.effective)}"
        reasons.append(Reason("provider_fallback", detail))
    if identity.sha256 != baseline.meta.model_sha256:
        detail = f"{plan.model.path} sha256 {identity.sha256[:12]} != baseline {baseline.meta.model_sha256[:12]}"
        reasons.append(Reason("model_changed", detail))
    reasons.extend(external_data_changes(plan.model.path.name, identity.external_data, baseline.meta.external_data))
    if bench.sha256 != baseline.meta.benchset_sha256:
        detail = (
            f"benchset {bench.name} v{bench.version} sha256 {bench.sha256[:12]}"
            f" != baseline {baseline.meta.benchset_sha256[:12]}"
        )
        reasons.append(Reason("benchset_changed", detail))
    # A reference fed other inputs than the benchmark set (BGR vs RGB, another mean/std): say so first.
    reasons.extend(Reason("input_mismatch", detail) for detail in baseline.input_mismatches())
    return reasons


def details_of(
    plan: CheckPlan,
    opened: Opened,
    reasons: list[Reason],
    env_changes: list[EnvChange],
) -> tuple[list[Reason], Details]:
    """The check's details (session, model identity, set version, environment diff, casts,
    the model diff when the file changed) and ``reasons`` with the diff's summary in ``model_changed``."""
    session, bench = opened.session, opened.bench
    details: Details = {
        "session": session.info.to_dict(),
        "model": opened.identity.to_dict(),
        "benchset_version": bench.version,
        "env_diff": env_changes,
        "baseline_source": opened.baseline.meta.source,  # a reference is the framework's numbers, not ORT's
    }
    details.update({"input_casts": dict(session.input_casts)} if session.input_casts else {})
    if any(r.code == "model_changed" for r in reasons):
        reasons, details["model_diff"] = describe_model_change(reasons, opened.baseline, plan.model.path)
    current = _current_benchset_version(plan)
    if current is not None and current != bench.version:
        details["benchset_note"] = (
            f"benchset {bench.name} has a newer version v{current}; the baseline uses v{bench.version}."
            f" Re-capture to adopt it: onnxmon baseline capture {plan.model.name}"
        )
    return reasons, details


def assemble(
    plan: CheckPlan, opened: Opened, measured: Measured, judged: Judged, started: float, finished: float
) -> CheckResult:
    """The frozen result of the steps above."""
    session, bench = opened.session, opened.bench
    verdict, reasons = judged.verdict, judged.reasons
    environment = measured.snapshot.to_dict()
    stack = stackkey.stack_of(
        environment,
        model_sha256=opened.identity.sha256,
        benchset=bench.name,
        benchset_version=bench.version,
        providers=session.info.effective,
        provider_options=session.info.provider_options,
        session_options=plan.model.session.model_dump(mode="json"),
    )
    return CheckResult(
        model=plan.model.name,
        verdict=verdict,
        started_at=started,
        finished_at=finished,
        reasons=reasons,
        outputs=measured.outputs,
        baseline_id=opened.baseline.id,
        model_sha256=opened.identity.sha256,
        benchset=bench.name,
        benchset_sha256=bench.sha256,
        providers_requested=session.info.requested,
        providers_effective=session.info.effective,
        sample_count=len(bench),
        # load_s is this check's own session build: 0 when the worker kept its session from an earlier check
        timings={
            "load_s": session.info.load_seconds if opened.built else 0.0,
            "replay_s": measured.replay.seconds,
            **({"endpoint_s": measured.endpoint_s} if measured.endpoint_s is not None else {}),
        },
        environment=environment,
        attribution=attribute(verdict, list(reasons), judged.env_changes),
        details=judged.details,
        digests=measured.digests,
        run_digest=run_digest(measured.digests),
        stack=stack,
        stack_key=stackkey.key_of(stack),
    )


def _current_benchset_version(plan: CheckPlan) -> int | None:
    try:
        return benchsets.newest_version(plan.benchsets_dir, plan.model.benchset)
    except MonitorError:
        return None
