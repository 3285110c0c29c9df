"""The knowledge the store keeps: diagnoses of runs and incidents noted by people.

``writes.add_diagnosis`` runs inside ``Store.record_run``'s transaction when a result carries
``details["diagnosis"]`` (``daemon.diagnose_on_fail``); ``record_diagnosis`` stores one made later
(``onnxmon diagnose --run ID``). An incident is one row with its cause (a ``results.CAUSE_CODES``
code), the person's text and fix, and the failure's signature (``knowledge.incidents.signature``)
that new failures are matched against; pruning a run keeps its incidents (the link becomes NULL).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from monitor.errors import MonitorError
from monitor.results import CAUSE_CODES
from monitor.store import schema, writes
from monitor.store.text import is_blank, refuse_unstorable

if TYPE_CHECKING:
    from monitor.store.repo import Store

MAX_TEXT = 10_000


@dataclass(frozen=True)
class IncidentRecord:
    """An incident as stored; ``to_dict`` is the JSON shape of the CLI and the API."""

    id: int
    run_id: int | None
    model: str
    created_at: datetime
    created_by: str
    cause: str
    text: str
    fix: str | None
    signature: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "model": self.model,
            "at": self.created_at.isoformat(),
            "created_by": self.created_by,
            "cause": self.cause,
            "text": self.text,
            "fix": self.fix,
            "signature": dict(self.signature),
        }


def record_diagnosis(store: Store, run_id: int, document: Mapping[str, Any]) -> None:
    """Store a diagnosis made for an existing run; ``MonitorError`` when the run is unknown."""
    with store._session(write=True) as session:
        run = session.get(schema.Run, run_id)
        if run is None:
            raise MonitorError(f"no run {run_id} in the history")
        writes.add_diagnosis(session, run_id, run.model_id, document, datetime.now(UTC))


def diagnosis(store: Store, run_id: int) -> dict[str, Any] | None:
    """The newest diagnosis document of a run, or None."""
    with store._session() as session:
        row = session.scalars(
            select(schema.Diagnosis)
            .where(schema.Diagnosis.run_id == run_id)
            .order_by(schema.Diagnosis.id.desc())
            .limit(1)
        ).first()
        return dict(row.document) if row is not None else None


def causes(store: Store, run_ids: Iterable[int]) -> dict[int, str]:
    """The top cause of each run's newest diagnosis (runs without one are absent): ``onnxmon_diagnosis_info``."""
    wanted = sorted(set(run_ids))
    if not wanted:
        return {}
    with store._session() as session:
        rows = session.execute(
            select(schema.Diagnosis.run_id, schema.Diagnosis.cause)
            .where(schema.Diagnosis.run_id.in_(wanted))
            .order_by(schema.Diagnosis.id)
        )
        return {run_id: cause for run_id, cause in rows}  # ordered by id: the newest wins


def record_incident(
    store: Store,
    run_id: int,
    *,
    cause: str,
    text: str,
    fix: str | None,
    by: str,
    signature: Mapping[str, Any],
    at: datetime | None = None,
) -> IncidentRecord:
    """Note an incident on run ``run_id``; ``MonitorError`` naming the field for an unknown run or cause."""
    if cause not in CAUSE_CODES:
        raise MonitorError(f"--cause {cause!r} is not a cause code; known: {', '.join(sorted(CAUSE_CODES))}")
    if is_blank(text):  # the API schema's own rule (store/text.py NOT_BLANK)
        raise MonitorError("--text is empty: say what was found")
    if len(text) > MAX_TEXT or len(fix or "") > MAX_TEXT:
        raise MonitorError(f"--text and --fix are limited to {MAX_TEXT} characters")
    # what a person typed is refused, not altered: they can fix it (store/text.py)
    refuse_unstorable((("--text", text), ("--fix", fix), ("--by", by)))
    with store._session(write=True) as session:
        run = session.get(schema.Run, run_id)
        if run is None:
            raise MonitorError(f"no run {run_id} in the history")
        model = session.get(schema.Model, run.model_id)
        row = schema.Incident(
            run_id=run_id,
            model=model.name if model else "",
            created_at=at or datetime.now(UTC),
            created_by=by[:200] or "unknown",
            cause=cause,
            text=text,
            fix=fix or None,
            signature=dict(signature),
        )
        session.add(row)
        session.flush()
        return _record(row)


def incidents(store: Store, *, limit: int = 1000, model: str | None = None) -> list[IncidentRecord]:
    """Incidents, newest first."""
    with store._session() as session:
        query = select(schema.Incident).order_by(schema.Incident.id.desc()).limit(limit)
        if model is not None:
            query = query.where(schema.Incident.model == model)
        return [_record(row) for row in session.scalars(query)]


def incident(store: Store, incident_id: int) -> IncidentRecord | None:
    with store._session() as session:
        row = session.get(schema.Incident, incident_id)
        return _record(row) if row is not None else None


def _record(row: schema.Incident) -> IncidentRecord:
    return IncidentRecord(
        id=row.id,
        run_id=row.run_id,
        model=row.model,
        created_at=row.created_at,
        created_by=row.created_by,
        cause=row.cause,
        text=row.text,
        fix=row.fix,
        signature=dict(row.signature or {}),
    )


def run_document(store: Store, run_id: int) -> dict[str, Any] | None:
    """A stored run in ``CheckResult.to_dict()`` shape (environment snapshot included), or None.

    Diagnosis, signatures and rules read this one shape whether the run is fresh or stored.
    """
    record = store.run(run_id)
    if record is None:
        return None
    environment = store.environment(record.environment_fingerprint) if record.environment_fingerprint else None
    return {
        "id": record.id,
        "model": record.model,
        "verdict": record.verdict.value,
        "started_at": record.started_at.timestamp(),
        "finished_at": record.finished_at.timestamp(),
        "reasons": [{"code": r.code, "detail": r.detail, "output": r.output} for r in record.reasons],
        "outputs": [o.to_dict() for o in record.outputs],
        "baseline_id": record.baseline_id,
        "providers_requested": list(record.providers_requested),
        "providers_effective": list(record.providers_effective),
        "details": dict(record.details),
        "environment": dict(environment or {}),
    }


def similar_to_run(store: Store, run_id: int, *, most: int = 3) -> list[dict[str, Any]]:
    """Incidents similar to a stored run now (not those noted on the run itself), best first."""
    from monitor.knowledge.incidents import similar

    wanted = signature_of(store, run_id)
    if wanted is None:
        return []
    known = [i.to_dict() for i in incidents(store) if i.run_id != run_id]
    return similar(wanted, known)[:most]


def signature_of(store: Store, run_id: int) -> dict[str, list[str]] | None:
    """A stored run's signature: its own record, plus the nodes its newest diagnosis localized."""
    from monitor.knowledge.incidents import localized_op_types, of_run

    document = run_document(store, run_id)
    if document is None:
        return None
    diagnosed = diagnosis(store, run_id) or {}
    return of_run(document, localized_op_types(diagnosed.get("localization")))
