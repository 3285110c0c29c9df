"""One run (``/runs/{id}``): verdict, reasons, attribution, every output's metrics, the environment diff
against the baseline's environment, and the localization report when the daemon localized the failure.

``templates/run.html`` includes each section's own template (decisions, model diff, localization,
diagnosis) with the values its module computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.api.environments import run_env_diff
from monitor.api.params import page_id
from monitor.api.web import decisions, diagnosis, env_page, localization, model_diff, outputs, templating
from monitor.api.web.env_page import NotFound
from monitor.api.web.formats import url
from monitor.results import Reason
from monitor.store import RunRecord

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle


@dataclass(frozen=True)
class RunFacts:
    """What the page says of the run itself."""

    id: int
    model: str
    verdict: str
    candidate: bool
    started_at: datetime
    finished_at: datetime
    duration_s: float
    baseline_id: str | None
    fingerprint: str | None
    sha: str
    benchset: str
    providers_asked: str
    providers_used: str
    fallback: str  # the providers asked for and not used ("" when none)
    node_pod: str
    attribution: str | None
    reasons: list[Reason]
    warnings: list[Reason]  # tolerance.numeric: warn
    within: str  # a pass without reasons: what it means
    run_digest: str  # what it computed (docs/fleet.md); "—" for a run of an older version
    stack_key: str
    digests: list[tuple[str, str]]  # (output, its samples' digests, the first ones)


DIGESTS_SHOWN = 8  # samples per output on the page; the API's run document has them all


def render(handle: DaemonHandle, run_ref: str, now: datetime) -> str:
    run_id = page_id(run_ref)
    record = handle.store.run(run_id) if run_id else None
    if record is None:
        raise NotFound(404, f"no run {run_ref!r} in the history")
    crumbs = [("Models", "/"), (record.model, url("models", record.model)), (f"run #{record.id}", None)]
    return templating.render(
        "run.html",
        title=f"Run #{record.id} · {record.model}",
        crumbs=crumbs,
        now=now,
        run=_facts(record),
        outputs=outputs.rows(record.outputs),
        output_headers=outputs.HEADERS,
        all_metrics=outputs.all_metrics(record.outputs),
        decisions=decisions.rows(record.outputs),
        env_diff=env_page.diff_view(run_env_diff(handle, record)),
        model_diff=model_diff.view(record.details),
        localization=localization.view(record.details, explorer_url=f"/runs/{record.id}/model-explorer.json"),
        diagnosis=_diagnosis(handle, record),
        timings=list(record.timings.items()),
    )


def _diagnosis(handle: DaemonHandle, record: RunRecord) -> diagnosis.Diagnosis | None:
    """The diagnosis section on a run that did not pass: causes, experiments, incidents, the form."""
    if record.verdict.value == "pass":
        return None
    from monitor.store import incidents

    document = incidents.diagnosis(handle.store, record.id) or record.details.get("diagnosis")
    return diagnosis.view(record.id, document, incidents.similar_to_run(handle.store, record.id))


def _facts(record: RunRecord) -> RunFacts:
    asked, used = record.providers_requested, record.providers_effective
    fallback = sorted(set(asked) - set(used)) if used else []
    warnings = [r for o in record.outputs for r in o.warnings]
    return RunFacts(
        id=record.id,
        model=record.model,
        verdict=record.verdict.value,
        candidate=record.candidate,
        started_at=record.started_at,
        finished_at=record.finished_at,
        duration_s=record.duration_s,
        baseline_id=record.baseline_id,
        fingerprint=record.environment_fingerprint,
        sha=(record.model_sha256 or "—")[:16],
        benchset=f"{record.benchset or '—'} ({record.sample_count} samples)",
        providers_asked=", ".join(asked) or "—",
        providers_used=", ".join(used) or "—",
        fallback=", ".join(fallback),
        node_pod=f"{record.node or '—'} / {record.pod or '—'}",
        attribution=record.attribution,
        reasons=list(record.all_reasons()),
        warnings=warnings,
        within="no decision flipped" if warnings else "every output within tolerance",
        run_digest=record.run_digest or "—",
        stack_key=record.stack_key or "—",
        digests=[(d.name, _samples(d.samples)) for d in record.digests],
    )


def _samples(digests: tuple[str, ...]) -> str:
    shown = " ".join(d[:12] or "none" for d in digests[:DIGESTS_SHOWN])
    more = len(digests) - DIGESTS_SHOWN
    return f"{shown} … {more} more" if more > 0 else shown


def model_explorer(handle: DaemonHandle, run_ref: str) -> dict[str, Any]:
    """The run's localization as Model Explorer node data; ``NotFound`` for no such run.

    A run that was not localized has valid node data that colours nothing (an empty ``results``).
    """
    run_id = page_id(run_ref)  # ASCII digits only, as the run page itself
    record = handle.store.run(run_id) if run_id else None
    if record is None:
        raise NotFound(404, f"no run {run_ref!r}")
    known = {m.name: m.path for m in handle.settings.models}
    return localization.node_data(record.details, known.get(record.model, Path("/nonexistent")))
