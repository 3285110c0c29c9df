"""One model (``/models/{name}``): the run-history chart with event markers, the latest run's outputs,
the active baseline and its lineage, recent events and the list of runs.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from monitor.api import environments
from monitor.api.web import lookup
from monitor.api.web.env_page import NotFound
from monitor.api.web.events import events_table
from monitor.api.web.events import label as events_label
from monitor.api.web.html import (
    badge,
    duration,
    esc,
    facts,
    fingerprint_link,
    link,
    num,
    page,
    section,
    table,
    url,
    utc,
    verdict_badge,
    when,
)
from monitor.api.web.run_page import outputs_table, reason_list
from monitor.api.web.svg import MARKER_COLORS, Marker, history_chart
from monitor.store import BaselineRecord, EventRecord, RunRecord

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle
    from monitor.files.baseline_meta import BaselineMeta

CHART_RUNS = 100
LISTED_RUNS = 50
LISTED_EVENTS = 30
LISTED_REHEARSALS = 20
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def render(handle: DaemonHandle, name: str, now: datetime) -> str:
    settings = handle.settings
    configured = {m.name: m for m in settings.models}
    if not re.fullmatch(environments.NAME, name) or len(name) > 200:
        raise NotFound(404, "a model name has letters, digits, '.', '_' and '-' only")
    if name not in configured and name not in handle.store.models():
        raise NotFound(404, f"no model {name!r} in the config or the history")
    runs = handle.store.runs(name, limit=CHART_RUNS)
    events = handle.store.events(model=name, limit=500)
    latest = handle.store.run(runs[0].id) if runs else None
    baseline_id, _ = lookup.active_baseline(settings.store.baselines_dir, name)
    model = configured.get(name)
    config_facts: list[tuple[str, str]] = [
        ("last run", when(latest.finished_at, now) if latest is not None else "never"),
        ("active baseline", f'<span class="mono">{esc(baseline_id)}</span>' if baseline_id else "none"),
    ]
    if model is not None:
        schedule = settings.schedule_for(model)
        every = f"every {duration(schedule.interval)}" if schedule.interval is not None else f"cron {schedule.cron}"
        config_facts += [
            ("file", f'<span class="mono">{esc(model.path)}</span>'),
            ("benchset", esc(model.benchset)),
            ("providers", esc(", ".join(p.name for p in model.providers))),
            ("schedule", esc(every)),
            ("localize on fail", esc("yes" if model.localize_on_fail else "no")),
        ]
    else:
        config_facts.append(("config", badge("not configured any more", "none")))
    parts = [
        f"<h1>{esc(name)} {verdict_badge(latest.verdict.value if latest is not None else None)}</h1>",
        '<div class="grid">',
        section("Model", facts(config_facts)),
        section("Latest run", _latest(latest, now)),
        "</div>",
        section(f"History: error ÷ tolerance, last {len(runs)} runs", _chart(runs, events)),
        section(f"Outputs of run #{latest.id}", outputs_table(latest.outputs)) if latest is not None else "",
        section("Baselines", _baselines(handle, name, baseline_id, now), anchor="baselines"),
        section("Recent events", events_table(events[:LISTED_EVENTS], now)),
        section("Runs", _runs(runs[:LISTED_RUNS], now), anchor="runs"),
    ]
    rehearsals = handle.store.runs(name, limit=LISTED_REHEARSALS, candidates=True)
    if rehearsals:  # candidate stacks replayed by `onnxmon rehearse`: beside production, never in it
        parts.append(section("Rehearsals on candidate stacks", _runs(rehearsals, now), anchor="rehearsals"))
    return page(name, "".join(parts), crumbs=[("Models", "/"), (name, None)])


def _latest(latest: RunRecord | None, now: datetime) -> str:
    if latest is None:
        return '<p class="muted">no run yet</p>'
    items = [
        ("run", link(url("runs", str(latest.id)), f"#{latest.id}") + " " + verdict_badge(latest.verdict.value)),
        ("finished", when(latest.finished_at, now)),
        ("environment", fingerprint_link(latest.environment_fingerprint)),
        ("error ÷ tolerance", esc(f"{num(latest.error_ratio)} (worst output: {latest.worst_output or '—'})")),
    ]
    if latest.attribution:
        items.append(("attributed to", badge(latest.attribution, "info")))
    reasons = list(latest.all_reasons())
    if reasons:
        items.append(("why", reason_list(reasons)))
    return facts(items)


def _chart(runs: list[RunRecord], events: list[EventRecord]) -> str:
    oldest = runs[-1].started_at if runs else None
    markers = [
        Marker(e.at, e.kind, events_label(e))
        for e in events
        if e.kind in MARKER_COLORS and oldest is not None and e.at >= oldest
    ]
    legend = (
        '<div class="legend"><span><i style="background:#16a34a"></i>pass</span>'
        '<span><i style="background:#dc2626"></i>fail</span><span><i style="background:#d97706"></i>error</span>'
        '<span><i style="background:#dc2626;height:1px"></i>1 = tolerance</span>'
        '<span><i style="background:#7c3aed"></i>E environment changed</span>'
        '<span><i style="background:#0d9488"></i>B baseline promoted</span>'
        '<span><i style="background:#ea580c"></i>M model file changed</span></div>'
    )
    note = (
        '<p class="muted">Each point is a run (click to open it): its largest error ÷ (atol + rtol·|b|) over all'
        " outputs (error_ratio); above 1 some element is out of tolerance. The verdict colour says what the whole"
        " rule (cosine, SNR, mismatch ratio too) decided.</p>"
    )
    return history_chart(lookup.points(runs), markers) + legend + note


def _baselines(handle: DaemonHandle, name: str, active_id: str | None, now: datetime) -> str:
    root = handle.settings.store.baselines_dir
    on_disk: dict[str, BaselineMeta] = {m.id: m for m in lookup.disk_baselines(root, name)}
    recorded: dict[str, BaselineRecord] = {b.baseline_id: b for b in handle.store.baseline_history(name)}
    created: dict[str, datetime | None] = {
        i: recorded[i].created_at if i in recorded else lookup.created_at(on_disk[i]) for i in {*recorded, *on_disk}
    }

    def newest_first(baseline_id: str) -> tuple[datetime, str]:
        moment = created[baseline_id]
        return (utc(moment) if moment is not None else _EPOCH, baseline_id)

    ids = sorted(created, key=newest_first, reverse=True)
    rows = []
    for baseline_id in ids:  # newest first: the lineage reads from now back
        record, meta = recorded.get(baseline_id), on_disk.get(baseline_id)
        fingerprint = record.environment_fingerprint if record else meta.environment_fingerprint if meta else None
        sha = (record.model_sha256 if record else None) or (meta.model_sha256 if meta else None) or "—"
        ident = f'<span class="mono">{esc(baseline_id)}</span>'
        if baseline_id == active_id:
            ident = f"<strong>{ident}</strong> {badge('active', 'ok')}"
        if meta is None:
            ident += " " + badge("not on disk", "warn")
        rows.append(
            [
                ident,
                esc(record.source if record else meta.source if meta else "—"),
                when(created[baseline_id], now),
                _periods(record, now),
                esc(record.promoted_by if record and record.promoted_by else "—"),
                fingerprint_link(fingerprint),
                f'<span class="mono">{esc(sha[:12])}</span>',
            ]
        )
    headers = ["Baseline", "Source", "Created", "Active", "Promoted by", "Environment", "Model sha256"]
    return table(headers, rows, empty="no baseline yet: run `onnxmon baseline capture`")


def _periods(record: BaselineRecord | None, now: datetime) -> str:
    if record is None or not record.active_periods:
        return '<span class="muted">never promoted</span>' if record else '<span class="muted">—</span>'
    spans = []
    for start, end in record.active_periods:
        until = "now" if end is None else f"{end:%Y-%m-%d %H:%M}"
        spans.append(esc(f"{start:%Y-%m-%d %H:%M} → {until}"))
    return "<br>".join(spans)


def _runs(runs: list[RunRecord], now: datetime) -> str:
    rows = [
        [
            link(url("runs", str(r.id)), f"#{r.id}"),
            when(r.finished_at, now),
            verdict_badge(r.verdict.value),
            esc(r.worst_output or "—"),
            f'<span class="num">{esc(num(r.error_ratio))}</span>',
            esc(", ".join(dict.fromkeys(x.code for x in r.reasons)) or "—"),
            esc(r.attribution or "—"),
            fingerprint_link(r.environment_fingerprint),
            esc(r.node or "—"),
        ]
        for r in runs
    ]
    headers = [
        "Run",
        "Finished",
        "Verdict",
        "Worst output",
        "error ÷ tolerance",
        "Reasons",
        "Attribution",
        "Environment",
        "Node",
    ]
    return table(headers, rows, empty="no runs yet")
