"""Read queries of the store; each returns plain records.

``history_runs_query`` is the statement behind ``onnxmon history`` and the status page; it
walks the ``runs(model_id, started_at)`` index backwards and stops after ``limit`` rows, so its
cost does not grow with the size of the table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from monitor.results import OutputStats, run_error_ratio
from monitor.store import convert, schema
from monitor.store.records import BaselineRecord, EnvironmentRecord, EventRecord, HistoryItem, RunRecord


def history_runs_query(
    model_id: int,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    node: str | None = None,
    limit: int = 200,
    candidates: bool | None = False,
) -> Select[Any]:
    """Newest runs of one model (optionally on one node), newest first.

    ``candidates``: False production's runs only (the default: alerts, metrics, states), True a
    rehearsal's runs only, None both (history shows both, candidates marked).
    """
    stmt = select(schema.Run).where(schema.Run.model_id == model_id)
    if candidates is not None:
        stmt = stmt.where(schema.Run.candidate.is_(candidates))
    if node is not None:
        stmt = stmt.where(schema.Run.node == node)
    if since is not None:
        stmt = stmt.where(schema.Run.started_at >= since)
    if until is not None:
        stmt = stmt.where(schema.Run.started_at <= until)
    return stmt.order_by(schema.Run.started_at.desc(), schema.Run.id.desc()).limit(limit)


def model_id(session: Session, model: str) -> int | None:
    return session.scalar(select(schema.Model.id).where(schema.Model.name == model))


def runs(
    session: Session,
    model: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    node: str | None = None,
    limit: int = 200,
    candidates: bool | None = False,
) -> list[RunRecord]:
    found = model_id(session, model)
    if found is None:
        return []
    query = history_runs_query(found, since=since, until=until, node=node, limit=limit, candidates=candidates)
    rows = list(session.scalars(query))
    ratios = error_ratios(session, [row.id for row in rows])
    return [convert.run_record(row, model, error_ratio=ratios.get(row.id)) for row in rows]


def error_ratios(session: Session, run_ids: list[int]) -> dict[int, float | None]:
    """Each run's error ÷ tolerance (``results.run_error_ratio``) from its output rows.

    One narrow query reads the stored ``error_ratio`` column; only rows where it is NULL (written
    before the comparison measured it) are loaded whole, for ``OutputStats.error_ratio``'s exact
    fallbacks, so the figure is the one the run page shows per output.
    """
    per_run: dict[int, list[float | None]] = {}
    missing: list[int] = []
    for start in range(0, len(run_ids), 500):  # bounded IN lists
        chunk = run_ids[start : start + 500]
        rows = session.execute(
            select(schema.OutputResult.id, schema.OutputResult.run_id, schema.OutputResult.error_ratio).where(
                schema.OutputResult.run_id.in_(chunk)
            )
        )
        for output_id, run_id, ratio in rows:
            if ratio is None:
                missing.append(output_id)
            else:
                per_run.setdefault(run_id, []).append(ratio)
    for start in range(0, len(missing), 500):
        for row in session.scalars(
            select(schema.OutputResult).where(schema.OutputResult.id.in_(missing[start : start + 500]))
        ):
            per_run.setdefault(row.run_id, []).append(convert.output_stats(row).error_ratio)
    return {run_id: run_error_ratio(ratios) for run_id, ratios in per_run.items()}


def history(
    session: Session, model: str, *, since: datetime | None = None, limit: int = 200, node: str | None = None
) -> list[HistoryItem]:
    """Runs and events interleaved, newest first; an event sorts just before the run that caused it."""
    found = model_id(session, model)
    if found is None:
        return []
    run_rows = list(session.scalars(history_runs_query(found, since=since, node=node, limit=limit, candidates=None)))
    # Events of the period the runs cover (all of it when fewer than ``limit`` runs came back).
    start = run_rows[-1].started_at if len(run_rows) == limit else since
    stmt = select(schema.Event).where(schema.Event.model_id == found)
    if start is not None:
        stmt = stmt.where(schema.Event.at >= start)
    if node is not None:
        stmt = stmt.where(schema.Event.node.in_((node, "")))
    event_rows = session.scalars(stmt.order_by(schema.Event.at.desc(), schema.Event.id.desc()).limit(limit))
    ratios = error_ratios(session, [r.id for r in run_rows])
    keyed: list[tuple[tuple[datetime, int, int], HistoryItem]] = [
        (
            (r.started_at, 1, r.id),
            HistoryItem(at=r.started_at, run=convert.run_record(r, model, error_ratio=ratios.get(r.id))),
        )
        for r in run_rows
    ]
    keyed += [((e.at, 0, e.id), HistoryItem(at=e.at, event=convert.event_record(e, model))) for e in event_rows]
    keyed.sort(key=lambda pair: pair[0], reverse=True)
    return [item for _, item in keyed]


def run(session: Session, run_id: int) -> RunRecord | None:
    row = session.execute(
        select(schema.Run, schema.Model.name)
        .join(schema.Model, schema.Model.id == schema.Run.model_id)
        .where(schema.Run.id == run_id)
    ).first()
    if row is None:
        return None
    outputs = session.scalars(
        select(schema.OutputResult).where(schema.OutputResult.run_id == run_id).order_by(schema.OutputResult.id)
    )
    return convert.run_record(row[0], row[1], tuple(convert.output_stats(o) for o in outputs))


def latest_per_model(session: Session, known: Mapping[int, RunRecord] | None = None) -> list[RunRecord]:
    """The ``latest_runs`` pointers' runs with their outputs, model names sorted.

    A run never changes once written, so records already in ``known`` (by run id) are reused
    and only newer runs are loaded: a scrape between two checks reads ~O(models) tiny rows.
    """
    known = known or {}
    pointers = session.execute(
        select(schema.LatestRun.run_id, schema.Model.name, schema.LatestRun.node)
        .join(schema.Model, schema.Model.id == schema.LatestRun.model_id)
        .order_by(schema.Model.name, schema.LatestRun.node)
    ).all()
    missing = [run_id for run_id, _, _ in pointers if run_id not in known]
    loaded: dict[int, RunRecord] = {}
    if missing:
        rows = session.execute(
            select(schema.Run, schema.Model.name, schema.OutputResult)
            .join(schema.Model, schema.Model.id == schema.Run.model_id)
            .outerjoin(schema.OutputResult, schema.OutputResult.run_id == schema.Run.id)
            .where(schema.Run.id.in_(missing))
            .order_by(schema.Run.id, schema.OutputResult.id)
        ).all()
        grouped: dict[int, tuple[schema.Run, str, list[OutputStats]]] = {}
        for run_row, name, output in rows:
            entry = grouped.setdefault(run_row.id, (run_row, name, []))
            if output is not None:
                entry[2].append(convert.output_stats(output))
        loaded = {run_id: convert.run_record(r, name, tuple(outs)) for run_id, (r, name, outs) in grouped.items()}
    records = []
    for run_id, _, _ in pointers:
        record = known[run_id] if run_id in known else loaded.get(run_id)  # records are falsy when failing
        if record is not None:
            records.append(record)
    return records


def events(
    session: Session,
    *,
    model: str | None = None,
    since: datetime | None = None,
    kind: str | None = None,
    node: str | None = None,
    limit: int = 500,
) -> list[EventRecord]:
    stmt = select(schema.Event, schema.Model.name).join(schema.Model, schema.Model.id == schema.Event.model_id)
    if model is not None:
        stmt = stmt.where(schema.Model.name == model)
    if node is not None:
        stmt = stmt.where(schema.Event.node == node)
    if since is not None:
        stmt = stmt.where(schema.Event.at >= since)
    if kind is not None:
        stmt = stmt.where(schema.Event.kind == kind)
    rows = session.execute(stmt.order_by(schema.Event.at.desc(), schema.Event.id.desc()).limit(limit))
    return [convert.event_record(e, name) for e, name in rows]


def baseline_history(session: Session, model: str) -> list[BaselineRecord]:
    rows = session.execute(
        select(schema.Baseline, schema.Benchset)
        .join(schema.Model, schema.Model.id == schema.Baseline.model_id)
        .outerjoin(schema.Benchset, schema.Benchset.id == schema.Baseline.benchset_id)
        .where(schema.Model.name == model)
        .order_by(schema.Baseline.created_at, schema.Baseline.id)
    ).all()
    promotions = session.execute(
        select(schema.Event.at, schema.Event.new)
        .join(schema.Model, schema.Model.id == schema.Event.model_id)
        .where(schema.Model.name == model, schema.Event.kind == "baseline_promoted")
        .order_by(schema.Event.at, schema.Event.id)
    ).all()
    periods: dict[str, list[tuple[datetime, datetime | None]]] = {}
    current: str | None = None
    for at, new in promotions:
        if current is not None and periods.get(current):
            periods[current][-1] = (periods[current][-1][0], at)
        if new is not None:
            periods.setdefault(new, []).append((at, None))
        current = new
    records = []
    for baseline, bench in rows:
        spans = tuple(periods.get(baseline.baseline_id, ()))
        record = convert.baseline_record(baseline, model, bench)
        if spans:
            record = dataclasses.replace(
                record, active_periods=spans, active_from=spans[-1][0], active_until=spans[-1][1]
            )
        records.append(record)
    return records


def find_environments(session: Session, prefix: str, *, limit: int = 20) -> list[EnvironmentRecord]:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = session.scalars(
        select(schema.Environment)
        .where(schema.Environment.fingerprint.like(f"{escaped}%", escape="\\"))
        .order_by(schema.Environment.last_seen.desc())
        .limit(limit)
    )
    return [EnvironmentRecord(r.fingerprint, dict(r.snapshot), r.first_seen, r.last_seen) for r in rows]
