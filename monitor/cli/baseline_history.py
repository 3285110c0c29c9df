"""``onnxmon baseline history MODEL``: every baseline from disk and store, and where each is recorded.

A baseline committed with the repository (or copied onto a volume) lives on disk and is active
there, but the store only learns of it when onnxmon records it (capture, import, promote). An
empty table for a model whose active baseline is on disk looked like "no baselines"; here each
row says whether it is on disk, in the store or both, and why one is missing from the store.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import typer

from monitor import jsonsafe
from monitor.cli import common
from monitor.config.dburl import mask_url
from monitor.config.settings import Settings
from monitor.errors import ConfigError, MonitorError
from monitor.files import baselines

DISK_ONLY = (
    "on disk only: the store has not recorded it (committed or copied next to the config, not captured"
    " through onnxmon); `onnxmon baseline promote ID` records it"
)
STORE_ONLY = "in the store only: its directory is gone from store.baselines_dir"


@dataclass(frozen=True)
class Entry:
    """One baseline as the two places know it."""

    baseline_id: str
    source: str
    created_at: str
    active: bool
    on_disk: bool
    in_store: bool
    environment_fingerprint: str | None
    active_from: datetime | None = None
    active_until: datetime | None = None
    note: str = ""

    @property
    def recorded(self) -> str:
        return "disk+store" if self.on_disk and self.in_store else "disk" if self.on_disk else "store"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"recorded": self.recorded}


def collect(settings: Settings, model: str) -> list[Entry]:
    """Disk and store merged by id, oldest first; an unreachable store is a note on every row, not an error."""
    root = settings.store.baselines_dir
    active = baselines.active_id(root, model)
    on_disk = {b.id: b for b in baselines.list_baselines(root, model)}
    stored: dict[str, Any] = {}
    store_problem = ""
    try:
        with common.open_store(settings) as store:
            stored = {r.baseline_id: r for r in store.baseline_history(model)}
    except Exception as exc:  # an unreachable or unmigrated database: disk still answers
        first = str(exc).splitlines()[0] if str(exc) else ""
        # onnxmon's own errors are one sentence for a user, whole; anything else is named and bounded
        said = first if isinstance(exc, MonitorError) else f"{type(exc).__name__}: {first[:200]}"
        store_problem = "store not read"
        where = mask_url(settings.store.url)
        said = said if where in said else f"{where}: {said}"
        typer.echo(f"onnxmon: warning: {store_problem}: {said}; baselines on disk only", err=True)
    if not on_disk and not stored and model not in {m.name for m in settings.models}:
        raise ConfigError(
            f"model {model!r} is not in {settings.source} and has no baselines under {root}"
            f" (models: {[m.name for m in settings.models]})"
        )
    entries = []
    for baseline_id in on_disk.keys() | stored.keys():
        disk, record = on_disk.get(baseline_id), stored.get(baseline_id)
        note = store_problem or (DISK_ONLY if record is None else STORE_ONLY if disk is None else "")
        if disk is not None:
            source, created, is_active = disk.meta.source, disk.meta.created_at, baseline_id == active
        else:
            assert record is not None  # the id came from one of the two
            source, created, is_active = record.source, _when(record.created_at), bool(record.is_active)
        entries.append(
            Entry(
                baseline_id=baseline_id,
                source=source,
                created_at=jsonsafe.normalized(created),
                active=is_active,
                on_disk=disk is not None,
                in_store=record is not None,
                environment_fingerprint=(disk.meta.environment_fingerprint if disk else None)
                or (record.environment_fingerprint if record else None),
                active_from=record.active_from if record else None,
                active_until=record.active_until if record else None,
                note=note,
            )
        )
    return sorted(entries, key=lambda e: (e.created_at, e.baseline_id))


def table(entries: list[Entry], wide: bool) -> common.PlainTable:
    """Full ids always (folded, never cut); ``wide`` shows the 64-hex fingerprints.

    On a narrow terminal (``common.narrow_terminal``), times to the minute without the year and
    fingerprints of 12 hex (``env diff`` takes 12), as ``history`` does, so every column fits in 80.
    """
    narrow = common.narrow_terminal() and not wide
    headers = ["", "id", "source", "created", "active from", "active until", "environment", "recorded", "note"]
    shown = common.PlainTable()
    for header in headers:
        if not (narrow and header in NARROW_DROPS):  # a narrow terminal's fingerprint stays whole (env diff)
            shown.add_column(header, no_wrap=narrow and header == "environment")
    for e in entries:
        fingerprint = e.environment_fingerprint or "-"
        created = datetime.fromisoformat(e.created_at) if narrow else None
        row = [
            "*" if e.active else "",
            e.baseline_id,
            e.source,
            _when(created, narrow) if created else e.created_at,
            _when(e.active_from, narrow),
            _when(e.active_until, narrow) if e.active_from else "-",
            fingerprint if wide else fingerprint[: 12 if narrow else 16],
            e.recorded,
            e.note,
        ]
        shown.add_row(
            *(cell for header, cell in zip(headers, row, strict=True) if not (narrow and header in NARROW_DROPS))
        )
    return shown


NARROW_DROPS = ("recorded",)
"""Columns a narrow terminal's table leaves out (disk+store is the usual answer); -o wide and JSON have them."""


def _when(value: datetime | None, narrow: bool = False) -> str:
    return value.strftime("%m-%d %H:%M" if narrow else "%Y-%m-%dT%H:%M:%SZ") if value else "-"
