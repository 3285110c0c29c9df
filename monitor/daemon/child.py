"""What runs inside a check's child process: the check, and what a verdict may trigger.

The daemon hands the child the model's resolved ``CheckPlan`` (frozen, picklable: it
crosses the process boundary as is, so the child never re-reads or re-validates the
config) and gets plain data back (``CheckResult.to_dict()`` plus, when a baseline was
auto-captured, its metadata).
"""

from __future__ import annotations

import time
from typing import Any

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import CheckPlan
from monitor.errors import MonitorError
from monitor.files import baselines
from monitor.results import CheckResult, Verdict


def check_job(plan: CheckPlan) -> dict[str, Any]:
    """Run one check; auto-capture a first baseline or localize a failure when configured."""
    result = run_check(plan)
    payload: dict[str, Any] = {"result": result.to_dict()}
    if _lacks_baseline(result) and plan.auto_capture_baseline:
        payload["captured_baseline"] = _auto_capture(plan)
    if result.verdict is Verdict.FAIL and plan.localize_on_fail:
        payload["result"]["details"]["localization"] = _localize(plan)
    return payload


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
        from monitor.localize import configured as localize_run

        return localize_run.localize_model(plan, time_budget_s=plan.timeout_s / 2).to_dict()
    except Exception as exc:  # localization is advice; it must never turn a fail into a crash
        return {"error": f"{type(exc).__name__}: {exc}"[:1000], "seconds": time.monotonic() - began}
