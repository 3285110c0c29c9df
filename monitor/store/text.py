"""Strings the history database cannot hold, decided once, here, for SQLite and PostgreSQL alike.

PostgreSQL refuses a NUL (U+0000) in ``text`` and in ``json`` values; SQLite's driver cannot encode a
lone surrogate (U+D800-U+DFFF, what Python makes of bytes that are not UTF-8); PostgreSQL's
``varchar(n)`` refuses a longer value where SQLite keeps it. Left to the drivers, the same result is
stored on one backend and a ``DataError`` on the other, and a model whose output name holds a NUL
loses its whole history on PostgreSQL. The rule, the same on both:

* **what a check measured** (output names, reasons, details, environments, node names) is kept, each
  such character replaced by U+FFFD and a bounded column's value cut to its length, by the column
  type ``Stored`` and the JSON serializer ``storable_json``: a run is never lost to its strings;
* **what a person types** (incident text, fix, author) is refused before anything is written,
  ``UnstorableText`` naming the field, so the CLI says it in one line and the API answers 400.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import String, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from monitor.errors import MonitorError

REPLACEMENT = "\ufffd"
# JSON Schema's (ECMA-262's) whitespace, written out: Python's str.strip() also strips U+001C-U+001F and
# U+0085, so "blank" is this one set for the store, the API's schema and every regex engine that reads it.
BLANK = "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
NOT_BLANK = f"^[^\\x00]*[^\\x00{BLANK}][^\\x00]*$"
"""A pattern for a text a person must write: something besides whitespace, and no NUL."""
_BLANK = re.compile(f"[{BLANK}]*")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class UnstorableText(MonitorError):
    """A string typed by a person holds a character the history store cannot hold."""


def problem(value: str) -> str | None:
    """What in ``value`` the store cannot hold, in words (``a NUL character (U+0000)``); None when nothing."""
    found = _UNSTORABLE.search(value)
    if found is None:
        return None
    code = ord(found.group())
    return "a NUL character (U+0000)" if code == 0 else f"a lone surrogate (U+{code:04X}: bytes that are not UTF-8)"


def refuse_unstorable(fields: Iterable[tuple[str, str | None]]) -> None:
    """``UnstorableText`` for the first ``(name, value)`` the store could not hold as typed."""
    for name, value in fields:
        why = problem(value) if value else None
        if why is not None:
            raise UnstorableText(f"{name} holds {why}, which the history store cannot hold; remove it")


def is_blank(value: str) -> bool:
    """True when ``value`` holds nothing but whitespace (the ``BLANK`` set), or nothing at all."""
    return _BLANK.fullmatch(value) is not None


def storable(value: str) -> str:
    """``value`` with every character the store cannot hold replaced by U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, value)


def storable_json(value: Any) -> Any:
    """``value`` (JSON-shaped: mappings, lists, scalars) with every string, keys included, ``storable``."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, Mapping):
        return {storable(str(k)) if isinstance(k, str) else k: storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(v) for v in value]
    return value


def needs_replacing(value: Any) -> bool:
    """True when some string in ``value`` (JSON-shaped, as ``CheckResult.to_dict()``) is not storable as is."""
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is not None
    if isinstance(value, Mapping):
        return any(needs_replacing(k) or needs_replacing(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(needs_replacing(v) for v in value)
    return False


class StoredString(TypeDecorator[str]):
    """A ``varchar(n)`` column (``StoredString(200)``) that binds storable values only, cut to ``n``.

    Applies to every value bound through the column, queries included: looking a model up by a name
    holding a NUL finds nothing on PostgreSQL too, instead of failing the request.
    """

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        length = getattr(self.impl_instance, "length", None)
        value = storable(value)
        return value[:length] if length else value


class StoredText(TypeDecorator[str]):
    """A ``text`` column that binds storable values only (as ``StoredString``, without a length)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else storable(value)
