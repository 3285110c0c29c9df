"""One mapping between frozen dataclasses and plain dicts, driven by the dataclass's own definition.

A run has several shapes: the dict a check child sends its parent, the spool's JSON entry, the
store's rows, the API's JSON. Written out field by field, a field added to ``CheckResult`` would
have to be added to every list by hand (and be silently dropped where it was not). Here the fields
and their types come from ``dataclasses.fields`` and ``typing.get_type_hints``, so the dataclass is
the one definition and every shape follows it:

- ``to_dict(value)``: a dict per dataclass, keys in field order. Enums become their ``value``,
  nested dataclasses dicts, tuples and lists lists, mappings dicts (values mapped by their declared
  type; under ``Any`` a value is kept as it is, as a check put it there), ``TypedDict`` values dicts
  (declared keys mapped by their types, other keys kept as they are). Floats stay floats, NaN and
  infinities included: the one JSON encoding (``monitor.jsonsafe``) spells them when a document is
  written.
- ``from_dict(cls, data)``: the way back, checking each value against its declared type and naming
  the field that does not fit (``ShapeError``, a ``ValueError``). A float field also takes the three
  strings the JSON encoding writes for non-finite floats (``"NaN"``, ``"Infinity"``,
  ``"-Infinity"``), since a JSON document read back may still spell them; nothing else does, so text
  that spells one stays text (an int too large for a float is a misfit too). Keys the class does not
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
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar, Union

T = TypeVar("T")

DERIVED_ATTRIBUTE = "DERIVED"
"""The name of the ``ClassVar`` that lists a class's derived keys: ``((property, after field), ...)``."""

Encoder = Callable[[Any], Any] | None
"""How one declared type is written (None: the value as it is); built once per type, so a field costs a call."""
Decoder = Callable[[Any], Any] | None
"""How one declared type is read back (None: the value as it is); raises ``ShapeError`` naming the misfit."""


class ShapeError(ValueError):
    """A dict that does not fit the dataclass it is read as; the message names the field (``path``)."""

    def __init__(self, problem: str, path: str = "") -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.problem, self.path = problem, path

    def under(self, segment: str) -> ShapeError:
        """The same misfit seen from one level up (``segment``: ``".name"`` or ``"[3]"``)."""
        return ShapeError(self.problem, segment + self.path)


def to_dict(value: Any, *, derived: bool = True, exclude: Collection[str] = ()) -> dict[str, Any]:
    """``value`` (a dataclass instance) as a plain dict in field order, with its derived keys unless ``derived=False``.

    ``exclude``: fields (and derived keys) a shape keeps elsewhere, left out rather than mapped and dropped."""
    data: dict[str, Any] = {}
    for name, encode, after in _writing(type(value)):
        if name not in exclude:
            field_value = getattr(value, name)
            data[name] = field_value if encode is None or field_value is None else encode(field_value)
        if derived and after:
            for key in after:
                if key not in exclude:
                    derived_value = getattr(value, key)
                    data[key] = _plain(derived_value() if callable(derived_value) else derived_value)
    return data


def from_dict(cls: type[T], data: Mapping[str, Any], *, where: str = "", values: Mapping[str, Any] | None = None) -> T:
    """An instance of the dataclass ``cls`` from ``data`` (``to_dict``'s output, or JSON read back).

    ``values``: fields a shape already holds as typed values (a stored run's ``OutputStats``), taken as they are."""
    try:
        return _read(cls, data, values)
    except ShapeError as exc:
        raise ShapeError(exc.problem, (where or cls.__name__) + exc.path) from None


def field_names(cls: type) -> tuple[str, ...]:
    """The fields of the dataclass ``cls``, in order: what every shape of it is derived from."""
    return tuple(_hints(cls))


def _read(cls: type[T], data: Any, values: Mapping[str, Any] | None = None) -> T:
    if not isinstance(data, Mapping):
        raise ShapeError(f"expected an object, got {type(data).__name__}")
    given: dict[str, Any] = dict(values) if values else {}
    for name, decode, required in _reading(cls):
        if name in given:
            continue
        if name in data:
            raw = data[name]
            try:
                given[name] = raw if decode is None else decode(raw)
            except ShapeError as exc:
                raise exc.under(f".{name}") from None
        elif required:
            raise ShapeError(f"missing field {name!r}")
    try:
        return cls(**given)
    except (TypeError, ValueError) as exc:  # a __post_init__ that refuses the value (an unknown reason code)
        raise ShapeError(str(exc)) from None


_HINTS: dict[type, dict[str, Any]] = {}
_WRITING: dict[type, tuple[tuple[str, Encoder, tuple[str, ...]], ...]] = {}
_READING: dict[type, tuple[tuple[str, Decoder, bool], ...]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """Field name -> resolved type, in field order (``ClassVar`` entries are no fields and are left out)."""
    if cls not in _HINTS:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls!r} is not a dataclass")
        resolved = typing.get_type_hints(cls)
        _HINTS[cls] = {f.name: resolved[f.name] for f in dataclasses.fields(cls)}
    return _HINTS[cls]


def _writing(cls: type) -> tuple[tuple[str, Encoder, tuple[str, ...]], ...]:
    """Per field: its name, its encoder, and the derived keys (``DERIVED``) written right after it."""
    if cls not in _WRITING:
        hints = _hints(cls)
        after: dict[str, tuple[str, ...]] = {}
        for key, field_name in getattr(cls, DERIVED_ATTRIBUTE, ()):
            if field_name not in hints:
                raise TypeError(
                    f"{cls.__name__}.{DERIVED_ATTRIBUTE}: {key!r} follows {field_name!r}, which is no field"
                )
            after[field_name] = (*after.get(field_name, ()), key)
        _WRITING[cls] = tuple((name, _encoder(hint), after.get(name, ())) for name, hint in hints.items())
    return _WRITING[cls]


def _reading(cls: type) -> tuple[tuple[str, Decoder, bool], ...]:
    """Per field: its name, its decoder, and whether it must be given (no default)."""
    if cls not in _READING:
        hints, missing = _hints(cls), dataclasses.MISSING
        required = {f.name for f in dataclasses.fields(cls) if f.default is missing and f.default_factory is missing}
        _READING[cls] = tuple((name, _decoder(hint), name in required) for name, hint in hints.items())
    return _READING[cls]


def _encoder(hint: Any) -> Encoder:
    if hint is Any:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_union(origin):
        arms = [a for a in args if a is not type(None)]
        if len(arms) != 1:
            return _plain  # several arms: by what the value is
        inner = _encoder(arms[0])
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return to_dict
    if typing.is_typeddict(hint):
        return _typeddict_encoder(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_value
    if origin is tuple or origin is list:
        if origin is tuple and args and args[-1] is not Ellipsis:
            items = [_encoder(a) for a in args]
            return lambda v: [x if e is None else e(x) for x, e in zip(v, items, strict=True)]
        item = _encoder(args[0]) if args else None
        return list if item is None else (lambda v: [item(x) for x in v])
    if isinstance(origin, type) and issubclass(origin, Mapping):
        value_encoder = _encoder(args[1]) if len(args) == 2 else None
        return dict if value_encoder is None else (lambda v: {k: value_encoder(x) for k, x in v.items()})
    return None


def _typeddict_encoder(hint: Any) -> Encoder:
    """A dict in the value's key order: its declared keys mapped by their types, other keys kept as they are."""
    encoders = {name: encoder for name, encoder in ((n, _encoder(h)) for n, h in _keys(hint).items()) if encoder}

    def encode(value: Mapping[str, Any]) -> dict[str, Any]:
        return {k: encoders[k](v) if k in encoders and v is not None else v for k, v in value.items()}

    return encode


def _keys(hint: Any) -> dict[str, Any]:
    """A ``TypedDict``'s keys and their resolved types."""
    if hint not in _HINTS:
        _HINTS[hint] = typing.get_type_hints(hint)
    return _HINTS[hint]


def _enum_value(value: enum.Enum) -> Any:
    return value.value


def _plain(value: Any) -> Any:
    """A value mapped by what it is (a derived key, a union's arm): dataclasses, enums, tuples, mappings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _decoder(hint: Any) -> Decoder:
    if hint is Any:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_union(origin):
        return _union_decoder(args)
    if origin is tuple or origin is list:
        return _sequence_decoder(origin, args)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return _mapping_decoder(_decoder(args[1]) if len(args) == 2 else None)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return lambda v: _read(hint, v)
    if typing.is_typeddict(hint):
        return _typeddict_decoder(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_decoder(hint)
    return _scalar_decoder(hint)


def _union_decoder(args: tuple[Any, ...]) -> Decoder:
    optional = type(None) in args
    arms = [_decoder(a) for a in args if a is not type(None)]

    def decode(value: Any) -> Any:
        if value is None and optional:
            return None
        errors: list[ShapeError] = []
        for arm in arms:
            if arm is None:
                return value
            try:
                return arm(value)
            except ShapeError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise ShapeError(f"{value!r} fits none of {[str(a) for a in args]}")

    return decode


def _sequence_decoder(origin: Any, args: tuple[Any, ...]) -> Decoder:
    fixed = [_decoder(a) for a in args] if origin is tuple and args and args[-1] is not Ellipsis else None
    item = _decoder(args[0]) if args and fixed is None else None
    make = tuple if origin is tuple else list

    def decode(value: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise ShapeError(f"expected a list, got {type(value).__name__}")
        if fixed is not None and len(value) != len(fixed):
            raise ShapeError(f"expected {len(fixed)} items, got {len(value)}")
        decoders = fixed if fixed is not None else [item] * len(value)
        out = []
        for index, (element, element_decoder) in enumerate(zip(value, decoders, strict=True)):
            try:
                out.append(element if element_decoder is None else element_decoder(element))
            except ShapeError as exc:
                raise exc.under(f"[{index}]") from None
        return make(out)

    return decode


def _mapping_decoder(value_decoder: Decoder) -> Decoder:
    def decode(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ShapeError(f"expected an object, got {type(value).__name__}")
        if value_decoder is None:
            return {str(k): v for k, v in value.items()}
        out = {}
        for key, element in value.items():
            try:
                out[str(key)] = value_decoder(element)
            except ShapeError as exc:
                raise exc.under(f".{key}") from None
        return out

    return decode


def _typeddict_decoder(hint: Any) -> Decoder:
    """Declared keys read by their types (a required one must be there); other keys kept as they are, untouched."""
    decoders = {name: _decoder(key_hint) for name, key_hint in _keys(hint).items()}
    required: frozenset[str] = hint.__required_keys__

    def decode(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ShapeError(f"expected an object, got {type(value).__name__}")
        out = {}
        for key, element in value.items():
            element_decoder = decoders.get(key)
            try:
                out[str(key)] = element if element_decoder is None else element_decoder(element)
            except ShapeError as exc:
                raise exc.under(f".{key}") from None
        missing = sorted(required - out.keys())
        if missing:
            raise ShapeError(f"missing key {missing[0]!r}")
        return out

    return decode


def _enum_decoder(hint: type[enum.Enum]) -> Decoder:
    def decode(value: Any) -> Any:
        try:
            return hint(value)
        except ValueError:
            raise ShapeError(f"{value!r} is no {hint.__name__}") from None

    return decode


NON_FINITE = ("NaN", "Infinity", "-Infinity")  # the JSON encoding's spellings (monitor.jsonsafe), read as floats


def _scalar_decoder(hint: Any) -> Decoder:
    if hint is float:
        return _float
    if hint is int:
        return _int
    if hint is bool or hint is str:

        def exact(value: Any) -> Any:
            if not isinstance(value, hint):
                raise ShapeError(f"expected {hint.__name__}, got {value!r}")
            return value

        return exact
    if isinstance(hint, type):

        def instance(value: Any) -> Any:
            if not isinstance(value, hint):
                raise ShapeError(f"expected {hint.__name__}, got {type(value).__name__}")
            return value

        return instance
    return None  # Literal and other forms: taken as given (the class's own checks apply)


def _float(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an int of over 308 digits: no float holds it
            raise ShapeError(f"an integer of {int(value).bit_length()} bits is out of a float's range") from None
    if isinstance(value, str) and value in NON_FINITE:
        return float(value)
    raise ShapeError(f"expected a number, got {value!r}")


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ShapeError(f"expected an integer, got {value!r}")


def _is_union(origin: Any) -> bool:
    return origin is Union or origin is types.UnionType
