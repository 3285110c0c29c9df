"""Values as the status pages print them: numbers, durations, ages, UTC times, site paths.

Plain text out, never markup: the templates escape whatever these return. The strict
``CONTENT_SECURITY_POLICY`` the routes send lives here too, beside ``VERDICT_CLASSES``
(a verdict's badge colour).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none';"
    " frame-ancestors 'none'"
)
VERDICT_CLASSES = {"pass": "ok", "fail": "bad", "error": "warn"}


def url(*parts: object, **query: str) -> str:
    """A site path from segments (each percent-encoded) and an optional query string."""
    path = "/" + "/".join(quote(str(p), safe="") for p in parts)
    return f"{path}?{urlencode(query)}" if query else path


def num(value: Any, digits: int = 3) -> str:
    """A number for people: ``∞``, ``−∞``, ``NaN``, ``—`` for none; ``digits`` significant digits otherwise."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        try:
            value = float(value)  # the JSON encodings "Infinity", "-Infinity", "NaN" (and older "inf" ...)
        except ValueError:
            return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "∞" if number > 0 else "−∞"
    if number == 0:
        return "0"
    return f"{number:.{digits}g}".replace("-", "−")


def duration(seconds: float) -> str:
    """``90`` → ``1.5 min``: the largest unit that keeps the number readable."""
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{num(seconds / size)} {unit}"
    return f"{num(seconds)} s"


def utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def ago(when: datetime | None, now: datetime) -> str:
    """``3 min ago``-style text; ``never`` for none."""
    if when is None:
        return "never"
    seconds = (now - utc(when)).total_seconds()
    if seconds < 0:
        return "just now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago" if seconds < 10 * size else f"{seconds // size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def stamp(when: datetime) -> str:
    """``2025-01-01 10:00:00``: the UTC time to the second."""
    return utc(when).strftime("%Y-%m-%d %H:%M:%S")


def isotime(when: datetime) -> str:
    """The UTC time in ISO 8601 (a ``<time datetime>``)."""
    return utc(when).isoformat()
