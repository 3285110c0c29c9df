"""Closed-form pieces of the chunked pass: the summation order, cosine, SNR, ULPs across float dtypes.

Kept apart from ``stream.py`` (which owns the pass) because each is a pure
function of a few numbers or one chunk, with its own reason to be written the way it is.

The summation order (why a result never depends on how samples are split, or on the CPU)
-----------------------------------------------------------------------------------------
Every floating-point sum of the suite (sum of a², b², (a-b)², a·b and |a-b|) is taken in one
written order, which a plain loop reproduces (``tests/test_compare_exact.py`` holds one):

1. Within a chunk, element ``i`` goes into lane ``i % LANES``; each lane adds its elements in
   order, starting from 0.0 (``np.add.reduce`` along axis 0 of the ``(-1, LANES)`` view, which
   adds row after row).
2. The ``LANES`` lane totals are folded by halving (``fold_lanes``): lane ``j`` plus lane
   ``j + width`` for width 128, 64, ... 1.
3. The chunk totals are added in chunk order (``stream._merge``), starting from 0.0.

A BLAS dot's order depends on the CPU's kernel and numpy's pairwise ``sum`` on its blocking; this
order depends on neither. Adding an exact 0.0 (a non-finite position, an equal element's error)
never changes a lane, so skipping it is the same as adding it.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

# Lanes per sum: numpy's axis-0 reduction runs at memory speed from ~256 columns on.
LANES = 256

F64 = npt.NDArray[np.float64]


def lane_sums(products: F64, out: F64) -> F64:
    """``out[j]`` = the in-order sum of ``products[j::LANES]`` (step 1 of the order above)."""
    head = products.size - products.size % LANES
    np.add.reduce(products[:head].reshape(-1, LANES), axis=0, out=out)
    out[: products.size - head] += products[head:]
    return out


def fold_lanes(lanes: F64) -> list[float]:
    """Each row of ``lanes`` (``(k, LANES)``) folded to one total by halving (step 2 above)."""
    width = LANES // 2
    folded = lanes[:, :width] + lanes[:, width:]
    while width > 1:
        width //= 2
        folded = folded[:, :width] + folded[:, width:]
    return [float(total) for total in folded[:, 0]]


def cosine(dot_ab: float, ss_a: float, ss_b: float) -> float:
    if ss_a == 0.0 and ss_b == 0.0:
        return 1.0
    if ss_a == 0.0 or ss_b == 0.0:
        return 0.0
    value = dot_ab / math.sqrt(ss_a) / math.sqrt(ss_b)
    return value if math.isnan(value) else max(-1.0, min(1.0, value))  # NaN of overflowed sums stays NaN


def snr_db(ss_b: float, ss_err: float) -> float:
    if ss_err == 0.0:
        return math.inf
    if ss_b == 0.0:
        return -math.inf
    ratio = ss_b / ss_err  # 0.0 when the error's sum overflowed: an error past any signal
    return -math.inf if ratio == 0.0 else 10.0 * math.log10(ratio) if ratio == ratio else math.nan


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
