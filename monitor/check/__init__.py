"""One model × its benchmark set → a ``CheckResult``. ``run_check`` never raises.

This is the only package that joins running and comparing: it loads the active baseline,
replays the baseline's benchmark set through a session built exactly as configured,
compares every output, records the environment the numbers came from, and turns every
problem on the way into data: drift is a ``fail`` with reasons, anything that stops the
measurement is an ``error`` with a bounded reason code.

The steps live in their own modules: ``measure.py`` (open, replay and compare, reasons,
details, the result), ``replay.py`` (the per-sample replay, bounded by one sample's memory,
under one deadline), ``reasons.py`` (model, set and environment changes, the attribution). This
module is the entry point and turns whatever a step raises into an ``error`` result.
"""

from __future__ import annotations

import time
import traceback

from monitor import exportcheck
from monitor.check import measure
from monitor.check.measure import EnvCapture
from monitor.check.reasons import (
    attribute,
    describe_model_change,
    env_changes,
    external_data_changes,
    with_model_change,
)
from monitor.check.replay import Clock, Replay, SampleSink, replay_benchset, with_repeat_spread
from monitor.config.plan import CheckPlan
from monitor.errors import BaselineError, BenchsetError, ConfigError, EndpointError, ModelError, MonitorError
from monitor.quant import coverage_check
from monitor.results import CheckResult, Verdict, error_result
from monitor.runtime import footprint
from monitor.runtime.session import RunTimeout
from monitor.runtime.worker_state import WorkerState

__all__ = [
    "Clock",
    "EnvCapture",
    "Replay",
    "SampleSink",
    "attribute",
    "describe_model_change",
    "env_changes",
    "external_data_changes",
    "replay_benchset",
    "run_check",
    "with_model_change",
    "with_repeat_spread",
]

_ERROR_CODES: tuple[tuple[type[MonitorError], str], ...] = (
    (ModelError, "model_error"),
    (BenchsetError, "benchset_error"),
    (BaselineError, "baseline_error"),
    (ConfigError, "config_error"),
)


def run_check(
    plan: CheckPlan,
    *,
    clock: Clock = time.time,
    capture_env: EnvCapture | None = None,
    worker: WorkerState | None = None,
) -> CheckResult:
    """Check ``plan``'s model against its active baseline. Failures become an ``error`` result.

    The plan (``monitor.config.plan.plan_for``) is resolved by the caller, so an unknown model
    name is the caller's usage error, not a check result. A check that could not measure still
    says when the model file is not the baseline's (``with_model_change``). ``worker`` is what the
    check worker keeps between its checks (``runtime/worker_state.py``: the session, the model
    file's digests, the environment's constant parts); a new one by default.
    """
    result = _run_check(plan, clock=clock, capture_env=capture_env, worker=worker or WorkerState())
    result = with_model_change(plan, result) if result.verdict is Verdict.ERROR else result
    result = exportcheck.with_export_checks(plan, result, clock=clock)  # lint warnings, batch invariance
    return coverage_check.with_calibration_coverage(plan, result, clock=clock)  # checks.calibration_coverage


def _run_check(plan: CheckPlan, *, clock: Clock, capture_env: EnvCapture | None, worker: WorkerState) -> CheckResult:
    started = clock()
    model_name = plan.name
    try:
        return measure.check(plan, started, clock, capture_env or worker.capture_env, worker)
    except RunTimeout as exc:
        return error_result(model_name, "timeout", str(exc), started, clock())
    except MonitorError as exc:
        code = exc.code if isinstance(exc, EndpointError) else _error_code(exc)
        return error_result(model_name, code, str(exc), started, clock())
    except Exception as exc:  # a bug or an ORT failure: still a verdict, never a crash
        where = traceback.extract_tb(exc.__traceback__)[-1]
        detail = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno}){footprint.cap_note(exc)}"
        code = "run_error" if "onnxruntime" in type(exc).__module__ else "internal_error"
        return error_result(model_name, code, detail, started, clock())


def _error_code(exc: MonitorError) -> str:
    return next((c for kind, c in _ERROR_CODES if isinstance(exc, kind)), "config_error")
