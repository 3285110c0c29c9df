"""Path and query parameters shared by the routes, typed so the OpenAPI schema says exactly what is accepted.

A path id is decimal digits only. Pydantic's lax int parsing would also take ``" 1"``,
``"\\u00a01"`` (a non-breaking space) or ``"1_000"``, which the schema's ``integer`` does not
allow: a client (or schemathesis) sending one must get 422, not the run it did not name.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Path as PathParam
from fastapi import Query
from pydantic import AfterValidator, BeforeValidator

MAX_ID = 2**63 - 1  # SQLite and PostgreSQL BIGINT


def page_id(text: str) -> int:
    """A page's id (``/runs/{id}``, its incident form) parsed as strictly as the API's: 0 when not one.

    ``str.isdecimal`` also takes Arabic-Indic or Devanagari digits (``/runs/\u0661`` was run 1).
    """
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return 0
    number = int(text)
    return number if number <= MAX_ID else 0


def _digits_only(value: object) -> object:
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError(f"expected an id of decimal digits, got {value!r}")
    return value


# PathParam first: its ge/le are what the OpenAPI schema shows (minimum 1, maximum MAX_ID)
Id = Annotated[int, PathParam(ge=1, le=MAX_ID), BeforeValidator(_digits_only)]


_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _iso_only(value: Any) -> Any:
    """Pydantic would read ``since=0.0`` as a unix time; the documented form is ISO 8601 only."""
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        raise ValueError("expected an ISO 8601 date-time such as 2026-11-30T12:00:00Z, not a number")
    return value


def _in_utc_range(when: datetime | None) -> datetime | None:
    """A valid ISO 8601 time UTC cannot hold is clamped to the end it fell past.

    Before year 1 in UTC (0001-01-01T00:00+01:00) is "from the very beginning"; past 9999 in UTC
    (9999-12-31T23:59:59-14:00) is "after every time there is", so ``since`` finds nothing. It was
    clamped to the beginning too, and so returned every run.
    """
    if when is not None and when.tzinfo is not None:
        try:
            when.astimezone(UTC)
        except OverflowError:
            end = datetime.min if when.year == datetime.min.year else datetime.max
            return end.replace(tzinfo=UTC)
    return when


# ``since`` of the history routes: ISO 8601 only, clamped to what UTC can hold
Since = Annotated[
    datetime | None,
    BeforeValidator(_iso_only),
    AfterValidator(_in_utc_range),
    Query(description="ISO 8601; without a zone it is UTC"),
]
