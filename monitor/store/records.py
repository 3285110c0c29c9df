"""Plain frozen values the store hands out, so that no ORM object leaves ``monitor/store/``.

Callers (CLI, API, the ``/metrics`` collector) read these; only ``store`` imports SQLAlchemy.
A run's parts are the types of ``monitor.results``: its outputs are ``OutputStats`` (with their
``AppliedTolerance`` and ``Reason`` values), the very values a check produced, so nothing reads
a stored output differently from a fresh one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.details import Details
from monitor.results import OutputDigest, OutputStats, Reason, Verdict


@dataclass(frozen=True)
class RunRecord:
    """One stored check run; ``outputs`` is filled only where asked (``Store.run``, ``latest_per_model``).

    The fields it shares with ``CheckResult`` mean the same; timestamps are datetimes here.
    ``worst_*`` describe ``results.worst_output`` of the run's outputs as written, so they are
    there without the outputs: ``worst_atol_ratio`` is its ``OutputStats.atol_ratio``.
    """

    id: int
    model: str
    verdict: Verdict
    started_at: datetime
    finished_at: datetime
    duration_s: float
    node: str | None = None
    pod: str | None = None
    reasons: tuple[Reason, ...] = ()
    attribution: str | None = None
    baseline_id: str | None = None
    environment_fingerprint: str | None = None
    model_sha256: str | None = None
    benchset: str | None = None
    benchset_sha256: str | None = None
    sample_count: int = 0
    providers_requested: tuple[str, ...] = ()
    providers_effective: tuple[str, ...] = ()
    timings: Mapping[str, float] = field(default_factory=dict)
    details: Details = field(default_factory=lambda: Details())  # typed as CheckResult.details: monitor.details
    worst_output: str | None = None
    worst_max_abs_error: float | None = None
    worst_atol_ratio: float | None = None
    outputs: tuple[OutputStats, ...] = ()
    error_ratio: float | None = None
    """The run's error ÷ tolerance: ``results.run_error_ratio`` of its outputs (read from the output rows)."""
    candidate: bool = False
    """A rehearsal's run on a candidate stack (``onnxmon rehearse``), not production's."""
    digests: tuple[OutputDigest, ...] = ()
    run_digest: str | None = None
    stack: Mapping[str, str] = field(default_factory=dict)
    stack_key: str | None = None
    """What the run computed and on which stack, as ``CheckResult`` has them (docs/fleet.md)."""

    def __bool__(self) -> bool:
        return self.verdict is Verdict.PASS

    def all_reasons(self) -> tuple[Reason, ...]:
        """Run-level reasons followed by every loaded output's reasons (as ``CheckResult.all_reasons``)."""
        return self.reasons + tuple(r for o in self.outputs for r in o.reasons)


def pick_latest(records: Iterable[RunRecord], node: str | None) -> dict[str, RunRecord]:
    """Newest run per model; the run of ``node`` wins when it has one (daemonset mode: this process's node)."""
    chosen: dict[str, RunRecord] = {}
    for record in records:
        current = chosen.get(record.model)
        if current is None:
            chosen[record.model] = record
            continue
        own_new, own_cur = (node is not None and r.node == node for r in (record, current))
        if (own_new, record.finished_at) > (own_cur, current.finished_at):
            chosen[record.model] = record
    return chosen


@dataclass(frozen=True)
class EventRecord:
    """A change of state: ``kind`` went from ``old`` to ``new`` at ``at`` (``detail`` says more)."""

    id: int
    model: str
    kind: str
    at: datetime
    node: str | None = None
    run_id: int | None = None
    old: str | None = None
    new: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HistoryItem:
    """One line of a model's history: either a run or an event, never both."""

    at: datetime
    run: RunRecord | None = None
    event: EventRecord | None = None

    @property
    def kind(self) -> str:
        """``"run"`` or the event kind."""
        return "run" if self.run is not None else self.event.kind if self.event is not None else "?"


@dataclass(frozen=True)
class BaselineRecord:
    """A baseline known to the store: provenance, environment and when it was the active one.

    ``active_periods`` comes from the ``baseline_promoted`` events (a baseline can be active
    more than once); ``active_from``/``active_until`` are the latest period (until ``None``: still active).
    """

    baseline_id: str
    model: str
    created_at: datetime
    source: str
    is_active: bool
    model_sha256: str | None = None
    benchset: str | None = None
    benchset_sha256: str | None = None
    environment_fingerprint: str | None = None
    path: str | None = None
    promoted_at: datetime | None = None
    promoted_by: str | None = None
    run_id: int | None = None
    active_from: datetime | None = None
    active_until: datetime | None = None
    active_periods: tuple[tuple[datetime, datetime | None], ...] = ()


@dataclass(frozen=True)
class EnvironmentRecord:
    """A distinct environment snapshot and when it was first and last seen."""

    fingerprint: str
    snapshot: Mapping[str, Any]
    first_seen: datetime
    last_seen: datetime


@dataclass(frozen=True)
class PruneStats:
    """What ``Store.prune`` removed, and how many old runs it kept because a baseline came from them."""

    runs_deleted: int = 0
    outputs_deleted: int = 0
    events_deleted: int = 0
    runs_kept_for_baselines: int = 0
