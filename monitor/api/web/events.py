"""Events (state changes) as the pages show them: a table, and one-line labels for chart markers.

An environment change links both fingerprints and their diff; a verdict change shows badges.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from monitor.api.web.html import badge, esc, fingerprint_link, link, table, url, verdict_badge, when
from monitor.store import EventRecord

# kind -> (what people read, badge colour)
KINDS = {
    "verdict_changed": ("verdict", "none"),
    "environment_changed": ("environment", "warn"),
    "model_changed": ("model file", "warn"),
    "baseline_captured": ("baseline captured", "info"),
    "baseline_promoted": ("baseline promoted", "info"),
    "provider_fallback_began": ("provider fallback", "bad"),
    "provider_fallback_ended": ("fallback ended", "ok"),
}


def label(event: EventRecord) -> str:
    """``environment: a → b at 2025-01-01 10:00:00 UTC`` (plain text, escaped where used)."""
    what = KINDS.get(event.kind, (event.kind, ""))[0]
    return f"{what}: {event.old or '—'} → {event.new or '—'} at {event.at:%Y-%m-%d %H:%M:%S} UTC"


def events_table(events: Sequence[EventRecord], now: datetime, *, with_model: bool = False) -> str:
    """Newest first as given; ``with_model`` adds a column linking each event's model."""
    rows = []
    for e in events:
        what, kind = KINDS.get(e.kind, (e.kind, "none"))
        run = link(url("runs", str(e.run_id)), f"#{e.run_id}") if e.run_id else "—"
        change = [_value(e.kind, e.old), _value(e.kind, e.new)]
        if e.kind == "environment_changed" and e.old and e.new:
            change.append(link(url("environments", "diff", a=e.old, b=e.new), "diff"))
        else:
            change.append("")
        model = [link(url("models", e.model), e.model)] if with_model else []
        rows.append([when(e.at, now), *model, badge(what, kind), *change, run])
    headers = ["When", *(["Model"] if with_model else []), "Event", "From", "To", "", "Run"]
    return table(headers, rows, empty="no events yet")


def _value(kind: str, value: str | None) -> str:
    if value is None:
        return '<span class="muted">—</span>'
    if kind == "environment_changed":
        return fingerprint_link(value)
    if kind == "verdict_changed":
        return verdict_badge(value)
    if kind == "model_changed":
        return f'<span class="mono" title="sha256 {esc(value)}">{esc(value[:12])}</span>'
    return f'<span class="mono">{esc(value[:60])}</span>'
