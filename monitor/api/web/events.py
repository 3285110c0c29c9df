"""Events (state changes) as the pages show them: table rows, and one-line labels for chart markers.

An environment change links both fingerprints and their diff; a verdict change shows badges
(``templates/events.html``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from monitor.api.web.formats import url
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


@dataclass(frozen=True)
class EventRow:
    """One event as a table row; ``kind`` says how ``old`` and ``new`` read (a fingerprint, a verdict ...)."""

    at: datetime
    model: str
    what: str
    colour: str
    kind: str
    old: str | None
    new: str | None
    diff_href: str
    run_id: int | None


def label(event: EventRecord) -> str:
    """``environment: a → b at 2025-01-01 10:00:00 UTC`` (plain text, escaped where used)."""
    what = KINDS.get(event.kind, (event.kind, ""))[0]
    return f"{what}: {event.old or '—'} → {event.new or '—'} at {event.at:%Y-%m-%d %H:%M:%S} UTC"


def rows(events: Sequence[EventRecord]) -> list[EventRow]:
    """Newest first as given."""
    found = []
    for e in events:
        what, colour = KINDS.get(e.kind, (e.kind, "none"))
        diff = e.kind == "environment_changed" and e.old and e.new
        href = url("environments", "diff", a=e.old or "", b=e.new or "") if diff else ""
        found.append(EventRow(e.at, e.model, what, colour, e.kind, e.old, e.new, href, e.run_id or None))
    return found
