"""Model outputs that are not numeric tensors, turned into tensors that baselines store and checks compare.

Why: a baseline holds ``.npy`` files without pickles and a check compares arrays, but ONNX Runtime
returns strings as object arrays, sequences as lists and maps as dicts. skl2onnx alone gives
every classifier a ZipMap (``seq(map(int64|string, tensor(float)))``) and a string-labelled one
a ``tensor(string)`` label. Each output ``name`` therefore becomes one or two *companion* tensors,
named after the output by this scheme (``companions``), fixed by the output's type alone so a
check knows every name before it runs anything:

============================  ==================================================================
output type                   tensors
============================  ==================================================================
``tensor(T)``, T numeric      ``name`` as it is
``tensor(string)``            ``name``: a numpy unicode array (``<U``), same shape
``seq(tensor(T))``            ``name``: the elements stacked ``(length, *shape)`` when they share a
                              shape, else their values raveled and concatenated (1-D);
                              ``name:shapes``: int64 ``(length, rank)``, each element's shape
                              (padded with -1 when ranks differ)
``map(K, V)``                 ``name``: the values ``(keys,)`` in sorted key order;
                              ``name:keys``: the sorted keys
``seq(map(K, V))``            ``name``: ``(maps, keys)``, one row per map, columns in the order of
                              the sorted union of the keys, NaN where a map lacks a key;
                              ``name:keys``: that sorted union
============================  ==================================================================

Keys ``K`` are int64 (int64 keys) or ``<U`` (string keys); values keep their own dtype (float32
for ``tensor(float)``, float64 for ``tensor(double)``, ``<U`` for strings). So numeric values are
judged by the tolerance rule, while strings, keys and shapes (unicode and integer dtypes) are
judged exactly: a changed label, a renamed or added key and a changed sequence length each fail
(or, when the shape of a companion changes, are a ``shape_changed`` error) instead of slipping by.

Strings are kept as ``<U`` rather than UTF-8 bytes because numpy's fixed-width unicode holds any
code point, the empty string and an inner NUL exactly, reads back from ``.npy`` without pickle and
compares element by element (``compare.outputs`` treats unicode arrays of any width as one dtype,
so a longer string in a later run is a mismatch of that element, not a changed dtype). The one
thing ``<U`` cannot hold is a *trailing* NUL (numpy strips it), so a string ending in NUL is a
``ModelError`` rather than a silent truncation.

A map whose values are not floats cannot mark a missing key with NaN, so a sequence of such maps
with differing keys is a ``ModelError``. Other types (``optional(...)``, a sequence of sequences or
of maps other than the above, sparse tensors) are refused by ``check_output_type`` with a
``ModelError`` naming the output and its type, which a check records as an ``error`` verdict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.errors import ModelError

KEYS_SUFFIX = ":keys"
SHAPES_SUFFIX = ":shapes"

_ANY = r"(\w+)"  # a tensor of any element type numpy gets from ONNX Runtime
_ELEMENT = r"(float16|float|double|u?int(?:8|16|32|64)|bool|string)"  # what a map value can be
_TENSOR = re.compile(rf"^tensor\({_ANY}\)$")
_SEQUENCE = re.compile(rf"^seq\(tensor\({_ANY}\)\)$")
_MAP = re.compile(rf"^map\((int64|string),\s*tensor\({_ELEMENT}\)\)$")
_SEQ_OF_MAPS = re.compile(rf"^seq\(map\((int64|string),\s*tensor\({_ELEMENT}\)\)\)$")

_NUMPY = {
    "float16": np.float16,
    "float": np.float32,
    "double": np.float64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
    "string": np.str_,
}


@dataclass(frozen=True)
class Layout:
    """How one output type becomes tensors: its ``kind`` and element types (see the module docstring)."""

    kind: str  # "tensor" | "sequence" | "map" | "maps"
    element: str  # the ONNX element type of the values ("float", "string", ...)
    key: str | None = None  # "int64" | "string" for maps


def layout(type_text: str) -> Layout | None:
    """The layout of an ONNX Runtime type string, or None for a type onnxmon cannot compare."""
    compact = type_text.replace(" ", "")
    for kind, pattern in (("tensor", _TENSOR), ("sequence", _SEQUENCE)):
        match = pattern.match(compact)
        if match is not None:
            return Layout(kind, match.group(1))
    for kind, pattern in (("map", _MAP), ("maps", _SEQ_OF_MAPS)):
        match = pattern.match(compact)
        if match is not None:
            return Layout(kind, match.group(2), key=match.group(1))
    return None


def keys_name(output: str) -> str:
    """Name of the companion tensor holding the sorted keys of a map or sequence-of-maps output."""
    return output + KEYS_SUFFIX


def shapes_name(output: str) -> str:
    """Name of the companion tensor holding the element shapes of a sequence-of-tensors output."""
    return output + SHAPES_SUFFIX


def is_plain(type_text: str) -> bool:
    """True for a tensor numpy holds as ONNX Runtime returns it (any ``tensor(...)`` but strings)."""
    return type_text.startswith("tensor(") and type_text != "tensor(string)"


def companions(name: str, type_text: str) -> tuple[str, ...]:
    """The tensors output ``name`` becomes, in order; ``(name,)`` for a plain tensor."""
    found = layout(type_text)
    if found is None or found.kind == "tensor":
        return (name,)
    if found.kind == "sequence":
        return (name, shapes_name(name))
    return (name, keys_name(name))


def check_output_type(name: str, type_text: str, model: str) -> None:
    """``ModelError`` for an output type that cannot be stored and compared."""
    found = layout(type_text)
    if found is None:
        raise ModelError(
            f"model {model}: output {name!r} has type {type_text}, which onnxmon cannot compare"
            " (supported: tensors, string tensors, seq(tensor(...)), map(...), seq(map(...)))"
        )


def flatten(name: str, type_text: str, value: Any) -> dict[str, np.ndarray]:
    """The companion tensors of one output value, by name (see the module docstring)."""
    found = layout(type_text)
    if found is None:
        raise ModelError(f"output {name!r}: type {type_text} cannot be compared")
    if found.kind == "tensor":
        return {name: _tensor(name, value, found.element)}
    if found.kind == "sequence":
        values, shapes = _flatten_sequence(name, found.element, value)
        return {name: values, shapes_name(name): shapes}
    if found.kind == "map":
        ordered = sorted(value)
        values = _values(name, [value[k] for k in ordered], found.element)
        return {name: values, keys_name(name): _keys(name, ordered, found.key)}
    values, keys = flatten_maps(name, type_text, value)
    return {name: values, keys_name(name): keys}


def flatten_maps(name: str, type_text: str, value: Any) -> tuple[np.ndarray, np.ndarray]:
    """(values ``(maps, keys)``, sorted union of keys) of one sequence-of-maps output value."""
    found = layout(type_text)
    if found is None or found.kind != "maps":
        raise ModelError(f"output {name!r}: type {type_text} is not a sequence of maps")
    maps: Sequence[Mapping[Any, Any]] = list(value)
    first = sorted(maps[0]) if maps else []
    same = all(len(entry) == len(first) and all(k in entry for k in first) for entry in maps)
    labels = first if same else sorted(set().union(*maps))
    dtype = np.dtype(_NUMPY[found.element])
    if same:
        values = _values(name, [[entry[k] for k in labels] for entry in maps], found.element)
        return values.reshape(len(maps), len(labels)), _keys(name, labels, found.key)
    if dtype.kind != "f":
        raise ModelError(
            f"output {name!r}: its maps have different keys ({_differ(maps, first)}) and {found.element}"
            " values, which cannot mark a missing key; onnxmon compares such maps only with float values"
        )
    column = {label: index for index, label in enumerate(labels)}
    values = np.full((len(maps), len(labels)), np.nan, dtype=dtype)
    for row, entry in enumerate(maps):
        for label, number in entry.items():
            values[row, column[label]] = number
    return values, _keys(name, labels, found.key)


def _flatten_sequence(name: str, element: str, value: Any) -> tuple[np.ndarray, np.ndarray]:
    items = [_tensor(f"{name}[{index}]", item, element) for index, item in enumerate(value)]
    rank = max((item.ndim for item in items), default=0)
    shapes = np.full((len(items), rank), -1, dtype=np.int64)
    for row, item in enumerate(items):
        shapes[row, : item.ndim] = item.shape
    dtype = np.dtype(_NUMPY.get(element, np.float32)) if element != "string" else np.dtype("<U1")
    if not items:
        return np.zeros((0,), dtype=dtype), shapes
    if all(item.shape == items[0].shape for item in items):
        return np.stack(items), shapes
    return np.concatenate([item.ravel() for item in items]), shapes


def _tensor(name: str, value: Any, element: str) -> np.ndarray:
    array = np.asarray(value)
    if element == "string":
        return text(name, array)
    return array


def _values(name: str, values: Any, element: str) -> np.ndarray:
    if element == "string":
        return text(name, np.array(values, dtype=object).reshape(np.shape(values)))
    return np.array(values, dtype=_NUMPY[element])


def _keys(name: str, keys: Sequence[Any], key_type: str | None) -> np.ndarray:
    if key_type == "string":
        return text(keys_name(name), np.array(keys, dtype=object))
    return np.array(keys, dtype=np.int64)


def text(name: str, array: np.ndarray) -> np.ndarray:
    """A string array (ONNX Runtime's object array of ``str``) as numpy unicode, same shape."""
    if array.dtype.kind == "U":
        return array
    flat: Iterable[Any] = array.ravel().tolist()
    for index, item in enumerate(flat):
        if not isinstance(item, str):
            raise ModelError(f"output {name!r}: element {index} is {type(item).__name__}, not a string")
        if item.endswith("\x00"):
            raise ModelError(f"output {name!r}: element {index} ends in NUL, which a stored string cannot hold")
    return array.astype(np.str_) if array.size else np.zeros(array.shape, dtype="<U1")


def _differ(maps: Sequence[Mapping[Any, Any]], first: list[Any]) -> str:
    for index, entry in enumerate(maps):
        if sorted(entry) != first:
            return f"map {index} has {sorted(entry)[:10]}, map 0 has {first[:10]}"
    return "maps differ"
