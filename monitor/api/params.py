"""Path parameters shared by the routes, typed so the OpenAPI schema says exactly what is accepted.

A path id is decimal digits only. Pydantic's lax int parsing would also take ``" 1"``,
``"\\u00a01"`` (a non-breaking space) or ``"1_000"``, which the schema's ``integer`` does not
allow: a client (or schemathesis) sending one must get 422, not the run it did not name.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path as PathParam
from pydantic import BeforeValidator

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
