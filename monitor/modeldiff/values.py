"""The numbers inside one tensor: digest, summary statistics and the element-wise change.

Everything here works on one tensor (or one list attribute) at a time and walks it in chunks of
``CHUNK`` elements, converting only the chunk to float64, so diffing two multi-gigabyte models
holds at most one chunk of float64 per side on top of the models themselves.

``max_rel_change`` is ``max |new - old| / max(|old|, REL_FLOOR * scale)`` where ``scale`` is the
largest finite magnitude of the old tensor: an element smaller than a thousandth of the tensor's
largest is measured against that thousandth, so an fp16 conversion that flushes a 1e-9 weight to
zero reads as a small change of the tensor, not as a relative change of 1. (A tensor that was all
zeros has no relative change: ``None``.) Two NaNs at the same position are no change; a NaN against a number, or
an infinity whose sign flipped, is an infinite change.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

CHUNK = 1 << 20
REL_FLOOR = 1e-3
FLOAT_TYPES = frozenset(
    {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
)


def dtype_name(data_type: int) -> str:
    """``float32``, ``float16``, ``int8``, … (ONNX's names, lower-cased and with sizes)."""
    try:
        return str(helper.tensor_dtype_to_np_dtype(data_type).name)
    except Exception:  # UNDEFINED or a type numpy cannot hold
        return str(onnx.TensorProto.DataType.Name(data_type)).lower() if data_type else "undefined"


def is_float(data_type: int) -> bool:
    return data_type in FLOAT_TYPES


def is_numeric(data_type: int) -> bool:
    return data_type not in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED)


def as_array(tensor: onnx.TensorProto) -> np.ndarray[Any, Any]:
    """The tensor's values, flat (a view of ``raw_data`` where ONNX stores it raw)."""
    return np.asarray(numpy_helper.to_array(tensor)).reshape(-1)


def digest(tensor: onnx.TensorProto) -> str:
    """sha256 of the tensor's values as little-endian bytes (raw or typed storage alike)."""
    sha = hashlib.sha256()
    if tensor.data_type == onnx.TensorProto.STRING:
        for item in tensor.string_data:
            sha.update(len(item).to_bytes(8, "little"))
            sha.update(item)
        return sha.hexdigest()
    if tensor.HasField("raw_data"):
        sha.update(tensor.raw_data)  # ONNX's raw stream is little-endian by definition: canonical
        return sha.hexdigest()
    array = as_array(tensor)
    for start in range(0, array.size, CHUNK):
        sha.update(np.ascontiguousarray(array[start : start + CHUNK]).astype(array.dtype.newbyteorder("<")).tobytes())
    return sha.hexdigest()


def list_digest(values: np.ndarray[Any, Any]) -> str:
    """sha256 of a list attribute's values (floats as float32, ints as int64, little-endian)."""
    return hashlib.sha256(np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<")).tobytes()).hexdigest()


def stats(array: np.ndarray[Any, Any]) -> dict[str, float] | None:
    """min, max, mean and std of the finite values of a float array (None when it has none)."""
    count, total, lo, hi = 0, 0.0, math.inf, -math.inf
    for start in range(0, array.size, CHUNK):
        chunk = array[start : start + CHUNK].astype(np.float64)
        chunk = chunk[np.isfinite(chunk)]
        if chunk.size:
            count += chunk.size
            total += float(chunk.sum())
            lo, hi = min(lo, float(chunk.min())), max(hi, float(chunk.max()))
    if count == 0:
        return None
    mean = total / count
    # A second pass around the mean: one-pass sums of squares lose everything for large means.
    squares = 0.0
    for start in range(0, array.size, CHUNK):
        chunk = array[start : start + CHUNK].astype(np.float64)
        chunk = chunk[np.isfinite(chunk)]
        squares += float(np.square(chunk - mean).sum())
    return {"min": lo, "max": hi, "mean": mean, "std": math.sqrt(squares / count)}


@dataclass(frozen=True)
class Change:
    """How far the elements of two same-shape arrays are apart."""

    changed: int
    max_abs: float
    max_rel: float | None


def change(old: np.ndarray[Any, Any], new: np.ndarray[Any, Any]) -> Change:
    """The element-wise change from ``old`` to ``new`` (flat, same size), chunk by chunk in float64."""
    changed, max_abs, max_rel = 0, 0.0, None
    floor = REL_FLOOR * _scale(old)
    for start in range(0, old.size, CHUNK):
        a = old[start : start + CHUNK].astype(np.float64)
        b = new[start : start + CHUNK].astype(np.float64)
        moved = ~((a == b) | (np.isnan(a) & np.isnan(b)))
        count = int(moved.sum())
        if not count:
            continue
        changed += count
        a, b = a[moved], b[moved]
        with np.errstate(invalid="ignore", over="ignore"):
            delta = np.abs(b - a)
        delta[~np.isfinite(delta)] = math.inf  # NaN against a number, or inf against -inf
        max_abs = max(max_abs, float(delta.max()))
        if floor > 0:
            with np.errstate(invalid="ignore", over="ignore"):
                rel = delta / np.maximum(np.abs(a), floor)
            rel[np.isnan(rel)] = math.inf
            max_rel = max(max_rel or 0.0, float(rel.max()))
    return Change(changed, max_abs, max_rel)


def _scale(array: np.ndarray[Any, Any]) -> float:
    """The largest finite magnitude in ``array`` (0.0 when it has none)."""
    scale = 0.0
    for start in range(0, array.size, CHUNK):
        chunk = np.abs(array[start : start + CHUNK].astype(np.float64))
        chunk = chunk[np.isfinite(chunk)]
        if chunk.size:
            scale = max(scale, float(chunk.max()))
    return scale
