"""The measurement of one chunk: about twenty numpy passes in float64 scratch buffers.

``stream.ChunkStream`` cuts the output into chunks and hands each to its ``Worker``, which
folds the chunk into its order-free totals (counts, maxima, the p99 candidates) and keeps the
chunk's five float sums for ``stream._merge`` to fold in chunk order.

What keeps it near memory speed (``bench/bench_compare.py`` measures it against one copy of both
tensors): a bitwise-equal chunk (tested on the integer view of the bits) only adds its squares;
``|d|`` is computed once; p99 keeps the largest ``k`` errors behind a rising threshold
(``p99.py``); the ``atol + rtol*|b|`` count is skipped when ``max|d| <= atol`` and its limits are
reused by the error ratio; the error ratio and the relative error are skipped for a chunk whose
``max|d|`` bound cannot beat the running max, and divided out only for the elements that could;
once those elements and the p99 candidates are few, one comparison with the lowest of their bounds
picks them all (``_few_tails``), instead of a pass each.
Sums are lanes (``formulas.lane_sums``), never a BLAS dot: ``np.dot`` over a chunk made OpenBLAS
spread it over its own spinning threads, and its order depends on the CPU's kernel.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from monitor.compare.formulas import LANES, coarse_ulp, fold_lanes, lane_sums
from monitor.compare.p99 import Largest
from monitor.results import AppliedTolerance

_TINY = float(np.finfo(np.float64).tiny)


def _fmax(values: npt.NDArray[np.float64]) -> float:
    """The largest value, NaN skipped (the 0/0 of a zero tolerance); 0.0 for none."""
    return float(np.fmax.reduce(values)) if values.size else 0.0


Array = npt.NDArray[np.generic]
F64 = npt.NDArray[np.float64]


class Worker:
    """The scratch buffers, the order-free totals and the per-chunk float sums of one output's pass."""

    def __init__(
        self,
        dtype: np.dtype[np.generic],
        tol: AppliedTolerance,
        chunk: int,
        largest: Largest,
        *,
        exact: bool,
        ulp_dtype: np.dtype[np.generic] | None = None,
    ) -> None:
        self.exact, self.tol = exact, tol
        self.ulp_dtype = None if ulp_dtype is None or ulp_dtype == dtype else np.dtype(ulp_dtype)
        self.floor = max(tol.atol, _TINY)
        self.float64_input = dtype == np.float64
        self.int_view = np.dtype(f"i{dtype.itemsize}")
        self.a64, self.b64, self.err, self.abs_b, self.limit = (np.empty(chunk) for _ in range(5))
        self.mask = np.empty(chunk, np.bool_)
        self.int_diff, self.int_sign = np.empty(chunk, self.int_view), np.empty(chunk, self.int_view)
        self.largest = largest
        self.lanes, self.products = np.zeros((5, LANES)), np.empty(chunk)  # formulas.py: the summation order
        # chunk index -> (ss_a, ss_b, ss_err, dot_ab, sum_abs), folded in chunk order by _merge
        self.sums: dict[int, tuple[float, float, float, float, float]] = {}
        self.finite_count = self.finite_mismatch = self.nonfinite_mismatch = 0
        self.nan_count = self.nan_mismatch = self.inf_count = self.inf_mismatch = 0
        self.max_abs = self.max_rel = self.max_ratio = 0.0
        self.max_ulp = 0
        self.bitwise_equal = True
        self.p99_few = False  # whether the last chunk's p99 candidates were under an eighth of it

    def update(self, index: int, raw_a: Array, raw_b: Array) -> None:
        n = raw_a.size
        int_a, int_b = raw_a.view(self.int_view), raw_b.view(self.int_view)
        if self.exact:
            differ = int(np.count_nonzero(np.not_equal(int_a, int_b, out=self.mask[:n])))
            diff_max = diff_min = 0
        else:  # the bit-pattern difference doubles as the equality test and the ULP distance
            int_diff = np.subtract(int_a, int_b, out=self.int_diff[:n])
            diff_max, diff_min = int(int_diff.max()), int(int_diff.min())
            differ = diff_max != 0 or diff_min != 0
        if not differ:
            self.sums[index] = self._equal_chunk(raw_a)
            return
        self.bitwise_equal = False
        a, b = self._as_float64(raw_a, self.a64), self._as_float64(raw_b, self.b64)
        ss_a, ss_b = self._squares(a, b)
        if self.exact:
            self.finite_mismatch += differ
            self.finite_count += n
        elif math.isfinite(ss_a) and math.isfinite(ss_b):
            self.finite_count += n
            self._ulp(int_a, int_b, int_diff, diff_max, diff_min)
        else:
            raw_a, raw_b, a, b = self._position_rule(raw_a, raw_b, a, b)
            self._squares(a, b)
            int_a, int_b = raw_a.view(self.int_view), raw_b.view(self.int_view)
            int_diff = np.subtract(int_a, int_b, out=self.int_diff[:n])
            self._ulp(int_a, int_b, int_diff, int(int_diff.max()), int(int_diff.min()))
        self._errors(a, b)
        ss_a, ss_b, ss_err, dot_ab, sum_abs = fold_lanes(self.lanes)
        self.sums[index] = (ss_a, ss_b, ss_err, dot_ab, sum_abs)

    def _lane_dot(self, x: F64, y: F64, row: int) -> None:
        """Lanes of ``sum(x * y)`` into ``self.lanes[row]`` (the order of ``formulas.py``)."""
        lane_sums(np.multiply(x, y, out=self.products[: x.size]), self.lanes[row])

    def _squares(self, a: F64, b: F64) -> tuple[float, float]:
        self._lane_dot(a, a, 0)
        self._lane_dot(b, b, 1)
        ss_a, ss_b = fold_lanes(self.lanes[:2])
        return ss_a, ss_b

    def _errors(self, a: F64, b: F64) -> None:
        """Fold one chunk's errors into the maxima and counts, and their sums into lanes 2-4."""
        n = a.size
        err = np.subtract(a, b, out=self.err[:n])
        self._lane_dot(err, err, 2)
        self._lane_dot(a, b, 3)
        np.abs(err, out=err)  # |d| once, reused by every metric below
        chunk_max = float(err.max()) if n else 0.0
        if chunk_max == 0.0:
            self.lanes[4] = 0.0
            return
        self.max_abs = max(self.max_abs, chunk_max)
        lane_sums(err, self.lanes[4])
        abs_b = limit = None
        if not self.exact and chunk_max > self.tol.atol:  # else no element can break the rule
            abs_b, limit = self._limit(b)
            self.finite_mismatch += int(np.count_nonzero(np.greater(err, limit, out=self.mask[:n])))
        # ratio <= max|d| / atol (a normal atol: a subnormal or zero one bounds nothing)
        ratio = not self.exact and (self.tol.atol < _TINY or chunk_max / self.tol.atol > self.max_ratio)
        rel = chunk_max / self.floor > self.max_rel  # |d| / max(|b|, floor) <= max|d| / floor
        if self._few_tails(err, b, limit, chunk_max, ratio=ratio, rel=rel):
            return
        if ratio:
            self.max_ratio = max(self.max_ratio, self._max_ratio(err, b, limit))
        if rel:
            self.max_rel = max(self.max_rel, self._max_rel(err, b, abs_b))
        self._offer(err, chunk_max)

    def _offer(self, err: F64, chunk_max: float) -> None:
        """The chunk's p99 candidates (``p99.Largest.offer``); notes whether they were few, for the next chunk."""
        self.p99_few = self.largest.offer(err, chunk_max, self.mask) * 8 < err.size

    def _few_tails(self, err: F64, b: F64, limit: F64 | None, chunk_max: float, *, ratio: bool, rel: bool) -> bool:
        """The error ratio, relative error and p99 candidates from one pass over ``|d|``, when few elements matter.

        Each of the three reads only the elements of ``|d|`` above its own bound (the running
        maxima's, as in ``_max_ratio`` and ``_max_rel``; the p99 floor). One comparison with the lowest
        bound picks a superset of all three; when it is under an eighth of the chunk, each takes its
        own elements from it, in index order, as its own pass would have: the same maxima and the
        same candidates, to the bit. False (nothing done) when a bound skips nothing or the superset
        is large: the three passes follow.
        """
        n = err.size
        # the p99 floor joins when the last chunk's candidates were few: it rises to the top 1 %
        # only as the stream goes on, and below that it would make every superset large
        p99_joins = self.p99_few and chunk_max > self.largest.floor
        bounds = [self.largest.floor] if p99_joins else []
        ratio_bound = self.max_ratio * self.tol.atol * (1 - 2**-50)
        rel_bound = self.max_rel * self.floor * (1 - 2**-50)
        if ratio:
            if not (self.tol.rtol >= 0 and self.tol.atol >= _TINY and 2.0**-1000 <= ratio_bound < math.inf):
                return False
            bounds.append(ratio_bound)
        if rel:
            if not 2.0**-1000 <= rel_bound < math.inf:
                return False
            bounds.append(rel_bound)
        if not bounds:  # nothing can beat a running maximum; the p99 candidates, if any, on their own
            self._offer(err, chunk_max)
            return True
        above = np.greater(err, min(bounds), out=self.mask[:n])
        if int(np.count_nonzero(above)) * 8 >= n:
            return False
        index = np.flatnonzero(above)
        tail = err[index]
        if ratio:
            own = tail > ratio_bound
            if int(np.count_nonzero(own)) * 8 >= n:  # as _max_ratio: the whole chunk divided out
                self.max_ratio = max(self.max_ratio, self._max_ratio(err, b, limit))
            elif own.any():
                few = index[own]
                if limit is not None:
                    found = _fmax(tail[own] / limit[few])
                else:
                    scale = np.abs(b[few])
                    scale *= self.tol.rtol
                    scale += self.tol.atol
                    found = _fmax(np.divide(tail[own], scale, out=scale))
                self.max_ratio = max(self.max_ratio, found)
        if rel:
            own = tail > rel_bound
            if int(np.count_nonzero(own)) * 8 >= n:  # as _max_rel: the whole chunk divided out
                self.max_rel = max(self.max_rel, self._max_rel(err, b, None))
            elif own.any():
                scale = np.maximum(np.abs(b[index[own]]), self.floor)
                self.max_rel = max(self.max_rel, float(np.divide(tail[own], scale, out=scale).max()))
        if p99_joins:
            candidates = tail[tail > self.largest.floor]
            self.largest.offer_few(candidates)
            self.p99_few = candidates.size * 8 < n
        else:
            self._offer(err, chunk_max)
        return True

    def _limit(self, b: F64) -> tuple[F64, F64]:
        """``|b|`` and ``atol + rtol*|b|``, each element's limit, in this worker's buffers."""
        abs_b = np.abs(b, out=self.abs_b[: b.size])
        limit = np.multiply(abs_b, self.tol.rtol, out=self.limit[: b.size])
        limit += self.tol.atol
        return abs_b, limit

    def _max_ratio(self, err: F64, b: F64, limit: F64 | None) -> float:
        """Max of ``|d| / (atol + rtol*|b|)``, divided out only where it can beat the running max.

        A zero tolerance makes any error infinite (0/0 is 0). With a normal atol and rtol >= 0 every
        limit is >= atol, so ``|d| <= max_ratio * atol`` (less a 2**-50 margin for the rounding, as
        in ``_max_rel``) cannot beat the running max: those elements are skipped.
        """
        n = err.size
        bound = self.max_ratio * self.tol.atol * (1 - 2**-50)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.tol.rtol >= 0 and self.tol.atol >= _TINY and 2.0**-1000 <= bound < math.inf:
                candidates = np.greater(err, bound, out=self.mask[:n])
                if int(np.count_nonzero(candidates)) * 8 < n:
                    index = np.flatnonzero(candidates)
                    if limit is not None:
                        return _fmax(err[index] / limit[index])
                    few = np.abs(b[index])
                    few *= self.tol.rtol
                    few += self.tol.atol
                    return _fmax(np.divide(err[index], few, out=few))
            if limit is None:
                limit = self._limit(b)[1]
            return _fmax(np.divide(err, limit, out=self.limit[:n]))

    def _max_rel(self, err: F64, b: F64, abs_b: F64 | None) -> float:
        """Max of ``|d| / max(|b|, floor)``, divided out only where it can beat the running max."""
        n = err.size
        # |d| <= max_rel * floor implies |d| / max(|b|, floor) <= max_rel; the 2**-50 margin keeps
        # that true after rounding (in the normal range: a subnormal or infinite bound skips nothing),
        # so skipping those elements never changes the maximum
        bound = self.max_rel * self.floor * (1 - 2**-50)
        candidates = np.greater(err, bound, out=self.mask[:n])
        if 2.0**-1000 <= bound < math.inf and int(np.count_nonzero(candidates)) * 8 < n:
            index = np.flatnonzero(candidates)
            err, abs_b = err[index], np.abs(b[index])
            n = err.size
        elif abs_b is None:
            abs_b = np.abs(b, out=self.abs_b[:n])
        scale = np.maximum(abs_b, self.floor, out=self.limit[:n])
        return float(np.divide(err, scale, out=scale).max()) if n else 0.0

    def _equal_chunk(self, raw: Array) -> tuple[float, float, float, float, float]:
        """Bitwise-equal chunk: errors are exactly zero; only the squares and NaN/Inf remain."""
        n = raw.size
        values = self._as_float64(raw, self.a64)
        self._lane_dot(values, values, 0)
        squares = fold_lanes(self.lanes[:1])[0]
        finite = n
        if not self.exact and not math.isfinite(squares):
            nan, inf = int(np.count_nonzero(np.isnan(values))), int(np.count_nonzero(np.isinf(values)))
            self.nan_count, self.inf_count = self.nan_count + nan, self.inf_count + inf
            finite = n - nan - inf
            if nan or inf:  # zeroed, not dropped: the lanes keep every element's position
                kept = np.where(np.isfinite(values), values, 0.0)
                self._lane_dot(kept, kept, 0)
                squares = fold_lanes(self.lanes[:1])[0]
        self.finite_count += finite
        return squares, squares, 0.0, squares, 0.0

    def _position_rule(self, raw_a: Array, raw_b: Array, a: F64, b: F64) -> tuple[Array, Array, F64, F64]:
        """Count NaN/Inf (dis)agreements, then zero every position not finite on both sides."""
        nan_a, nan_b, inf_a, inf_b = np.isnan(a), np.isnan(b), np.isinf(a), np.isinf(b)
        same = a == b  # true for equal signed Inf, false for NaN
        both_finite = ~(nan_a | nan_b | inf_a | inf_b)
        self.nan_count += int(np.count_nonzero(nan_a))
        self.inf_count += int(np.count_nonzero(inf_a))
        self.nan_mismatch += int(np.count_nonzero(nan_a != nan_b))
        self.inf_mismatch += int(np.count_nonzero((inf_a | inf_b) & ~same))
        self.nonfinite_mismatch += int(np.count_nonzero(~both_finite & ~same & ~(nan_a & nan_b)))
        finite = int(np.count_nonzero(both_finite))
        self.finite_count += finite  # the others are zeroed: errors of 0 are never p99 candidates
        outside = ~both_finite
        raw_a, raw_b, a, b = raw_a.copy(), raw_b.copy(), a.copy(), b.copy()
        for array in (raw_a, raw_b, a, b):
            array[outside] = 0
        return raw_a, raw_b, a, b

    def _ulp(self, int_a: Array, int_b: Array, int_diff: Array, diff_max: int, diff_min: int) -> None:
        """Max ULP distance in the output's own dtype from the bit-pattern difference."""
        if self.ulp_dtype is not None:  # two float dtypes compared in float64: count in the coarser
            self.max_ulp = max(self.max_ulp, coarse_ulp(int_a.view(np.float64), int_b.view(np.float64), self.ulp_dtype))
            return
        # Same-sign floats are ordered like their bit patterns, so the difference is exact and
        # never overflows; opposite signs are |a| + |b| in ULPs (+0 and -0 are 0 apart).
        n = int_a.size
        sign = np.bitwise_xor(int_a, int_b, out=self.int_sign[:n])
        if int(sign.min()) < 0:  # rare positions (values near zero): handled by index
            opposite = np.flatnonzero(np.less(sign, 0, out=self.mask[:n]))
            magnitude = (1 << (8 * self.int_view.itemsize - 1)) - 1
            across = np.bitwise_and(int_a[opposite], magnitude).astype(np.uint64)
            across += np.bitwise_and(int_b[opposite], magnitude).astype(np.uint64)
            self.max_ulp = max(self.max_ulp, int(across.max()))
            int_diff[opposite] = 0  # int_diff is this worker's buffer
            diff_max, diff_min = int(int_diff.max()), int(int_diff.min())
        self.max_ulp = max(self.max_ulp, diff_max, -diff_min)

    def _as_float64(self, raw: Array, buffer: F64) -> F64:
        if self.float64_input:
            return raw  # type: ignore[return-value]
        out = buffer[: raw.size]
        np.copyto(out, raw, casting="unsafe")
        return out
