"""What the fleet vote reads and writes (``monitor/fleet/``, docs/fleet.md).

The vote reads each node's latest run per model (the ``latest_runs`` pointers, joined to ``runs``: one
indexed query, of the small columns only: node, digest, stack key, spread, reasons), then the stacks and
per-sample digests of the few runs it must look into (``stacks``, ``digests``, by id). What it found a
node to be is kept in ``fleet_outliers``, one row per (model, node) while the node stands apart.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Text, cast, delete, select
from sqlalchemy.orm import Session

from monitor.results import OutputDigest
from monitor.store import schema
from monitor.store.text import storable

log = logging.getLogger("onnxmon.fleet")

if TYPE_CHECKING:
    from monitor.store.repo import Store


class NodeRun(NamedTuple):
    """A node's latest run of a model, as the vote reads it (a tuple: 100,000 of them are made per fleet vote)."""

    model: str
    node: str
    run_id: int
    started_at: datetime
    run_digest: str
    stack_key: str
    spread: float | None
    reason_codes: tuple[str, ...]  # the reasons the vote reads (concurrency_variant), not every reason


@dataclass(frozen=True)
class OutlierRecord:
    """What the vote found an outvoted node to be (``fleet_outliers``)."""

    model: str
    node: str
    run_id: int | None
    kind: str
    since: datetime
    updated_at: datetime
    samples: tuple[int, ...]
    detail: str


def stored_node(node: str) -> str:
    """``node`` as the store keeps it (storable, cut to the column): what the runs' and the vote's rows name."""
    length = getattr(schema.Run.__table__.c.node.type, "length", None)
    return storable(node)[:length] if length else storable(node)


def latest(store: Store, *, model: str | None = None, since: datetime | None = None) -> list[NodeRun]:
    """Every node's latest run with a digest (of ``model``, else of every model), newer than ``since``."""
    with store._session() as session:
        return _latest(session, model, since)


def _latest(session: Session, model: str | None, since: datetime | None) -> list[NodeRun]:
    run, pointer, models = schema.Run, schema.LatestRun, schema.Model
    # the one reason the vote reads, matched in the database: no run's reasons are parsed here
    concurrency = cast(run.reasons, Text).like('%"concurrency_variant"%')
    stmt = (
        select(
            models.name, pointer.node, run.id, run.started_at, run.run_digest, run.stack_key, run.spread, concurrency
        )
        .select_from(pointer)
        .join(run, run.id == pointer.run_id)
        .join(models, models.id == pointer.model_id)
        .where(run.run_digest.is_not(None), run.stack_key.is_not(None))
    )
    if model is not None:
        stmt = stmt.where(models.name == model)
    if since is not None:
        stmt = stmt.where(run.started_at >= since)
    rows = session.connection().execute(stmt).all()  # Core rows: 100,000 of them without the ORM's per-row work
    flagged = ("concurrency_variant",)
    return [
        NodeRun(name, node, run_id, _aware(started), digest or "", key or "", spread, flagged if concurrent else ())
        for name, node, run_id, started, digest, key, spread, concurrent in rows
    ]


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)  # SQLite's are naive UTC


def stacks(store: Store, run_ids: Iterable[int]) -> dict[int, dict[str, str]]:
    """The stack key's fields of each of ``run_ids``."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    with store._session() as session:
        rows = session.connection().execute(select(schema.Run.id, schema.Run.stack).where(schema.Run.id.in_(ids)))
        return {
            run_id: {str(k): str(v) for k, v in stack.items()} if isinstance(stack, dict) else {}
            for run_id, stack in rows
        }


def digests(store: Store, run_ids: Iterable[int]) -> dict[int, tuple[OutputDigest, ...]]:
    """The per-output, per-sample digests of each of ``run_ids``."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    with store._session() as session:
        rows = session.connection().execute(select(schema.Run.id, schema.Run.digests).where(schema.Run.id.in_(ids)))
        return {run_id: _digests_of(run_id, found) for run_id, found in rows}


def _digests_of(run_id: int, found: Any) -> tuple[OutputDigest, ...]:
    """A run's stored digests; none when the row is not what a check writes (a hand edit, another release's
    format): that run's vote then rests on its run digest alone, and the other runs are still voted on."""
    try:
        return tuple(_digest(d) for d in (found or []))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning("run %s: its output digests cannot be read (%s): voted on by its run digest only", run_id, exc)
        return ()


def _digest(data: Mapping[str, Any]) -> OutputDigest:
    def number(value: Any) -> float | None:
        return None if value is None else float(value)

    return OutputDigest(
        name=str(data["name"]),
        samples=tuple(str(s) for s in data.get("samples", ())),
        total=number(data.get("total")),
        magnitude=number(data.get("magnitude")),
        elements=int(data.get("elements", 0)),
    )


def outliers(store: Store, *, model: str | None = None) -> list[OutlierRecord]:
    """What the vote recorded of the nodes that stand apart (of ``model``, else of every model)."""
    row, models = schema.FleetOutlier, schema.Model
    stmt = select(row, models.name).join(models, models.id == row.model_id)
    if model is not None:
        stmt = stmt.where(models.name == model)
    with store._session() as session:
        return [
            OutlierRecord(name, r.node, r.run_id, r.kind, r.since, r.updated_at, tuple(r.samples), r.detail)
            for r, name in session.execute(stmt).all()
        ]


def record(
    store: Store,
    model: str,
    node: str,
    run_id: int | None,
    kind: str | None,
    samples: Sequence[int],
    detail: str,
    at: datetime,
) -> None:
    """Keep what the vote found ``node`` to be for ``model``; ``kind`` None: it agrees again (the row goes)."""
    with store._session(write=True) as session:
        model_id = session.scalar(select(schema.Model.id).where(schema.Model.name == model))
        if model_id is None:  # no run of it was ever stored: nothing to say of a node
            return
        where = (schema.FleetOutlier.model_id == model_id, schema.FleetOutlier.node == node)
        current = session.scalars(select(schema.FleetOutlier).where(*where)).one_or_none()
        if kind is None:
            session.execute(delete(schema.FleetOutlier).where(*where))
            return
        if current is None:
            session.add(
                schema.FleetOutlier(
                    model_id=model_id,
                    node=node,
                    run_id=run_id,
                    kind=kind,
                    since=at,
                    updated_at=at,
                    samples=list(samples),
                    detail=detail,
                )
            )
            return
        current.run_id, current.kind, current.samples = run_id, kind, list(samples)
        current.detail, current.updated_at = detail, at
