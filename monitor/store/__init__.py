"""The durable history: SQLAlchemy models, Alembic migrations and the ``Store`` that reads and writes them.

Only this package imports SQLAlchemy; everything it hands out is a plain frozen record.
"""

from __future__ import annotations

from monitor.store.events import EVENT_KINDS
from monitor.store.health import StoreOutage, StoreUnavailable
from monitor.store.migrate import SchemaLocked, SchemaTooNew
from monitor.store.recent import RECENT_RUNS, RecentState
from monitor.store.records import (
    BaselineRecord,
    EnvironmentRecord,
    EventRecord,
    HistoryItem,
    PruneStats,
    RunRecord,
    pick_latest,
)
from monitor.store.repo import Store

__all__ = [
    "EVENT_KINDS",
    "RECENT_RUNS",
    "BaselineRecord",
    "EnvironmentRecord",
    "EventRecord",
    "HistoryItem",
    "PruneStats",
    "RecentState",
    "RunRecord",
    "SchemaLocked",
    "SchemaTooNew",
    "Store",
    "StoreOutage",
    "StoreUnavailable",
    "pick_latest",
]
