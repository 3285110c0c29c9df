"""One rule for non-finite floats in every JSON document onnxmon writes (docs/json.md).

The rule: onnxmon writes strict RFC 8259 JSON, which has no NaN or Infinity. A finite float
is a JSON number; a non-finite one is the JSON *string* ``"Infinity"``, ``"-Infinity"`` or
``"NaN"``. These are the spellings of the proto3 canonical JSON mapping for doubles, and
JavaScript's ``Number()``, Python's ``float()`` and Go's ``strconv.ParseFloat`` read them back.
Metrics are often non-finite on purpose (two equal outputs have an SNR of +inf; a value not
measured is NaN), so every writer (CLI ``--json``, the HTTP API, the log line, the store's JSON
columns, spool files, baseline metadata, localization reports) goes through ``dumps`` or
``jsonable`` here instead of choosing its own spelling.

Timestamps follow one rule too: a ``datetime`` becomes RFC 3339 in UTC with a ``Z``
(``2026-12-01T15:09:16.250000Z``; a naive one is taken as UTC), via ``timestamp``.

Standard library only: it is shared vocabulary, like ``monitor.errors`` and ``monitor.results``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal

INFINITY: Final = "Infinity"
NEG_INFINITY: Final = "-Infinity"
NAN: Final = "NaN"
NonFinite = Literal["Infinity", "-Infinity", "NaN"]
"""The type of the three strings (for schemas: a JSON number is ``float | NonFinite``)."""
SPELLINGS: Mapping[str, float] = {INFINITY: math.inf, NEG_INFINITY: -math.inf, NAN: math.nan}
"""The three strings that stand for non-finite floats, and the floats they stand for."""


def number(value: float) -> float | NonFinite:
    """``value`` when finite (unchanged), else its string: ``"Infinity"``, ``"-Infinity"`` or ``"NaN"``."""
    if math.isnan(value):
        return NAN
    if math.isinf(value):
        return INFINITY if value > 0 else NEG_INFINITY
    return value


def timestamp(value: datetime | float | int | str) -> str:
    """RFC 3339 UTC with a ``Z``: from an aware or naive (taken as UTC) datetime, epoch seconds, or an ISO string."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    elif not isinstance(value, datetime):
        value = datetime.fromtimestamp(float(value), UTC)
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    spec = "microseconds" if value.microsecond else "seconds"
    return value.isoformat(timespec=spec).replace("+00:00", "Z")


def normalized(text: str) -> str:
    """``text`` as RFC 3339 UTC when it is an ISO 8601 timestamp (files written by older versions), else unchanged."""
    try:
        return timestamp(text)
    except (TypeError, ValueError, OverflowError):
        return text


def epoch(value: float | int | str) -> float:
    """Seconds since the epoch from a number or an RFC 3339 string (documents of either age read back)."""
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return (parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed).timestamp()
    return float(value)


CHECK_TIMES: Final = ("started_at", "finished_at")
"""The epoch-second fields of ``CheckResult.to_dict`` (kept as numbers for the spool and the child)."""


def with_timestamps(data: Mapping[str, Any], keys: Collection[str] = CHECK_TIMES) -> dict[str, Any]:
    """A copy of ``data`` with the epoch-second values under ``keys`` written as RFC 3339 UTC."""
    return {k: timestamp(v) if k in keys and isinstance(v, int | float) else v for k, v in data.items()}


def jsonable(obj: Any, default: Callable[[Any], Any] | None = None) -> Any:
    """A deep copy of ``obj`` that ``json.dumps(..., allow_nan=False)`` accepts as far as floats go.

    Non-finite floats become their strings; mappings become dicts with string keys; lists,
    tuples and sets become lists; numpy values (anything with ``tolist()`` or ``item()``, found
    by duck typing so numpy need not be imported) become Python values first. Any other object
    goes through ``default`` when given (and its result through this function), else is kept.
    """
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return number(obj)
    if isinstance(obj, datetime):
        return timestamp(obj)
    if isinstance(obj, Mapping):
        return {_key(k): jsonable(v, default) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v, default) for v in obj]
    for method in ("tolist", "item"):
        convert = getattr(obj, method, None)
        if callable(convert):
            try:
                plain = convert()
            except (TypeError, ValueError):
                continue
            if plain is not obj:
                return jsonable(plain, default)
    if default is not None:
        replaced = default(obj)
        if replaced is not obj:
            return jsonable(replaced, default)
    return obj


def dumps(obj: Any, *, default: Callable[[Any], Any] | None = None, **kwargs: Any) -> str:
    """``json.dumps`` of ``jsonable(obj, default)`` with ``allow_nan=False``: always strict JSON."""
    return json.dumps(jsonable(obj, default), allow_nan=False, **kwargs)


def to_float(value: Any) -> Any:
    """Undo ``number`` for one value: the three strings become floats, anything else is returned as is."""
    return SPELLINGS[value] if isinstance(value, str) and value in SPELLINGS else value


def restore(obj: Any) -> Any:
    """``to_float`` applied to every value inside ``obj`` (dicts and lists, recursively)."""
    if isinstance(obj, Mapping):
        return {k: restore(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [restore(v) for v in obj]
    return to_float(obj)


MAX_INTEGER: Final = 2**64
"""A JSON integer read must lie within ``(-MAX_INTEGER, MAX_INTEGER)``: every count, size and id fits."""


class NumberOutOfRange(ValueError):
    """A JSON number no reader can hold: an integer beyond ``MAX_INTEGER``, or a float literal beyond float64."""


def loads(text: str | bytes, *, floats: Collection[str] = ()) -> Any:
    """Parse JSON, its numbers bounded; under the keys named in ``floats`` (at any depth) the three strings are floats.

    Numbers are bounded (``NumberOutOfRange``, a ``ValueError``): an integer within ``MAX_INTEGER``, a
    number with a fraction or an exponent a finite float (``1e999`` is refused, not read as infinity),
    so no reader of a file meets an integer no float holds (``float()`` of one raises ``OverflowError``).
    Floats only where the caller asks, because elsewhere ``"NaN"`` may be meant as text (a model name,
    a reason detail); a typed reader (``monitor.shapes``) needs none. Bare ``NaN``/``Infinity`` tokens,
    which older onnxmon versions wrote in some files, are still accepted so that those files stay readable.
    """
    data = json.loads(text, parse_int=_bounded_int, parse_float=_bounded_float)
    return _restore_under(data, frozenset(floats)) if floats else data


def _bounded_int(literal: str) -> int:
    if len(literal) > 21:  # 2**64 has 20 digits: a longer literal is out of range, never converted (no digit limit)
        raise NumberOutOfRange(f"an integer of {len(literal.lstrip('-'))} digits is out of range (|n| < 2**64)")
    value = int(literal)
    if abs(value) >= MAX_INTEGER:
        raise NumberOutOfRange(f"the integer {literal} is out of range (|n| < 2**64)")
    return value


def _bounded_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        shown = literal if len(literal) <= 40 else f"{literal[:40]}..."
        raise NumberOutOfRange(f"the number {shown} is out of a float's range")
    return value


def _restore_under(obj: Any, keys: frozenset[str]) -> Any:
    if isinstance(obj, Mapping):
        return {k: restore(v) if k in keys else _restore_under(v, keys) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_restore_under(v, keys) for v in obj]
    return obj


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, float) and not math.isfinite(key):
        return str(number(key))
    return str(key)
