"""Output digests: what a node computed, as a hash one can compare across nodes (``onnxmon fleet``).

Each produced output of each sample is hashed with xxh3-128 (``xxhash``: about 30 GB/s, far below a
check's cost, ``bench/bench_digest.py``) over a header naming its dtype and shape, then its raw
bytes in C order: two outputs share a digest only when their dtype, shape and every bit agree. The
run's digest is xxh3-128 of the outputs' names and sample digests, in output order: two runs share it
only when every output of every sample does.

Beside the hashes, each floating output keeps two figures over all its samples (``total``, the sum of
its elements, and ``magnitude``, their L2 norm; non-finite elements count as 0): where a group of nodes
cannot be bit-exact, the vote compares these within a tolerance instead (``monitor/fleet/``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import xxhash

from monitor.results import OutputDigest

__all__ = ["DigestAccumulator", "array_digest", "run_digest"]


def array_digest(array: np.ndarray) -> str:
    """xxh3-128 (hex) of ``array``'s dtype, shape and raw bytes in C order; objects by their ``repr``."""
    hasher = xxhash.xxh3_128()
    hasher.update(f"{array.dtype.str}{list(array.shape)}|".encode())
    if array.dtype.hasobject:
        hasher.update(repr(array.tolist()).encode())
    else:
        hasher.update(np.ascontiguousarray(array).data)
    return hasher.hexdigest()


def run_digest(digests: Sequence[OutputDigest]) -> str | None:
    """One digest of the whole run: every output's name and sample digests, in order; None without outputs."""
    if not digests:
        return None
    hasher = xxhash.xxh3_128()
    for digest in digests:
        hasher.update(f"{digest.name}\x00{','.join(digest.samples)}\x01".encode())
    return hasher.hexdigest()


ONES_CACHED = 1 << 22
"""Outputs up to this many elements are summed by one BLAS dot with a kept vector of ones (4 MiB at most)."""


def _sums(array: np.ndarray, ones: dict[tuple[str, int], np.ndarray]) -> tuple[float, float]:
    """The elements' sum and L2 norm: two BLAS dots (with ones, with itself) in float32 (float64 for float64
    outputs), a few hundredths of a millisecond a megabyte; non-finite elements count as 0 (a slower pass)."""
    flat = array.reshape(-1)
    wide = np.float64 if array.dtype.itemsize >= 8 else np.float32
    if flat.dtype != wide:
        flat = flat.astype(wide)
    if flat.size <= ONES_CACHED:
        unit = ones.get((flat.dtype.str, flat.size))
        if unit is None:
            unit = ones[(flat.dtype.str, flat.size)] = np.ones(flat.size, flat.dtype)
        total = float(np.dot(flat, unit))
    else:
        total = float(np.add.reduce(flat))
    square = float(np.dot(flat, flat))
    if math.isfinite(total) and math.isfinite(square):
        return total, math.sqrt(square)
    exact = np.where(np.isfinite(flat), flat, 0.0).astype(np.float64)
    return float(exact.sum()), float(np.sqrt(np.dot(exact, exact)))


class DigestAccumulator:
    """Fed each sample's outputs (``feed``), as the comparison is; ``finish`` gives one ``OutputDigest`` each."""

    def __init__(self, names: Sequence[str]) -> None:
        self._names = tuple(names)
        self._samples: dict[str, list[str]] = {name: [] for name in self._names}
        self._total: dict[str, float] = {}
        self._magnitude: dict[str, float] = {}
        self._elements: dict[str, int] = {}
        self._ones: dict[tuple[str, int], np.ndarray] = {}

    def feed(self, produced: Mapping[str, np.ndarray]) -> None:
        for name in self._names:
            array = produced.get(name)
            if array is None:
                self._samples[name].append("")
                continue
            array = np.asarray(array)
            self._samples[name].append(array_digest(array))
            self._elements[name] = self._elements.get(name, 0) + int(array.size)
            if array.dtype.kind == "f" and array.size:
                total, magnitude = _sums(array, self._ones)
                self._total[name] = self._total.get(name, 0.0) + total
                self._magnitude[name] = math.hypot(self._magnitude.get(name, 0.0), magnitude)

    def finish(self) -> tuple[OutputDigest, ...]:
        return tuple(
            OutputDigest(
                name=name,
                samples=tuple(self._samples[name]),
                total=self._total.get(name),
                magnitude=self._magnitude.get(name),
                elements=self._elements.get(name, 0),
            )
            for name in self._names
        )
