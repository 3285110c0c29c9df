"""Diagnosis where the daemon and the CLI run it: each experiment in an isolated child, bounded in time.

``isolated`` is the ``diagnose.engine.Isolator`` both pass: one experiment in a child of
``daemon.isolate`` (its own process group, killed at its timeout), the child's answer or
``{"error": "timeout: ..."}``. ``diagnose_run`` is what ``daemon.diagnose_on_fail`` and
``onnxmon diagnose`` share: incidents come from the store when there is one, the budget from
``daemon.diagnose_budget``, and a failure of the diagnosis itself is a note, never a crash.
With ``stop`` (the daemon's shutdown flag) set, the running experiment's child is killed within
``isolate.POLL_S`` and no further one starts: SIGTERM ends a diagnosis within ``STOP_S``.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from monitor.config.plan import CheckPlan
from monitor.daemon import isolate
from monitor.diagnose.engine import diagnose
from monitor.diagnose.result import Diagnosis
from monitor.results import CheckResult, Verdict
from monitor.store import Store, incidents

STOP_S = 5.0
"""The most a SIGTERM waits for a running diagnosis: ``isolate.POLL_S`` to see it, then the kill and reap."""


def isolated(
    function: Callable[..., Mapping[str, Any]],
    args: tuple[Any, ...],
    timeout_s: float,
    stop: threading.Event | None = None,
) -> Mapping[str, Any]:
    """``function(*args)`` in an isolated child cut at ``timeout_s`` (or ``stop``); its value or ``{"error": ...}``."""
    if stop is not None and stop.is_set():
        return {"error": "cancelled: the daemon is stopping", "seconds": 0.0}
    outcome = isolate.run(function, *args, timeout_s=timeout_s, cancel=stop)
    if outcome.kind == "ok" and outcome.value is not None:
        return outcome.value
    return {"error": f"{outcome.kind}: {outcome.detail}", "seconds": outcome.seconds}


def diagnose_run(
    plan: CheckPlan,
    run: CheckResult,
    *,
    budget_s: float,
    incidents: Iterable[Mapping[str, Any]] = (),
    run_id: int | None = None,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """The diagnosis document of ``run`` (``Diagnosis.to_dict()``); ``{"error": ...}`` if it broke."""
    began = time.monotonic()
    try:
        return diagnose(
            plan,
            run,
            isolate=isolated if stop is None else functools.partial(isolated, stop=stop),
            budget_s=budget_s,
            per_experiment_s=max(5.0, budget_s / 4),
            incidents=incidents,
            run_id=run_id,
        ).to_dict()
    except Exception as exc:  # diagnosis is advice: it never turns a fail into a crash
        return {"error": f"{type(exc).__name__}: {exc}"[:1000], "seconds": time.monotonic() - began}


def with_diagnosis(
    plan: CheckPlan,
    result: CheckResult,
    *,
    budget_s: float,
    store: Store | None = None,
    incidents: Iterable[Mapping[str, Any]] | None = None,
) -> CheckResult:
    """``result`` with ``details["diagnosis"]`` when it is a fail (``daemon.diagnose_on_fail``).

    Incidents to match come from ``incidents``, else from ``store`` (none when it cannot be read).
    """
    if result.verdict is not Verdict.FAIL:
        return result
    known = list(incidents) if incidents is not None else stored_incidents(store)
    document = diagnose_run(plan, result, budget_s=budget_s, incidents=known)
    return dataclasses.replace(result, details={**result.details, "diagnosis": document})


def headline(plan: CheckPlan, result: CheckResult, *, incidents: Iterable[Mapping[str, Any]] = ()) -> str | None:
    """The one line ``onnxmon check`` prints under a fail: ``Diagnosis.summary`` and a similar incident.

    From the diagnosis the result carries (``with_diagnosis``: the same replays and ranking as
    ``onnxmon diagnose``: the cause a revert measurably restores, or "no experiment explains this
    drift" and the evidence), else from the evidence alone (``check --no-diagnose``: nothing
    replayed, marked so, with how to measure it). None unless a fail.
    """
    if result.verdict is not Verdict.FAIL:
        return None
    document = result.details.get("diagnosis")
    if isinstance(document, Mapping) and "hypotheses" in document:
        return Diagnosis.from_dict(document).headline()
    failed = f" (the diagnosis failed: {str(document['error'])[:80]})" if isinstance(document, Mapping) else ""
    try:
        found = diagnose(plan, result, isolate=isolated, replay=False, incidents=incidents)
    except Exception as exc:
        return f"likely cause: unknown (diagnosis failed: {type(exc).__name__})"
    return found.headline() + f"{failed} — measure it: onnxmon diagnose {plan.name}"


def stored_incidents(store: Store | None) -> list[dict[str, Any]]:
    """Every incident in ``store`` (newest first); none without a store or when it cannot be read."""
    if store is None:
        return []
    try:
        return [i.to_dict() for i in incidents.incidents(store)]
    except Exception:  # matching incidents is advice: a store outage must not stop the check
        return []
