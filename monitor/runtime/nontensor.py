"""Non-tensor model outputs turned into tensors that baselines store and checks compare.

Why: skl2onnx gives every classifier a ZipMap by default, so the probabilities that people
deploy come out as ``seq(map(int64, tensor(float)))``: a Python list of ``{label: probability}``
dicts, which no ``.npy`` holds. Such an output ``name`` becomes two tensors:

- ``name``: the probabilities as a 2-D array ``(samples, labels)``, columns in the order of the
  sorted labels, in the map's value dtype (float32 for ``tensor(float)``), so it is compared
  like any float output (tolerances, cosine, top-k);
- ``name:keys`` (``keys_name``): the sorted labels, int64 for integer labels, or for string
  labels the UTF-8 bytes of the labels joined by NUL as uint8, compared exactly: a model whose
  classes changed fails even when the probabilities happen to agree.

Every map of one output must have the same labels (ZipMap guarantees it); a sequence whose maps
disagree is a ``ModelError``. Other non-tensor types (a sequence of tensors, a bare map, an
optional) are refused by ``check_output_type`` with a ``ModelError`` naming the output and its
type, which a check records as an ``error`` verdict instead of crashing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from monitor.errors import ModelError

KEYS_SUFFIX = ":keys"
_SEQ_OF_MAPS = re.compile(r"^seq\(map\((int64|string),\s*tensor\((float|double)\)\)\)$")
_VALUE_DTYPES = {"float": np.float32, "double": np.float64}


def keys_name(output: str) -> str:
    """Name of the companion tensor holding the labels of a sequence-of-maps output."""
    return output + KEYS_SUFFIX


def is_tensor(type_text: str) -> bool:
    """True for ONNX Runtime's ``tensor(...)`` type strings."""
    return type_text.startswith("tensor(")


def is_sequence_of_maps(type_text: str) -> bool:
    """True for ``seq(map(int64|string, tensor(float|double)))``, ZipMap's output type."""
    return _SEQ_OF_MAPS.match(type_text) is not None


def check_output_type(name: str, type_text: str, model: str) -> None:
    """``ModelError`` for an output type that cannot be stored and compared."""
    if not (is_tensor(type_text) or is_sequence_of_maps(type_text)):
        raise ModelError(
            f"model {model}: output {name!r} has type {type_text}, which onnxmon cannot compare"
            " (tensors and ZipMap's seq(map(...)) are supported)"
        )


def flatten_maps(name: str, type_text: str, value: Any) -> tuple[np.ndarray, np.ndarray]:
    """(values ``(n, labels)``, labels) of one sequence-of-maps output value, see the module docstring."""
    match = _SEQ_OF_MAPS.match(type_text)
    if match is None:
        raise ModelError(f"output {name!r}: type {type_text} is not a sequence of maps")
    maps: Sequence[dict[Any, Any]] = list(value)
    labels = sorted(maps[0]) if maps else []
    for index, entry in enumerate(maps):
        if sorted(entry) != labels:
            raise ModelError(f"output {name!r}: map {index} has labels {sorted(entry)[:10]}, map 0 has {labels[:10]}")
    dtype = _VALUE_DTYPES[match.group(2)]
    values = np.array([[entry[k] for k in labels] for entry in maps], dtype=dtype).reshape(len(maps), len(labels))
    keys: np.ndarray
    if match.group(1) == "int64":
        keys = np.array(labels, dtype=np.int64)
    else:
        keys = np.frombuffer("\x00".join(str(k) for k in labels).encode("utf-8"), dtype=np.uint8).copy()
    return values, keys
