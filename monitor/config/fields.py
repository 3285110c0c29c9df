"""The building blocks every config section shares: durations, the bounds that keep them
computable, and the strict base model (unknown keys are errors).

Kept apart from ``schema.py`` so the sections can live in more than one module without a circle.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``"90s"``, ``"15m"``, ``"1h"``, ``"7d"``; rejects negatives and junk."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '15m' or '30s', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"expected a duration like '15m', '30s' or '1h', got {value!r}")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"duration must be a finite number of seconds, got {value!r}")
    if seconds < 0:
        raise ValueError(f"duration must be >= 0, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]

# Upper bounds that keep every duration computable: APScheduler, datetime and setrlimit overflow
# (OverflowError in the scheduler thread) long before a finite float does. "Passes validation"
# must mean "can be scheduled".
DAY = 86400.0
MAX_INTERVAL = 366 * DAY  # a yearly check is the longest schedule anyone needs
MAX_SHORT = DAY  # jitter, startup spread, a check's timeout
MAX_BACKOFF = 7 * DAY
MAX_RETENTION = 100 * 365 * DAY
MAX_REPEATS = 1000
MAX_MEMORY_MB = 16 * 1024 * 1024  # 16 TiB: beyond any node, still a valid RLIMIT_AS
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # a model or set name: metrics labels, paths, URLs
URL_SHAPE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # no control character anywhere: see has_control_characters
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def has_control_characters(text: str) -> bool:
    """True when ``text`` holds a C0 control character or DEL (a NUL, an escape, a newline): never in a URL."""
    return _CONTROL.search(text) is not None


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo in a tolerance must not silently do nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)
