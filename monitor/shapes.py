"""One mapping between frozen dataclasses and plain dicts, driven by the dataclass's own definition.

A run has several shapes: the dict a check child sends its parent, the spool's JSON entry, the
store's rows, the API's JSON. Each used to be written out field by field, so a field added to
``CheckResult`` had to be added to every list by hand (and was silently dropped where it was not).
Here the fields and their types come from ``dataclasses.fields`` and ``typing.get_type_hints``, so
the dataclass is the one definition and every shape follows it:

- ``to_dict(value)``: a dict per dataclass, keys in field order. Enums become their ``value``,
  nested dataclasses dicts, tuples and lists lists, mappings dicts (values mapped by their declared
  type; under ``Any`` a value is kept as it is, as a check put it there). Floats stay floats, NaN and
  infinities included: the one JSON encoding (``monitor.jsonsafe``) spells them when a document is
  written.
- ``from_dict(cls, data)``: the way back, checking each value against its declared type and naming
  the field that does not fit (``ShapeError``, a ``ValueError``). A float field also takes the three
  strings the JSON encoding writes for non-finite floats (``"NaN"``, ``"Infinity"``,
  ``"-Infinity"``), since a JSON document read back may still spell them. Keys the class does not
  have are ignored (derived values such as ``duration_s``, documents from a newer version); a key
  that is missing takes the field's default, and a field without one is an error.

Where a shape must differ from the definition, the class declares it once: ``DERIVED`` (a
``ClassVar``) lists the properties (or methods without arguments) written beside the fields, each
after the field it follows, so documents keep the keys readers know (``duration_s``,
``all_reasons``); other shapes (the store's tables, the API's models) take ``to_dict``'s output and
name what they set apart.

Standard library only: it is shared vocabulary, like ``monitor.results`` which uses it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Collection, Mapping
from typing import Any, TypeVar, Union

T = TypeVar("T")

DERIVED_ATTRIBUTE = "DERIVED"
"""The name of the ``ClassVar`` that lists a class's derived keys: ``((property, after field), ...)``."""


class ShapeError(ValueError):
    """A dict that does not fit the dataclass it is read as; the message names the field."""


def to_dict(value: Any, *, derived: bool = True, exclude: Collection[str] = ()) -> dict[str, Any]:
    """``value`` (a dataclass instance) as a plain dict in field order, with its derived keys unless ``derived=False``.

    ``exclude``: fields (and derived keys) a shape keeps elsewhere, left out rather than mapped and dropped."""
    cls = type(value)
    hints = _hints(cls)
    after = _derived(cls) if derived else {}
    data: dict[str, Any] = {}
    for name in hints:
        if name not in exclude:
            data[name] = _encode(getattr(value, name), hints[name])
        for key in (k for k in after.get(name, ()) if k not in exclude):
            derived_value = getattr(value, key)
            data[key] = _plain(derived_value() if callable(derived_value) else derived_value)
    return data


def from_dict(cls: type[T], data: Mapping[str, Any], *, where: str = "", values: Mapping[str, Any] | None = None) -> T:
    """An instance of the dataclass ``cls`` from ``data`` (``to_dict``'s output, or JSON read back).

    ``values``: fields a shape already holds as typed values (a stored run's ``OutputStats``), taken as they are."""
    where = where or cls.__name__
    if not isinstance(data, Mapping):
        raise ShapeError(f"{where}: expected an object, got {type(data).__name__}")
    hints = _hints(cls)
    given: dict[str, Any] = dict(values or {})
    for name, hint in hints.items():
        if name in given:
            continue
        if name in data:
            given[name] = _decode(data[name], hint, f"{where}.{name}")
        elif name in _required(cls):
            raise ShapeError(f"{where}: missing field {name!r}")
    try:
        return cls(**given)
    except (TypeError, ValueError) as exc:  # a __post_init__ that refuses the value (an unknown reason code)
        raise ShapeError(f"{where}: {exc}") from None


def field_names(cls: type) -> tuple[str, ...]:
    """The fields of the dataclass ``cls``, in order: what every shape of it is derived from."""
    return tuple(_hints(cls))


_HINTS: dict[type, dict[str, Any]] = {}
_REQUIRED: dict[type, frozenset[str]] = {}
_DERIVED: dict[type, dict[str, tuple[str, ...]]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """Field name -> resolved type, in field order (``ClassVar`` entries are no fields and are left out)."""
    if cls not in _HINTS:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls!r} is not a dataclass")
        resolved = typing.get_type_hints(cls)
        _HINTS[cls] = {f.name: resolved[f.name] for f in dataclasses.fields(cls)}
    return _HINTS[cls]


def _required(cls: type) -> frozenset[str]:
    if cls not in _REQUIRED:
        missing = dataclasses.MISSING
        fields = dataclasses.fields(cls)
        _REQUIRED[cls] = frozenset(f.name for f in fields if f.default is missing and f.default_factory is missing)
    return _REQUIRED[cls]


def _derived(cls: type) -> dict[str, tuple[str, ...]]:
    """Field name -> the derived keys written right after it, from the class's ``DERIVED``."""
    if cls in _DERIVED:
        return _DERIVED[cls]
    declared: tuple[tuple[str, str], ...] = getattr(cls, DERIVED_ATTRIBUTE, ())
    after: dict[str, tuple[str, ...]] = {}
    for key, field_name in declared:
        if field_name not in _hints(cls):
            raise TypeError(f"{cls.__name__}.{DERIVED_ATTRIBUTE}: {key!r} follows {field_name!r}, which is no field")
        after[field_name] = (*after.get(field_name, ()), key)
    _DERIVED[cls] = after
    return after


def _encode(value: Any, hint: Any) -> Any:
    if value is None or hint is Any:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_union(origin):
        arm = next((a for a in args if a is not type(None) and _fits(value, a)), Any)
        return _encode(value, arm)
    if isinstance(value, tuple | list):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return [_encode(v, a) for v, a in zip(value, args, strict=True)]
        item = args[0] if args else Any
        return [_encode(v, item) for v in value]
    if isinstance(value, Mapping):
        item = args[1] if len(args) == 2 else Any
        return {k: _encode(v, item) for k, v in value.items()}
    return value


def _plain(value: Any) -> Any:
    """A derived value (no declared field type) mapped by what it is: dataclasses, enums, tuples, mappings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _decode(value: Any, hint: Any, where: str) -> Any:
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_union(origin):
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        errors = []
        for arm in arms:
            try:
                return _decode(value, arm, where)
            except ShapeError as exc:
                errors.append(str(exc))
        raise ShapeError(errors[0] if len(errors) == 1 else f"{where}: {value!r} fits none of {arms}")
    if origin is tuple or origin is list:
        if not isinstance(value, list | tuple):
            raise ShapeError(f"{where}: expected a list, got {type(value).__name__}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ShapeError(f"{where}: expected {len(args)} items, got {len(value)}")
            return tuple(_decode(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
        item = args[0] if args else Any
        items = [_decode(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        if not isinstance(value, Mapping):
            raise ShapeError(f"{where}: expected an object, got {type(value).__name__}")
        item = args[1] if len(args) == 2 else Any
        return {str(k): _decode(v, item, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return from_dict(hint, value, where=where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise ShapeError(f"{where}: {value!r} is no {hint.__name__}") from None
    return _scalar(value, hint, where)


def _scalar(value: Any, hint: Any, where: str) -> Any:
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # "NaN", "Infinity", "-Infinity": the JSON encoding's spellings only
            try:
                number = float(value)
            except ValueError:
                number = 0.0
            if not math.isfinite(number) and value in ("NaN", "Infinity", "-Infinity"):
                return number
        raise ShapeError(f"{where}: expected a number, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ShapeError(f"{where}: expected an integer, got {value!r}")
    if hint is bool or hint is str:
        if not isinstance(value, hint):
            raise ShapeError(f"{where}: expected {hint.__name__}, got {value!r}")
        return value
    if isinstance(hint, type) and not isinstance(value, hint):
        raise ShapeError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
    return value


def _is_union(origin: Any) -> bool:
    return origin is Union or origin is types.UnionType


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the union arm ``hint`` (its origin for generics), to encode it as that arm."""
    target = typing.get_origin(hint) or hint
    return target is Any or (isinstance(target, type) and isinstance(value, target))
