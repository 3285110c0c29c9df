"""What the alert rules need from the history, so that they hold from a new target's first sample.

Why: in Kubernetes an upgrade is a restart: a new pod, a new scrape target, new series. Its first
checks usually finish before its first scrape, so a counter is already 1 at its first sample and
``increase()`` of it stays 0: an alert built on "the counter moved" never fires for the one event
it exists for. The store knows the facts whatever the process, so the ``/metrics`` collector
exports them as gauges, true at the first sample:

* of the model's last ``RECENT_RUNS`` runs on this node, how many ended in error and how many
  failed each output (the "2 of the last 4 runs" rules count them, not counter increases);
* when the environment last changed (the newest ``environment_changed`` event of the model on
  this node) and when a baseline was last promoted (the newest ``baseline_promoted`` event).

The window is runs, not time: a drift that fails every run pages at its second run whatever the
schedule interval, across any number of restarts in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from monitor.results import Verdict
from monitor.store import events as transitions
from monitor.store import schema as s
from monitor.store.queries import history_runs_query, model_id

RECENT_RUNS = 4
"""How many of a model's newest runs the alert rules look at (they fire at 2 of them)."""


@dataclass(frozen=True)
class RecentState:
    """A model's recent runs on one node, as the alert rules count them, and its last changes."""

    runs: int = 0
    """Runs in the window (``RECENT_RUNS`` once the model has run that often)."""
    errors: int = 0
    """Runs of the window that ended in verdict ``error`` (precision not measured)."""
    failing: Mapping[str, int] = field(default_factory=dict)
    """Per output: runs of the window in which the output was out of tolerance."""
    environment_changed_at: datetime | None = None
    baseline_promoted_at: datetime | None = None


def recent_state(session: Session, model: str, node: str | None, window: int = RECENT_RUNS) -> RecentState:
    """The ``RecentState`` of ``model`` on ``node`` (``None`` or ``""``: runs recorded without a node)."""
    found = model_id(session, model)
    if found is None:
        return RecentState()
    node = node or ""
    rows = session.execute(
        history_runs_query(found, node=node, limit=window).with_only_columns(s.Run.id, s.Run.verdict)
    ).all()
    run_ids = [run_id for run_id, _ in rows]
    failing: dict[str, int] = {}
    if run_ids:
        outputs = session.execute(
            select(s.OutputResult.name, func.count())
            .where(s.OutputResult.run_id.in_(run_ids), s.OutputResult.verdict == Verdict.FAIL.value)
            .group_by(s.OutputResult.name)
        )
        failing = {name: int(count) for name, count in outputs}
    changed = dict(
        session.execute(
            select(s.Event.kind, func.max(s.Event.at))
            .where(
                s.Event.model_id == found,
                s.Event.kind.in_((transitions.ENVIRONMENT_CHANGED, transitions.BASELINE_PROMOTED)),
                s.Event.node.in_((node, "")),
            )
            .group_by(s.Event.kind)
        ).all()
    )
    return RecentState(
        runs=len(rows),
        errors=sum(1 for _, verdict in rows if verdict == Verdict.ERROR.value),
        failing=failing,
        environment_changed_at=changed.get(transitions.ENVIRONMENT_CHANGED),
        baseline_promoted_at=changed.get(transitions.BASELINE_PROMOTED),
    )
