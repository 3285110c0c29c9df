"""Baselines written to the store: recorded from their metadata, and promoted.

``record`` inserts a baseline (with a ``baseline_captured`` event) or refreshes a known one, and
mirrors one already active on disk; ``promote`` makes a recorded baseline its model's active one,
writing nothing when it already is. Each works inside the caller's session (``repo.Store`` opens
one write transaction per call); ``created_at`` checks the metadata before any transaction opens.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.errors import BaselineError
from monitor.results import fingerprint_of
from monitor.store import convert, events, schema, writes


def created_at(meta: Mapping[str, Any]) -> datetime:
    """The baseline's creation time; ``BaselineError`` when a required key is missing or the time unreadable."""
    for key in ("baseline_id", "model", "created_at"):
        if not meta.get(key):
            raise BaselineError(f"baseline metadata: '{key}' is missing (got keys {sorted(meta)})")
    try:
        return convert.parse_when(meta["created_at"], "baseline metadata 'created_at'")
    except ValueError as exc:
        raise BaselineError(f"baseline {meta['baseline_id']}: {exc}") from None


def record(session: Session, meta: Mapping[str, Any], created: datetime) -> None:
    """Insert the baseline of ``meta`` (and its ``baseline_captured`` event) or refresh it; mirror ``active``."""
    environment = meta.get("environment") or {}
    fingerprint = fingerprint_of(environment)
    model_id = writes.model_id(session, str(meta["model"]), created, None)
    if fingerprint:
        writes.touch_environment(session, fingerprint, environment, created)
    benchset_id = None
    if meta.get("benchset") and meta.get("benchset_sha256"):
        benchset_id = writes.benchset_id(
            session, str(meta["benchset"]), str(meta["benchset_sha256"]), meta.get("benchset_version"), created
        )
    run_id = meta.get("run_id")
    if run_id is not None and session.get(schema.Run, int(run_id)) is None:
        run_id = None
    values: dict[str, Any] = {
        "model_id": model_id,
        "created_at": created,
        "source": str(meta.get("source") or "captured"),
        "model_sha256": meta.get("model_sha256"),
        "benchset_id": benchset_id,
        "environment_fingerprint": fingerprint,
        "path": str(meta["path"]) if meta.get("path") else None,
        "run_id": int(run_id) if run_id is not None else None,
    }
    row = session.scalars(select(schema.Baseline).filter_by(baseline_id=meta["baseline_id"])).first()
    if row is not None:
        for key, value in values.items():
            setattr(row, key, value)
    else:
        row = schema.Baseline(baseline_id=str(meta["baseline_id"]), is_active=False, **values)
        session.add(row)
        session.add(
            schema.Event(
                model_id=model_id,
                node="",
                kind=events.BASELINE_CAPTURED,
                at=created,
                run_id=values["run_id"],
                new=str(meta["baseline_id"]),
                detail={"source": values["source"], "environment": fingerprint},
            )
        )
        session.flush()
    if meta.get("active") and not row.is_active:  # mirror a baseline already active on disk
        by = str(meta.get("promoted_by") or "baselines directory")
        when = convert.parse_when(meta["promoted_at"], "promoted_at") if meta.get("promoted_at") else created
        writes.promote(session, row, by, when, str(meta.get("promotion_note") or ""))


def promote(session: Session, model: str, baseline_id: str, by: str, *, at: datetime, note: str = "") -> None:
    """Make ``baseline_id`` the active baseline of ``model``; ``BaselineError`` when it is not recorded."""
    model_id = session.scalar(select(schema.Model.id).where(schema.Model.name == model))
    row = session.scalars(select(schema.Baseline).filter_by(baseline_id=baseline_id, model_id=model_id)).first()
    if model_id is None or row is None:
        raise BaselineError(
            f"baseline '{baseline_id}' of model '{model}' is not recorded in the store; record it first"
        )
    if not row.is_active:  # promoting the active baseline again changes nothing
        writes.promote(session, row, by, at, note)
