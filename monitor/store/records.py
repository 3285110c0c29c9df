"""Plain frozen values the store hands out, so that no ORM object leaves ``monitor/store/``.

Callers (CLI, API, the ``/metrics`` collector) read these; only ``store`` imports SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.results import AppliedTolerance, OutputMetrics, Reason, Verdict


@dataclass(frozen=True)
class OutputRecord:
    """One stored output comparison of a run."""

    name: str
    verdict: Verdict
    metrics: OutputMetrics
    tolerance: AppliedTolerance
    reasons: tuple[Reason, ...] = ()
    dtype: str = ""
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunRecord:
    """One stored check run; ``outputs`` is filled only where asked (``Store.run``, ``latest_per_model``).

    ``worst_atol_ratio`` is the worst output's ``max_abs_error / atol``: how many absolute
    tolerances away the worst element is (``rtol`` adds headroom, so > 1 alone is not a failure).
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
    details: Mapping[str, Any] = field(default_factory=dict)
    worst_output: str | None = None
    worst_max_abs_error: float | None = None
    worst_atol_ratio: float | None = None
    outputs: tuple[OutputRecord, ...] = ()

    def __bool__(self) -> bool:
        return self.verdict is Verdict.PASS


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
