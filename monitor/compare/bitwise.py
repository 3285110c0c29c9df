"""Bitwise identity of outputs: a digest of an array's bit patterns, and where two arrays' bits differ.

Two answers are the same when their dtype, shape and every element's bytes are: a NaN equals a NaN
with the same payload, ``-0.0`` differs from ``0.0``, which is what "bitwise" means and what a
float comparison cannot say. The digest (BLAKE2b, 16 bytes) covers the dtype and the shape, so an
answer of another shape never matches; an object array (strings from a ZipMap's keys, labels) is
digested by each element's text, length-prefixed, never by its pointers. Keeping a digest per
sample instead of the answer keeps memory at 16 bytes per output and sample.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


def digest(value: np.ndarray) -> bytes:
    """16 bytes that change when ``value``'s dtype, shape or any element's bit pattern does."""
    array = np.asarray(value)
    hasher = hashlib.blake2b(digest_size=16)
    hasher.update(f"{array.dtype.str}|{array.shape}|".encode())
    if array.dtype.kind == "O":
        for item in array.ravel():
            text = str(item).encode("utf-8", "surrogatepass")
            hasher.update(len(text).to_bytes(8, "little"))
            hasher.update(text)
    elif array.size:
        hasher.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
    return hasher.digest()


def digests(outputs: Mapping[str, np.ndarray]) -> dict[str, bytes]:
    """``digest`` of every output, by name."""
    return {name: digest(value) for name, value in outputs.items()}


@dataclass(frozen=True)
class BitDifference:
    """Where two answers' bits differ: how many elements, of how many, and the largest finite |a-b|."""

    elements_differing: int
    elements: int
    max_abs_difference: float | None  # None: not a numeric output, or no pair of finite values differs
    shape_or_dtype: str = ""  # "float32 (2, 3) vs float16 (2, 3)" when those differ (then nothing else is counted)


def difference(actual: np.ndarray, expected: np.ndarray) -> BitDifference:
    """The elements whose bit patterns differ between ``actual`` and ``expected``."""
    a, b = np.asarray(actual), np.asarray(expected)
    if a.dtype != b.dtype or a.shape != b.shape:
        return BitDifference(0, int(b.size), None, f"{a.dtype} {a.shape} vs {b.dtype} {b.shape}")
    if a.dtype.kind == "O":
        differs = np.fromiter((str(x) != str(y) for x, y in zip(a.ravel(), b.ravel(), strict=True)), bool, a.size)
        return BitDifference(int(differs.sum()), int(a.size), None)
    flat_a, flat_b = np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1)
    if a.dtype.itemsize in (1, 2, 4, 8):
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        differs = flat_a.view(unsigned) != flat_b.view(unsigned)
    else:  # complex, long double, fixed-width text: compare each element's bytes
        width = a.dtype.itemsize
        differs = np.any(flat_a.view(np.uint8).reshape(-1, width) != flat_b.view(np.uint8).reshape(-1, width), axis=1)
    count = int(differs.sum())
    largest: float | None = None
    if count and a.dtype.kind in "fiub":
        left, right = flat_a[differs].astype(np.float64), flat_b[differs].astype(np.float64)
        finite = np.isfinite(left) & np.isfinite(right)
        if finite.any():
            largest = float(np.max(np.abs(left[finite] - right[finite])))
            largest = largest if math.isfinite(largest) else None
    return BitDifference(count, int(a.size), largest)
