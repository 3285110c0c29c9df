"""Row-level writes of the store: upserts and pointers that ``Store``'s public writes are built from.

Each function works inside the caller's session (one transaction per public write) and
knows nothing of ``CheckResult``s: ``repo.Store`` turns results into rows, these keep the
reference tables (models, environments, benchsets) and the ``latest_runs`` pointers right.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from monitor.results import CAUSE_CODES
from monitor.store import events, schema


def model_id(session: Session, name: str, at: datetime, sha256: str | None) -> int:
    insert_ignore(session, schema.Model, {"name": name, "first_seen": at, "last_seen": at, "current_sha256": sha256})
    model = session.scalars(select(schema.Model).where(schema.Model.name == name)).one()
    if at > model.last_seen:
        model.last_seen = at
        if sha256:
            model.current_sha256 = sha256
    elif sha256 and model.current_sha256 is None:
        model.current_sha256 = sha256
    return model.id


def touch_environment(session: Session, fingerprint: str, snapshot: Mapping[str, Any], at: datetime) -> None:
    values = {"fingerprint": fingerprint, "snapshot": dict(snapshot), "first_seen": at, "last_seen": at}
    insert_ignore(session, schema.Environment, values)
    session.execute(
        update(schema.Environment)
        .where(schema.Environment.fingerprint == fingerprint, schema.Environment.last_seen < at)
        .values(last_seen=at)
    )


def benchset_id(session: Session, name: str, sha256: str, version: Any, at: datetime) -> int:
    values = {"name": name, "sha256": sha256, "version": str(version) if version else None, "created_at": at}
    insert_ignore(session, schema.Benchset, values)
    found = session.scalar(
        select(schema.Benchset.id).where(schema.Benchset.name == name, schema.Benchset.sha256 == sha256)
    )
    assert found is not None
    return found


def previous_state(session: Session, model_id: int, node: str) -> events.RunState | None:
    row = session.execute(
        select(schema.Run, schema.Environment.snapshot)
        .join(schema.LatestRun, schema.LatestRun.run_id == schema.Run.id)
        .outerjoin(schema.Environment, schema.Environment.fingerprint == schema.Run.environment_fingerprint)
        .where(schema.LatestRun.model_id == model_id, schema.LatestRun.node == node)
    ).first()
    if row is None:
        return None
    run, snapshot = row
    # provider fallback is a check-level reason (a session, not an output, falls back)
    fallback = any(r.get("code") == "provider_fallback" for r in run.reasons)
    return events.RunState(
        verdict=run.verdict,
        environment_fingerprint=run.environment_fingerprint,
        model_sha256=run.model_sha256,
        provider_fallback=fallback,
        environment=snapshot,
    )


def point_latest(session: Session, model_id: int, node: str, run_id: int) -> None:
    values = {"model_id": model_id, "node": node, "run_id": run_id}
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(schema.LatestRun).values(**values)
    session.execute(stmt.on_conflict_do_update(index_elements=["model_id", "node"], set_={"run_id": run_id}))


def promote(session: Session, row: schema.Baseline, by: str, at: datetime, note: str = "") -> None:
    """Flip the model's active baseline to ``row`` and write the ``baseline_promoted`` event."""
    previous = session.scalar(
        select(schema.Baseline.baseline_id).where(schema.Baseline.model_id == row.model_id, schema.Baseline.is_active)
    )
    session.execute(update(schema.Baseline).where(schema.Baseline.model_id == row.model_id).values(is_active=False))
    row.is_active, row.promoted_at, row.promoted_by = True, at, by
    session.add(
        schema.Event(
            model_id=row.model_id,
            node="",
            kind=events.BASELINE_PROMOTED,
            at=at,
            old=previous,
            new=row.baseline_id,
            detail={"by": by, **({"note": note} if note else {})},
        )
    )


def insert_ignore(session: Session, table: type[schema.Base], values: Mapping[str, Any]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING, so that two daemons can upsert the same row safely."""
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(dialect.insert(table).values(**values).on_conflict_do_nothing())


def add_diagnosis(session: Session, run_id: int, model_id: int, document: Any, at: datetime) -> None:
    """A diagnoses row for ``document`` when it is a diagnosis with hypotheses (an error document is not)."""
    if not isinstance(document, Mapping) or not document.get("hypotheses"):
        return
    top = document["hypotheses"][0]
    cause = top.get("cause") if top.get("cause") in CAUSE_CODES else "unknown"
    confidence = float(top.get("confidence") or 0.0)
    session.add(
        schema.Diagnosis(
            run_id=run_id,
            model_id=model_id,
            created_at=at,
            cause=cause,
            confidence=confidence if math.isfinite(confidence) else 0.0,
            document=dict(document),
        )
    )
