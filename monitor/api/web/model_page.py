"""One model (``/models/{name}``): the run-history chart with event markers, the latest run's outputs,
the active baseline and its lineage, recent events and the list of runs (``templates/model.html``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from monitor.api import environments
from monitor.api.web import events, lookup, outputs, templating
from monitor.api.web.env_page import NotFound
from monitor.api.web.formats import duration, utc
from monitor.api.web.svg import MARKER_COLORS, Marker, history_chart
from monitor.results import Reason
from monitor.store import BaselineRecord, EventRecord, RunRecord

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle
    from monitor.config.schema import ModelConfig
    from monitor.config.settings import Settings
    from monitor.files.baseline_meta import BaselineMeta

CHART_RUNS = 100
LISTED_RUNS = 50
LISTED_EVENTS = 30
LISTED_REHEARSALS = 20
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Configured:
    """What the config says of the model."""

    path: str
    benchset: str
    providers: str
    schedule: str
    localize_on_fail: str


@dataclass(frozen=True)
class RunLine:
    """One run as the page lists it (the latest run's facts, a row of the runs table)."""

    id: int
    verdict: str
    finished_at: datetime
    fingerprint: str | None
    worst_output: str
    error_ratio: float | None
    reason_codes: str
    attribution: str
    node: str
    reasons: tuple[Reason, ...]


@dataclass(frozen=True)
class BaselineLine:
    id: str
    active: bool
    on_disk: bool
    source: str
    created: datetime | None
    recorded: bool  # in the store's history (its ``periods``: when it was active), not only on disk
    periods: list[str]
    promoted_by: str
    fingerprint: str | None
    sha: str


def render(handle: DaemonHandle, name: str, now: datetime) -> str:
    settings = handle.settings
    configured = {m.name: m for m in settings.models}
    if not re.fullmatch(environments.NAME, name) or len(name) > 200:
        raise NotFound(404, "a model name has letters, digits, '.', '_' and '-' only")
    if name not in configured and name not in handle.store.models():
        raise NotFound(404, f"no model {name!r} in the config or the history")
    runs = handle.store.runs(name, limit=CHART_RUNS)
    recorded_events = handle.store.events(model=name, limit=500)
    latest = handle.store.run(runs[0].id) if runs else None
    baseline_id, _ = lookup.active_baseline(settings.store.baselines_dir, name)
    model = configured.get(name)
    return templating.render(
        "model.html",
        title=name,
        crumbs=[("Models", "/"), (name, None)],
        now=now,
        name=name,
        baseline_id=baseline_id,
        configured=_configured(settings, model) if model is not None else None,
        latest=_line(latest) if latest is not None else None,
        outputs=outputs.rows(latest.outputs) if latest is not None else [],
        output_headers=outputs.HEADERS,
        run_count=len(runs),
        chart=history_chart(lookup.points(runs), _markers(runs, recorded_events)),
        baselines=_baselines(handle, name, baseline_id),
        events=events.rows(recorded_events[:LISTED_EVENTS]),
        runs=[_line(r) for r in runs[:LISTED_RUNS]],
        rehearsals=[_line(r) for r in handle.store.runs(name, limit=LISTED_REHEARSALS, candidates=True)],
    )


def _configured(settings: Settings, model: ModelConfig) -> Configured:
    schedule = settings.schedule_for(model)
    every = f"every {duration(schedule.interval)}" if schedule.interval is not None else f"cron {schedule.cron}"
    return Configured(
        path=str(model.path),
        benchset=str(model.benchset),
        providers=", ".join(p.name for p in model.providers),
        schedule=every,
        localize_on_fail="yes" if model.localize_on_fail else "no",
    )


def _line(run: RunRecord) -> RunLine:
    return RunLine(
        id=run.id,
        verdict=run.verdict.value,
        finished_at=run.finished_at,
        fingerprint=run.environment_fingerprint,
        worst_output=run.worst_output or "—",
        error_ratio=run.error_ratio,
        reason_codes=", ".join(dict.fromkeys(x.code for x in run.reasons)) or "—",
        attribution=run.attribution or "",
        node=run.node or "—",
        reasons=run.all_reasons(),
    )


def _markers(runs: list[RunRecord], recorded: list[EventRecord]) -> list[Marker]:
    oldest = runs[-1].started_at if runs else None
    return [
        Marker(e.at, e.kind, events.label(e))
        for e in recorded
        if e.kind in MARKER_COLORS and oldest is not None and e.at >= oldest
    ]


def _baselines(handle: DaemonHandle, name: str, active_id: str | None) -> list[BaselineLine]:
    """Every baseline on disk or in the store, newest first: the lineage reads from now back."""
    root = handle.settings.store.baselines_dir
    on_disk: dict[str, BaselineMeta] = {m.id: m for m in lookup.disk_baselines(root, name)}
    recorded: dict[str, BaselineRecord] = {b.baseline_id: b for b in handle.store.baseline_history(name)}
    created: dict[str, datetime | None] = {
        i: recorded[i].created_at if i in recorded else lookup.created_at(on_disk[i]) for i in {*recorded, *on_disk}
    }

    def newest_first(baseline_id: str) -> tuple[datetime, str]:
        moment = created[baseline_id]
        return (utc(moment) if moment is not None else _EPOCH, baseline_id)

    lines = []
    for baseline_id in sorted(created, key=newest_first, reverse=True):
        record, meta = recorded.get(baseline_id), on_disk.get(baseline_id)
        fingerprint = record.environment_fingerprint if record else meta.environment_fingerprint if meta else None
        sha = (record.model_sha256 if record else None) or (meta.model_sha256 if meta else None) or "—"
        periods = [
            f"{start:%Y-%m-%d %H:%M} → {'now' if end is None else f'{end:%Y-%m-%d %H:%M}'}"
            for start, end in (record.active_periods if record else ())
        ]
        lines.append(
            BaselineLine(
                id=baseline_id,
                active=baseline_id == active_id,
                on_disk=meta is not None,
                source=record.source if record else meta.source if meta else "—",
                created=created[baseline_id],
                recorded=record is not None,
                periods=periods,
                promoted_by=record.promoted_by if record and record.promoted_by else "—",
                fingerprint=fingerprint,
                sha=sha[:12],
            )
        )
    return lines
