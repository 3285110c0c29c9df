"""What the alert rules need from the history, so that they hold from a new target's first sample.

Why: in Kubernetes an upgrade is a restart: a new pod, a new scrape target, new series. Its first
checks usually finish before its first scrape, so a counter is already 1 at its first sample and
``increase()`` of it stays 0: an alert built on "the counter moved" never fires for the one event
it exists for. The store knows the facts whatever the process, so the ``/metrics`` collector
exports them as gauges, true at the first sample:

* of the model's last ``RECENT_RUNS`` runs on this node, how many ended in error, how many failed
  (verdict ``fail``, any reason: an output out of tolerance, a changed model or benchmark set, a
  provider fallback) and how many failed each output (the "2 of the last 4 runs" rules count
  them, not counter increases);
* when the environment last changed (the newest ``environment_changed`` event of the model on
  this node) and when a baseline was last promoted (the newest ``baseline_promoted`` event).

The window is runs, not time: a drift that fails every run pages at its second run whatever the
schedule interval, across any number of restarts in between.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from sqlalchemy import CompoundSelect, bindparam, func, select, union_all
from sqlalchemy.orm import Session

from monitor.results import Verdict
from monitor.store import events, schema

_T = TypeVar("_T")

RECENT_RUNS = 4
"""How many of a model's newest runs the alert rules look at (they fire at 2 of them)."""


@dataclass(frozen=True)
class RecentState:
    """A model's recent runs on one node, as the alert rules count them, and its last changes."""

    runs: int = 0
    """Runs in the window (``RECENT_RUNS`` once the model has run that often)."""
    errors: int = 0
    """Runs of the window that ended in verdict ``error`` (precision not measured)."""
    failed: int = 0
    """Runs of the window that ended in verdict ``fail``, whatever the reason (check-level or an output)."""
    failing: Mapping[str, int] = field(default_factory=dict)
    """Per output: runs of the window in which the output was out of tolerance."""
    environment_changed_at: datetime | None = None
    baseline_promoted_at: datetime | None = None
    cause: str | None = None
    """The top cause of the newest diagnosis of a window's run that did not pass: what a page names as the
    likely cause (a diagnosis lands after its run, so the last run's own is often not there yet)."""


def recent_states(
    session: Session, models: Iterable[str], node: str | None, window: int = RECENT_RUNS
) -> dict[str, RecentState]:
    """The ``RecentState`` of each of ``models`` on ``node`` (``None`` or ``""``: runs recorded without a node).

    One read for any number of models: each model's newest ``window`` runs come from one statement
    (a ``UNION ALL`` of per-model index lookups, ``_CHUNK`` models at a time), then their failing
    outputs and the models' last changes from one statement each. A model the store does not know
    gets an empty ``RecentState``.
    """
    wanted = list(dict.fromkeys(models))
    node = node or ""
    ids: dict[str, int] = {}
    for names in _chunks(wanted):
        ids.update(
            session.execute(select(schema.Model.name, schema.Model.id).where(schema.Model.name.in_(names))).all()
        )
    rows: list[tuple[int, int, str]] = []
    for model_ids in _chunks(list(ids.values())):
        params: dict[str, object] = {f"m{index}": found for index, found in enumerate(model_ids)}
        rows.extend(session.execute(_newest_runs(len(model_ids), window), {**params, "node": node}))
    model_of_run: dict[int, int] = {}
    verdicts: dict[int, list[str]] = {}
    verdict_of: dict[int, str] = {}
    for found, run_id, verdict in rows:
        model_of_run[run_id] = found
        verdict_of[run_id] = verdict
        verdicts.setdefault(found, []).append(verdict)
    failing: dict[int, dict[str, int]] = {}
    for run_ids in _chunks(list(model_of_run)):
        outputs = session.execute(
            select(schema.OutputResult.run_id, schema.OutputResult.name).where(
                schema.OutputResult.run_id.in_(run_ids), schema.OutputResult.verdict == Verdict.FAIL.value
            )
        )
        for run_id, name in outputs:
            counts = failing.setdefault(model_of_run[run_id], {})
            counts[name] = counts.get(name, 0) + 1
    causes: dict[int, str] = {}  # per model: its newest diagnosed run of the window that did not pass
    for run_id, cause in _window_causes(session, [r for r in model_of_run if verdict_of[r] != Verdict.PASS.value]):
        causes.setdefault(model_of_run[run_id], cause)
    changed: dict[tuple[int, str], datetime] = {}
    for model_ids in _chunks(list(ids.values())):
        latest = session.execute(
            select(schema.Event.model_id, schema.Event.kind, func.max(schema.Event.at))
            .where(
                schema.Event.model_id.in_(model_ids),
                schema.Event.kind.in_((events.ENVIRONMENT_CHANGED, events.BASELINE_PROMOTED)),
                schema.Event.node.in_((node, "")),
            )
            .group_by(schema.Event.model_id, schema.Event.kind)
        )
        changed.update({(found, kind): at for found, kind, at in latest})
    states = {}
    for model in wanted:
        known = ids.get(model)
        if known is None:
            states[model] = RecentState()
            continue
        window_verdicts = verdicts.get(known, [])
        states[model] = RecentState(
            runs=len(window_verdicts),
            errors=sum(1 for verdict in window_verdicts if verdict == Verdict.ERROR.value),
            failed=sum(1 for verdict in window_verdicts if verdict == Verdict.FAIL.value),
            failing=failing.get(known, {}),
            environment_changed_at=changed.get((known, events.ENVIRONMENT_CHANGED)),
            baseline_promoted_at=changed.get((known, events.BASELINE_PROMOTED)),
            cause=causes.get(known),
        )
    return states


def _window_causes(session: Session, run_ids: list[int]) -> list[tuple[int, str]]:
    """(run id, top cause) of the newest diagnosis of each of ``run_ids`` that has one, newest run first."""
    newest: dict[int, str] = {}
    for chunk in _chunks(run_ids):
        rows = session.execute(
            select(schema.Diagnosis.run_id, schema.Diagnosis.cause)
            .where(schema.Diagnosis.run_id.in_(chunk))
            .order_by(schema.Diagnosis.id)
        )
        newest.update({run_id: cause for run_id, cause in rows})  # by diagnosis id: the newest wins
    return sorted(newest.items(), reverse=True)


_CHUNK = 200
"""Models (or runs) per statement: within SQLite's limits on bound parameters and ``UNION ALL`` arms."""


@functools.lru_cache(maxsize=8)
def _newest_runs(models: int, window: int) -> CompoundSelect[int, int, str]:
    """The newest ``window`` production runs on ``:node`` of the models bound as ``:m0`` .. (as ``history_runs_query``).

    One ``UNION ALL`` arm per model, each an index lookup; the statement's shape depends only on
    the two counts, so it is built once per shape (building 200 arms cost more than running them).
    """
    run = schema.Run
    arms = [
        select(run.model_id, run.id, run.verdict)
        .where(run.model_id == bindparam(f"m{index}"), run.node == bindparam("node"), run.candidate.is_(False))
        .order_by(run.started_at.desc(), run.id.desc())
        .limit(window)
        .subquery()
        .select()
        for index in range(models)
    ]
    return union_all(*arms)


def _chunks(items: Sequence[_T]) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]
