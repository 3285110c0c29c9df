"""``onnxmon localize`` in an isolated child: a crash of ONNX Runtime is exit 3 with a message, never a segfault.

Localization runs the model many times with its tensors exposed (and, for an fp16 LSTM, may meet
the same ORT crash the check met). ``localize/`` sits below ``daemon/`` in the layers, so the CLI
comes here: the child is ``isolate.run``'s (own process group, hard timeout, memory cap), the
``LocalizeRequest`` crosses to it as it is (frozen, already validated), the report crosses back
as its ``to_dict()``, and a ``MonitorError`` inside it comes back with its exit code.
"""

from __future__ import annotations

from typing import Any

from monitor.config.plan import CheckPlan
from monitor.daemon import isolate
from monitor.errors import MonitorError
from monitor.localize.report import LocalizationReport
from monitor.localize.request import LocalizeRequest

GRACE_S = 30.0  # the budget is the search's own; past it plus this, the child's group is killed
DEFAULT_TIMEOUT_S = 3600.0


def localize_job(plan: CheckPlan, request: LocalizeRequest) -> dict[str, Any]:
    """Inside the child: the report, or the one-line error of a ``MonitorError`` with its exit code."""
    from monitor.localize import configured

    try:
        report = configured.localize_model(plan, request)
    except MonitorError as exc:
        return {"error": str(exc), "exit_code": exc.exit_code}
    return {"report": report.to_dict()}


def localize_isolated(
    plan: CheckPlan, request: LocalizeRequest, *, timeout_s: float | None = None, memory_limit_mb: int | None = None
) -> LocalizationReport:
    """``configured.localize_model(plan, request)`` in an isolated child.

    A ``MonitorError`` raised there is raised here with its exit code; a crash (a signal, a raised
    exception) or the hard timeout is a ``MonitorError`` with exit code 3 naming what happened.
    ``timeout_s`` defaults to the request's ``time_budget_s`` plus a grace, else an hour.
    """
    budget = request.time_budget_s
    limit = timeout_s or (budget + max(GRACE_S, budget) if budget else DEFAULT_TIMEOUT_S)
    cap = memory_limit_mb * 1024 * 1024 if memory_limit_mb else None
    outcome = isolate.run(localize_job, plan, request, timeout_s=limit, memory_limit_bytes=cap)
    if outcome.kind == "ok" and outcome.value is not None:
        if "error" in outcome.value:
            error = MonitorError(str(outcome.value["error"]))
            error.exit_code = int(outcome.value.get("exit_code", 2))
            raise error
        return LocalizationReport.from_dict(outcome.value["report"])
    detail = f"localization was cut at its hard timeout of {limit:g}s" if outcome.kind == "timeout" else outcome.detail
    error = MonitorError(f"localizing {plan.name!r} did not finish: {outcome.kind}: {detail}")
    error.exit_code = 3
    raise error
