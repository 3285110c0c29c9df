"""What runs inside a check's child process: the check, and what a verdict may trigger.

The daemon hands the child the model's resolved ``CheckPlan`` (frozen, picklable: it
crosses the process boundary as is, so the child never re-reads or re-validates the
config) and gets the ``CheckResult`` back as it is (a frozen value, pickled across the
pipe) plus, when a baseline was auto-captured, its metadata. A check always runs in a check
worker (``daemon/warm.py``); capture, the environment snapshot and the other jobs here in a
plain isolated child (``daemon/isolate.py``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from monitor import capture
from monitor.check import run_check, with_model_change
from monitor.config.plan import CheckPlan
from monitor.daemon import isolate, warm
from monitor.errors import MonitorError
from monitor.files import baselines
from monitor.results import CheckResult, Verdict, error_result
from monitor.runtime import envsnap
from monitor.runtime.worker_state import WorkerState

GRACE_S = 10.0  # the child's own deadline fires first; the hard kill comes this much later


def check_job(plan: CheckPlan, worker: WorkerState | None = None) -> dict[str, Any]:
    """Run one check; auto-capture a first baseline or localize a failure when configured.

    ``worker`` is what the check worker keeps between its checks (``runtime/worker_state.py``).
    """
    result = run_check(plan, worker=worker)
    payload: dict[str, Any] = {}
    if _lacks_baseline(result) and plan.auto_capture_baseline:
        payload["captured_baseline"] = _auto_capture(plan)
    if result.verdict is Verdict.FAIL and plan.localize_on_fail:
        result = dataclasses.replace(result, details={**result.details, "localization": _localize(plan)})
    return {"result": result, **payload}


def measure_only(plan: CheckPlan, worker: WorkerState | None = None) -> dict[str, Any]:
    """The check alone (``onnxmon check``): no auto-capture, no localization."""
    return {"result": run_check(plan, worker=worker)}


def capture_job(plan: CheckPlan, options: dict[str, Any]) -> dict[str, Any]:
    """``onnxmon baseline capture`` inside the child: the new baseline's id, or the one-line error."""
    try:
        baseline = capture.capture_baseline(plan, **options)
    except MonitorError as exc:
        return {"error": str(exc), "exit_code": exc.exit_code}
    return {"id": baseline.id}


def capture_isolated(
    plan: CheckPlan, options: dict[str, Any], *, timeout_s: float, memory_limit_mb: int | None = None
) -> baselines.Baseline:
    """Capture a baseline in an isolated child, cut at ``timeout_s``; ``MonitorError`` when it cannot be had.

    A model that hangs or crashes while its baseline is taken leaves no baseline (capture writes
    into a temporary directory and renames it whole) and a one-line error, exit 3.
    """
    outcome = _isolated(capture_job, plan, options, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb)
    if outcome.kind == "ok" and outcome.value is not None:
        if "error" in outcome.value:
            error = MonitorError(outcome.value["error"])
            error.exit_code = int(outcome.value.get("exit_code", 2))
            raise error
        return baselines.get(plan.baselines_dir, outcome.value["id"])
    error = MonitorError(f"capturing a baseline of {plan.name!r} did not finish: {outcome.kind}: {outcome.detail}")
    error.exit_code = 3
    raise error


def environment_job(plan: CheckPlan, with_session: bool) -> dict[str, Any]:
    """The stack's environment inside a fresh child: after one sample of the plan's session, or bare."""
    if not with_session:
        return {"environment": envsnap.capture().to_dict()}
    return {"environment": capture.stack_environment(plan).to_dict()}


def environment_isolated(plan: CheckPlan, *, memory_limit_mb: int | None = None) -> tuple[envsnap.EnvSnapshot, str]:
    """The environment a check of ``plan`` records, taken in an isolated child, and how it was taken.

    The child imports ONNX Runtime and onnxmon only, so what the caller has loaded (torch and its CUDA
    libraries) is not in it. When the model's session fails there, a bare child's snapshot is kept.
    """
    outcome = _isolated(environment_job, plan, True, timeout_s=plan.timeout_s, memory_limit_mb=memory_limit_mb)
    how = "a fresh child after one sample of the model's configured session"
    if outcome.kind != "ok" or outcome.value is None:
        failed = outcome.detail
        outcome = _isolated(environment_job, plan, False, timeout_s=60.0, memory_limit_mb=memory_limit_mb)
        how = f"a fresh child without the model's session ({failed})"
    if outcome.kind != "ok" or outcome.value is None:
        error = MonitorError(f"snapshotting the environment of {plan.name!r} failed: {outcome.kind}: {outcome.detail}")
        error.exit_code = 3
        raise error
    return envsnap.EnvSnapshot.from_dict(outcome.value["environment"]), how


def run_isolated(
    plan: CheckPlan,
    *,
    job: Callable[..., dict[str, Any]] = check_job,
    memory_limit_mb: int | None = None,
    clock: Callable[[], float] = time.time,
    pool: warm.WarmPool | None = None,
) -> tuple[CheckResult, dict[str, Any] | None]:
    """Run ``job(plan)`` in a check worker with the plan's hard timeout; the result and any captured baseline.

    The daemon and the CLI both measure through here, so ``timeout: 5s`` means the same thing to
    both: the check's own deadline fires first, and the worker's process group is killed ``GRACE_S``
    later. A timeout or a crash is an ``error`` result with reason ``timeout`` or ``crash`` (and
    ``model_changed`` when the model file is not the baseline's: a new model that segfaults).
    With ``pool`` (the daemon's) the check runs in the model's kept worker when it can; without (the
    CLI), in a worker started for this one check (``warm.ask_once``).
    """
    started = clock()
    cap = memory_limit_mb * 1024 * 1024 if memory_limit_mb else None
    timeout_s = plan.timeout_s + GRACE_S
    if pool is not None:
        outcome = pool.run(job, plan, timeout_s=timeout_s, memory_limit_bytes=cap)
    else:
        outcome = warm.ask_once(job, plan, timeout_s=timeout_s, memory_limit_bytes=cap)
    if outcome.kind == "ok" and outcome.value is not None:
        return result_of(outcome.value), outcome.value.get("captured_baseline")
    code = "timeout" if outcome.kind == "timeout" else "crash"
    return with_model_change(plan, error_result(plan.name, code, outcome.detail, started, clock())), None


def result_of(payload: Mapping[str, Any]) -> CheckResult:
    """The ``CheckResult`` of a check job's payload (``check_job``, ``measure_only``)."""
    result = payload["result"]
    if not isinstance(result, CheckResult):
        raise TypeError(f"a check job answered {type(result).__name__}, not a CheckResult")
    return result


def _isolated(job: Callable[..., Any], *args: Any, timeout_s: float, memory_limit_mb: int | None) -> isolate.Outcome:
    """``job(*args)`` in a child: its own deadline first, the process group's hard kill ``GRACE_S`` later."""
    return isolate.run(
        job,
        *args,
        timeout_s=timeout_s + GRACE_S,
        memory_limit_bytes=memory_limit_mb * 1024 * 1024 if memory_limit_mb else None,
    )


def _lacks_baseline(result: CheckResult) -> bool:
    return result.verdict is Verdict.ERROR and any(r.code == "no_baseline" for r in result.reasons)


def _auto_capture(plan: CheckPlan) -> dict[str, Any]:
    """Capture a first baseline. Never replaces an active one: capture only promotes the first."""
    try:
        baseline = capture.capture_baseline(plan, note="auto-captured by onnxmon serve")
    except MonitorError as exc:
        return {"error": str(exc)}
    active = baselines.active_id(plan.baselines_dir, plan.name) == baseline.id
    return baseline.meta.to_dict() | {"path": str(baseline.directory), "active": active}


def _localize(plan: CheckPlan) -> dict[str, Any]:
    """Layer-by-layer localization of a failing check within half its timeout (best effort)."""
    began = time.monotonic()
    try:
        from monitor.localize import configured
        from monitor.localize.request import LocalizeRequest

        return configured.localize_model(plan, LocalizeRequest(time_budget_s=plan.timeout_s / 2)).to_dict()
    except Exception as exc:  # localization is advice; it must never turn a fail into a crash
        return {"error": f"{type(exc).__name__}: {exc}"[:1000], "seconds": time.monotonic() - began}
