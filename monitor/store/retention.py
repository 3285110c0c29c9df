"""Retention: old runs go, failures stay longer, events longest, provenance always.

A run that a baseline was captured from is never deleted (it is the baseline's provenance),
nor the latest run of a model on a node (the status page and ``/metrics`` read it). Events are
the compact story of what changed; they are kept unless ``events_older_than`` is given, and
when their run goes they keep everything but the link.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from monitor.store import schema
from monitor.store.records import PruneStats


def prune(
    session: Session,
    *,
    now: datetime,
    passing_older_than: timedelta,
    failures_older_than: timedelta,
    events_older_than: timedelta | None = None,
) -> PruneStats:
    """Delete what retention allows inside the caller's transaction; return the counts."""
    aged = or_(
        and_(schema.Run.verdict == "pass", schema.Run.started_at < now - passing_older_than),
        and_(schema.Run.verdict != "pass", schema.Run.started_at < now - failures_older_than),
    )
    provenance = select(schema.Baseline.run_id).where(schema.Baseline.run_id.is_not(None))
    kept = session.scalar(select(func.count()).select_from(schema.Run).where(aged, schema.Run.id.in_(provenance))) or 0
    doomed: ColumnElement[bool] = and_(
        aged, schema.Run.id.not_in(provenance), schema.Run.id.not_in(select(schema.LatestRun.run_id))
    )
    doomed_ids = select(schema.Run.id).where(doomed)
    outputs = _count(session.execute(delete(schema.OutputResult).where(schema.OutputResult.run_id.in_(doomed_ids))))
    session.execute(update(schema.Event).where(schema.Event.run_id.in_(doomed_ids)).values(run_id=None))
    session.execute(delete(schema.Diagnosis).where(schema.Diagnosis.run_id.in_(doomed_ids)))
    session.execute(
        update(schema.Incident).where(schema.Incident.run_id.in_(doomed_ids)).values(run_id=None)
    )  # knowledge stays
    runs = _count(session.execute(delete(schema.Run).where(doomed)))
    events = 0
    if events_older_than is not None:
        events = _count(session.execute(delete(schema.Event).where(schema.Event.at < now - events_older_than)))
    return PruneStats(runs_deleted=runs, outputs_deleted=outputs, events_deleted=events, runs_kept_for_baselines=kept)


def _count(result: Any) -> int:
    return int(getattr(result, "rowcount", 0) or 0)
