"""Claim a (model, schedule slot) lease: the first replica to insert the row runs the check.

``INSERT ... ON CONFLICT DO NOTHING`` on the primary key is atomic on both SQLite and
PostgreSQL, so two replicas racing for the same slot get exactly one winner without
advisory locks, heartbeats or clocks that must agree beyond the slot's length.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from monitor.store.schema import Lease


def claim(session: Session, model: str, slot: int, holder: str, at: datetime) -> bool:
    """True when this caller now holds ``(model, slot)``; False when another replica does."""
    values = {"model": model, "slot": slot, "holder": holder, "acquired_at": at}
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = (
        insert(Lease).values(**values).on_conflict_do_nothing(index_elements=["model", "slot"]).returning(Lease.slot)
    )
    # RETURNING yields the row only when this insert created it; a conflict yields nothing.
    return session.connection().execute(statement).first() is not None


def prune(session: Session, older_than: datetime) -> int:
    """Forget leases acquired before ``older_than``; they only matter within their slot."""
    result = session.connection().execute(delete(Lease).where(Lease.acquired_at < older_than))
    return int(result.rowcount or 0)


KEEP = timedelta(days=2)
