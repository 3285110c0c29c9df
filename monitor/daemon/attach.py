"""A fail's diagnosis, made after the fail went to every sink, and attached to its stored run.

``daemon.diagnose_on_fail`` once held the result back for the whole diagnosis (10 to 120 s): not in
the store, the spool, ``/metrics`` or the log, lost to a ``kill -9`` in that window, and SIGTERM waited
for it (issue 30, B1). Now ``Daemon`` dispatches the fail first and then calls ``attach``: the
diagnosis (each experiment an isolated child, cut by ``stop``) becomes a ``diagnoses`` row of the
stored run (``store.incidents.record_diagnosis``), which ``/metrics``' ``onnxmon_diagnosis_info`` reads, and
one ``{"event": "diagnosis", ...}`` line on the results logger says it landed.

A fail that went to the spool (the database was down) has no run id yet: its diagnosis is in that
log line only. A diagnosis cut by a shutdown is not stored half-made: the fail is, already.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping
from typing import Any

from monitor import jsonsafe
from monitor.config.plan import CheckPlan
from monitor.daemon import diagnosis
from monitor.results import CheckResult, Verdict
from monitor.store import Store, incidents

log = logging.getLogger("onnxmon.daemon")


def attach(
    plan: CheckPlan,
    result: CheckResult,
    run_id: int | None,
    *,
    budget_s: float,
    store: Store,
    stop: threading.Event,
    results_log: logging.Logger,
) -> CheckResult:
    """Diagnose the recorded fail ``result`` (run ``run_id``; None: spooled) and store the diagnosis with it.

    Returns ``result`` with ``details["diagnosis"]`` (what ``POST .../check`` answers), or as it was
    when it is not a fail or the diagnosis was cut.
    """
    if result.verdict is not Verdict.FAIL:
        return result
    known = diagnosis.stored_incidents(store)
    document = diagnosis.diagnose_run(plan, result, budget_s=budget_s, incidents=known, run_id=run_id, stop=stop)
    if stop.is_set():
        where = f" as run {run_id}" if run_id is not None else " in the spool"
        log.warning("diagnosis of %s cut: the daemon is stopping (the fail is recorded%s)", plan.name, where)
        return result
    stored = False
    if run_id is not None and document.get("hypotheses"):
        try:
            incidents.record_diagnosis(store, run_id, document)
            stored = True
        except Exception as exc:  # advice: a store outage costs the stored diagnosis, never the fail
            log.error("diagnosis of %s run %s not stored: %s", plan.name, run_id, f"{type(exc).__name__}: {exc}"[:300])
    fields = line(plan.name, run_id, document, stored=stored)
    results_log.info("%s", jsonsafe.dumps(fields, sort_keys=False), extra={"onnxmon_fields": fields})
    return dataclasses.replace(result, details={**result.details, "diagnosis": document})


def line(model: str, run_id: int | None, document: Mapping[str, Any], *, stored: bool) -> dict[str, Any]:
    """The log line of a diagnosis that landed: its top cause, or why there is none."""
    hypotheses = document.get("hypotheses") or []
    top = hypotheses[0] if hypotheses and isinstance(hypotheses[0], Mapping) else {}
    return {
        "event": "diagnosis",
        "model": model,
        "run_id": run_id,
        "cause": top.get("cause"),
        "basis": top.get("basis"),  # experiment (a revert's measured effect), measured, or evidence
        "seconds": _number(document.get("seconds")),
        "stored": stored,
        "error": str(document["error"])[:300] if "error" in document else None,
    }


def _number(value: Any) -> Any:
    return jsonsafe.number(float(value)) if isinstance(value, int | float) else None
