"""What the API reads through: the ``DaemonHandle`` protocol (a leaf every page and route imports).

The daemon implements it; tests implement it over a real store and registry. It lives apart from
``app.py`` so the pages and helpers the app mounts can name it without importing the app back.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry

from monitor.config.settings import Settings
from monitor.results import CheckResult
from monitor.store import Store


class DaemonHandle(Protocol):
    """What the API needs from the daemon (tests implement it over a real store and registry)."""

    @property
    def settings(self) -> Settings:
        """The current (last good) config."""
        ...

    @property
    def store(self) -> Store: ...

    @property
    def registry(self) -> CollectorRegistry:
        """The registry the metrics live in."""
        ...

    def readiness(self) -> dict[str, bool]:
        """``{"config_loaded": ..., "store_reachable": ..., "scheduler_running": ...}``."""
        ...

    def run_now(self, model: str) -> CheckResult:
        """Run one check synchronously (isolated) and record it; ``BusyError`` when no worker is free."""
        ...

    def reload(self) -> bool:
        """Re-read the config; False keeps the old one."""
        ...

    def promote(self, baseline_id: str, by: str) -> str:
        """Make ``baseline_id`` active, record the promotion; returns the model name."""
        ...
