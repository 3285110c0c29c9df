"""Closed-form pieces of the chunked pass: BLAS-free dots, cosine, SNR, ULPs across float dtypes.

Kept apart from ``stream.py`` (which owns the pass and its workers) because each is a pure
function of a few numbers or one chunk, with its own reason to be written the way it is.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

# OpenBLAS computes a dot of <= 10000 elements on the calling thread: row-wise dots of 8192
# elements get BLAS speed without waking its thread pool.
DOT_ROW = 1 << 13

F64 = npt.NDArray[np.float64]


def dot(x: F64, y: F64) -> float:
    """Float64 dot product on the calling thread only (why: the docstring of ``stream.py``, BLAS threads)."""
    if x.size % DOT_ROW == 0:  # every full chunk: one call
        return float(np.vecdot(x.reshape(-1, DOT_ROW), y.reshape(-1, DOT_ROW)).sum())
    head = x.size - x.size % DOT_ROW
    return dot(x[:head], y[:head]) + float(np.einsum("i,i->", x[head:], y[head:]))


def cosine(dot_ab: float, ss_a: float, ss_b: float) -> float:
    if ss_a == 0.0 and ss_b == 0.0:
        return 1.0
    if ss_a == 0.0 or ss_b == 0.0:
        return 0.0
    return max(-1.0, min(1.0, dot_ab / math.sqrt(ss_a) / math.sqrt(ss_b)))


def snr_db(ss_b: float, ss_err: float) -> float:
    if ss_err == 0.0:
        return math.inf
    if ss_b == 0.0:
        return -math.inf
    return 10.0 * math.log10(ss_b / ss_err)


def coarse_ulp(a: F64, b: F64, dtype: np.dtype[np.generic]) -> int:
    """Max ULP distance of float64 values rounded to the narrower float ``dtype`` (fp16 or fp32).

    Rounding float64 to ``dtype`` once is the same as casting the finer original straight down,
    and the coarser original survives its round trip through float64 exactly.
    """
    view = np.dtype(f"i{dtype.itemsize}")
    int_a = a.astype(dtype).view(view).astype(np.int64)
    int_b = b.astype(dtype).view(view).astype(np.int64)
    magnitude = (1 << (8 * dtype.itemsize - 1)) - 1
    same_sign = (int_a ^ int_b) >= 0
    across = (int_a & magnitude) + (int_b & magnitude)  # opposite signs: |a| + |b| in ULPs
    distance = np.where(same_sign, np.abs(int_a - int_b), across)
    return int(distance.max()) if distance.size else 0
