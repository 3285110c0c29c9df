"""What runs inside a check's child process: the check, and what a verdict may trigger.

The daemon hands the child plain data (the settings as JSON and a model name) and gets
plain data back (``CheckResult.to_dict()`` plus, when a baseline was auto-captured, its
metadata), so nothing but JSON-like values crosses the process boundary.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from monitor import capture
from monitor.check import run_check
from monitor.config import settings as config
from monitor.errors import MonitorError
from monitor.files import baselines
from monitor.results import CheckResult, Verdict


def check_job(settings_data: Mapping[str, Any], model_name: str) -> dict[str, Any]:
    """Run one check; auto-capture a first baseline or localize a failure when configured."""
    settings = config.from_mapping(settings_data)
    model = settings.model(model_name)
    result = run_check(settings, model_name)
    payload: dict[str, Any] = {"result": result.to_dict()}
    if _lacks_baseline(result) and settings.daemon.auto_capture_baseline:
        payload["captured_baseline"] = _auto_capture(settings, model_name)
    if result.verdict is Verdict.FAIL and model.localize_on_fail:
        payload["result"]["details"]["localization"] = _localize(settings, model_name)
    return payload


def _lacks_baseline(result: CheckResult) -> bool:
    return result.verdict is Verdict.ERROR and any(r.code == "no_baseline" for r in result.reasons)


def _auto_capture(settings: config.Settings, model_name: str) -> dict[str, Any]:
    """Capture a first baseline. Never replaces an active one: capture only promotes the first."""
    try:
        baseline = capture.capture_baseline(settings, model_name, note="auto-captured by onnxmon serve")
    except MonitorError as exc:
        return {"error": str(exc)}
    active = baselines.active_id(settings.store.baselines_dir, model_name) == baseline.id
    return baseline.meta.to_dict() | {"path": str(baseline.directory), "active": active}


def _localize(settings: config.Settings, model_name: str) -> dict[str, Any]:
    """Layer-by-layer localization of a failing check within its time budget (best effort)."""
    began = time.monotonic()
    try:
        from monitor.localize import configured as localize_run

        return localize_run.localize_model(
            settings, model_name, time_budget_s=settings.timeout_for(settings.model(model_name)) / 2
        ).to_dict()
    except Exception as exc:  # localization is advice; it must never turn a fail into a crash
        return {"error": f"{type(exc).__name__}: {exc}"[:1000], "seconds": time.monotonic() - began}
