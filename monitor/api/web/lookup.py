"""What the pages read besides the store's records: baselines on disk, chart points, error pages.

Baselines on disk are the truth for which one is active (as in the API); a baseline directory
that cannot be read is shown as unknown rather than failing the page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from monitor.api.web import templating
from monitor.api.web.svg import Point
from monitor.errors import MonitorError
from monitor.files import baseline_meta, baselines
from monitor.store import RunRecord


def active_baseline(root: Path, model: str) -> tuple[str | None, baseline_meta.BaselineMeta | None]:
    """The active baseline id of ``model`` and its metadata (either may be None when unknown)."""
    try:
        baseline_id = baselines.active_id(root, model)
        if baseline_id is None:
            return None, None
        return baseline_id, baselines.get(root, baseline_id).meta
    except (MonitorError, OSError, ValueError):
        return None, None


def disk_baselines(root: Path, model: str) -> list[baseline_meta.BaselineMeta]:
    """Every readable baseline of ``model`` on disk, oldest first."""
    try:
        return [b.meta for b in baselines.list_baselines(root, model)]
    except (MonitorError, OSError, ValueError):
        return []


def created_at(meta: baseline_meta.BaselineMeta | None) -> datetime | None:
    if meta is None:
        return None
    try:
        return datetime.fromisoformat(meta.created_at)
    except (TypeError, ValueError):
        return None


def ratio_of(run: RunRecord) -> float | None:
    """The run's error ÷ tolerance (``RunRecord.error_ratio``); None when the run compared nothing (an error)."""
    value = run.error_ratio
    if value is None or (math.isnan(value) and run.verdict == "error"):
        return None
    return float(value)


def points(runs: Sequence[RunRecord]) -> list[Point]:
    """Chart points, oldest first, from runs newest first (as the store returns them)."""
    return [Point(r.finished_at, ratio_of(r), r.verdict.value, r.id) for r in reversed(runs)]


def error_page(status: int, title: str, message: str) -> str:
    """A plain page for an unknown model, run or environment (never a traceback)."""
    crumbs = [("Models", "/"), (title, None)]
    return templating.render("error.html", title=title, status=status, message=message, crumbs=crumbs)
