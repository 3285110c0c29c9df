"""The chunked accumulator behind ``monitor.compare``: every float/int metric in one pass, fed per sample.

``compare.py`` owns the tolerance rule and the metric definitions; this module only computes
them fast, with memory bounded by the chunk size plus the p99 candidates (up to 2% of the
elements, in float64, per worker). The flattened samples are cut into chunks of ``chunk`` elements (small samples are
packed together); ``workers`` threads take chunks from one shared iterator, each with its own
float64 scratch buffers, while numpy releases the GIL inside its loops.

Why the result never depends on the thread count or timing: the floating-point sums (squares,
dot product, absolute errors) are kept per chunk and folded in chunk order at the end, so they
are bit-identical to a single-threaded run; counts and maxima are exact in any order; the p99 is
an exact order statistic of the union of the workers' candidates (see ``p99.py``).

Costs measured in ``bench/bench_compare.py``:

* A bitwise-equal chunk (tested on the integer view of the bits) only adds its squares.
* Sums of products are row-wise ``np.vecdot`` over rows of 8192 elements: a single ``np.dot``
  over a 64k chunk makes OpenBLAS spread it over its own threads, whose spinning made the whole
  comparison 5-10x slower on a busy two-core machine (and ``OPENBLAS_NUM_THREADS=1`` is not a
  library's to set); ``np.einsum`` avoids BLAS too but is 1.5x slower than a one-thread ddot.
* p99 keeps the largest ``k`` errors seen (``k`` = 1% of the elements, known up front) behind a
  rising threshold: one compare and one sparse ``np.compress`` per chunk. The log-spaced
  histogram it replaces (``np.bincount`` into ~15k bins) was half of the whole run, and this is
  exact. The threshold starts at 0 and rises only to proven values (``p99.py`` says why there is
  no guess: the data is gone after its feed, so there is no second pass to fall back on).
* The relative error is skipped for a chunk whose ``max|d| / floor`` cannot beat the running max,
  and divided out only for the elements that could (when they are under 1/8 of the chunk); the
  ``atol + rtol*|b|`` count is skipped when ``max|d| <= atol``. ``|d|`` is computed once per chunk.
* What remains is ~20 numpy passes over each chunk plus ~40 Python-level calls: about 5x one
  copy of both tensors on one thread. Fusing them would take a compiled kernel (numba, C).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from monitor.compare import p99 as compare_p99
from monitor.compare.formulas import coarse_ulp, cosine, dot, snr_db
from monitor.compare.p99 import Largest, p99_rank_from_top
from monitor.results import AppliedTolerance, OutputMetrics

# 64k elements keep each worker's float64 buffers near its 2 MiB L2; bench/bench_compare.py
# measured it no slower than 32k (more Python calls) and faster than 256k and 1M.
DEFAULT_CHUNK_ELEMENTS = 1 << 16
# Two threads: numpy releases the GIL inside each pass, so two workers cut the wall time (1.2-1.9x
# on a lightly loaded two-core machine); more would take cores from the model being monitored.
DEFAULT_WORKERS = min(2, os.cpu_count() or 1)
_TINY = float(np.finfo(np.float64).tiny)

Array = npt.NDArray[np.generic]
F64 = npt.NDArray[np.float64]
Pair = tuple[Array, Array]


class ChunkStream:
    """The chunked pass over one output, fed one sample's (actual, baseline) pair at a time.

    ``elements`` bounds the elements that will be fed (the baseline's sizes summed over its
    samples): it fixes the chunk size, the thread count and the p99 candidates kept (1% of it), so
    the result is the same for any split of the same data into samples. Chunk indices run on
    across samples, and small samples are packed together across feeds. Memory: the workers'
    buffers plus, between feeds, at most one chunk of pending elements (copied, so a sample is
    never kept alive after its feed).
    """

    def __init__(
        self,
        dtype: np.dtype[np.generic],
        tol: AppliedTolerance,
        chunk: int,
        *,
        exact: bool,
        elements: int,
        workers: int = DEFAULT_WORKERS,
        ulp_dtype: np.dtype[np.generic] | None = None,
    ) -> None:
        self.exact, self.elements, self.count = exact, elements, 0
        self.chunk = chunk = min(chunk, max(elements, 1))
        threads = max(1, min(workers, -(-elements // chunk)))
        keep = p99_rank_from_top(elements)
        self.workers = [
            _Worker(dtype, tol, chunk, Largest(keep, chunk), exact=exact, ulp_dtype=ulp_dtype) for _ in range(threads)
        ]
        self.next_index = 0
        self.pending_a: list[Array] = []
        self.pending_b: list[Array] = []
        self.pending = 0

    def feed(self, actual: Array, expected: Array) -> None:
        """Measure one sample's pair (same dtype and shape; contiguous or not)."""
        self.count += actual.size
        if self.count > self.elements:
            raise ValueError(f"{self.count} elements fed, more than the {self.elements} announced")
        self._consume(list(self._pieces(actual.reshape(-1), expected.reshape(-1))))

    def finish(self) -> tuple[OutputMetrics, int]:
        """The metrics over everything fed, and the count of finite elements breaking the element rule."""
        if self.pending:
            self._consume([(np.concatenate(self.pending_a), np.concatenate(self.pending_b))])
            self.pending_a, self.pending_b, self.pending = [], [], 0
        p99 = compare_p99.p99(sum(w.finite_count for w in self.workers), [w.largest for w in self.workers])
        return _merge(self.workers, self.count, p99, exact=self.exact)

    def _pieces(self, flat_a: Array, flat_b: Array) -> Iterator[Pair]:
        """Pieces of exactly ``chunk`` elements; a short tail waits in ``pending`` for the next feeds.

        Every metric is order-free (sums, maxima, an order statistic), so packing changes nothing
        but the number of numpy calls per element.
        """
        chunk = self.chunk
        for start in range(0, flat_a.size, chunk):
            piece_a, piece_b = flat_a[start : start + chunk], flat_b[start : start + chunk]
            if piece_a.size == chunk:
                yield piece_a, piece_b
                continue
            self.pending_a.append(piece_a.copy())  # a copy: a view would pin the whole sample
            self.pending_b.append(piece_b.copy())
            self.pending += piece_a.size
            if self.pending >= chunk:
                packed_a, packed_b = np.concatenate(self.pending_a), np.concatenate(self.pending_b)
                yield packed_a[:chunk], packed_b[:chunk]
                self.pending_a, self.pending_b = [packed_a[chunk:]], [packed_b[chunk:]]
                self.pending = packed_a.size - chunk

    def _consume(self, pieces: list[Pair]) -> None:
        """Measure ``pieces`` on the workers; each thread pulls the next piece when it is free."""
        items = list(enumerate(pieces, start=self.next_index))
        self.next_index += len(items)
        if len(self.workers) == 1 or len(items) <= 1:  # which worker takes a chunk never matters
            for index, (a, b) in items:
                self.workers[0].update(index, a, b)
            return
        queue = iter(items)
        lock = threading.Lock()

        def work(worker: _Worker) -> None:
            while True:
                with lock:
                    item = next(queue, None)
                if item is None:
                    return
                worker.update(item[0], *item[1])

        pool = shared_pool(len(self.workers))
        for future in [pool.submit(work, worker) for worker in self.workers]:
            future.result()


_POOL: dict[str, tuple[int, int, ThreadPoolExecutor]] = {}  # "pool" -> (pid, threads, pool), made lazily
_POOL_LOCK = threading.Lock()


def shared_pool(threads: int) -> ThreadPoolExecutor:
    """The process's compare threads, started once (not per check: ~40 ms a check on some models).

    Created on first use, so importing starts nothing; made again after a fork (a child inherits
    no threads) or when more threads are asked for. Each piece of work pulls from a queue, so the
    pool being shared by two comparisons at once never changes a result.
    """
    with _POOL_LOCK:
        kept = _POOL.get("pool")
        if kept is None or kept[0] != os.getpid() or kept[1] < threads:
            if kept is not None and kept[0] == os.getpid():
                kept[2].shutdown(wait=False)
            kept = (os.getpid(), threads, ThreadPoolExecutor(threads, thread_name_prefix="onnxmon-compare"))
            _POOL["pool"] = kept
        return kept[2]


class _Worker:
    """One thread's scratch buffers, its order-free totals and the per-chunk float sums."""

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
        self.floors = np.full(chunk, self.floor)
        self.mask = np.empty(chunk, np.bool_)
        self.int_diff, self.int_sign = np.empty(chunk, self.int_view), np.empty(chunk, self.int_view)
        self.largest = largest
        # chunk index -> (ss_a, ss_b, ss_err, dot_ab, sum_abs), folded in chunk order by _merge
        self.sums: dict[int, tuple[float, float, float, float, float]] = {}
        self.finite_count = self.finite_mismatch = self.nonfinite_mismatch = 0
        self.nan_count = self.nan_mismatch = self.inf_count = self.inf_mismatch = 0
        self.max_abs = self.max_rel = self.max_ratio = 0.0
        self.max_ulp = 0
        self.bitwise_equal = True

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
        ss_a, ss_b = dot(a, a), dot(b, b)
        if self.exact:
            self.finite_mismatch += differ
            self.finite_count += n
        elif math.isfinite(ss_a) and math.isfinite(ss_b):
            self.finite_count += n
            self._ulp(int_a, int_b, int_diff, diff_max, diff_min)
        else:
            raw_a, raw_b, a, b = self._position_rule(raw_a, raw_b, a, b)
            ss_a, ss_b = dot(a, a), dot(b, b)
            int_a, int_b = raw_a.view(self.int_view), raw_b.view(self.int_view)
            int_diff = np.subtract(int_a, int_b, out=self.int_diff[:n])
            self._ulp(int_a, int_b, int_diff, int(int_diff.max()), int(int_diff.min()))
        ss_err, dot_ab, sum_abs = self._errors(a, b)
        self.sums[index] = (ss_a, ss_b, ss_err, dot_ab, sum_abs)

    def _errors(self, a: F64, b: F64) -> tuple[float, float, float]:
        """Fold one chunk's errors into the maxima and counts; return (ss_err, dot_ab, sum_abs)."""
        n = a.size
        err = np.subtract(a, b, out=self.err[:n])
        ss_err, dot_ab = dot(err, err), dot(a, b)
        np.abs(err, out=err)  # |d| once, reused by every metric below
        chunk_max = float(err.max())
        if chunk_max == 0.0:
            return ss_err, dot_ab, 0.0
        self.max_abs = max(self.max_abs, chunk_max)
        sum_abs = float(err.sum())
        abs_b = None
        if not self.exact and chunk_max > self.tol.atol:  # else no element can break the rule
            abs_b = np.abs(b, out=self.abs_b[:n])
            limit = np.multiply(abs_b, self.tol.rtol, out=self.limit[:n])
            limit += self.tol.atol
            self.finite_mismatch += int(np.count_nonzero(np.greater(err, limit, out=self.mask[:n])))
        if not self.exact and chunk_max / max(self.tol.atol, _TINY) > self.max_ratio:  # ratio <= max|d|/atol
            self.max_ratio = max(self.max_ratio, self._max_ratio(err, b, abs_b))
        if chunk_max / self.floor > self.max_rel:  # |d| / max(|b|, floor) <= max|d| / floor
            self.max_rel = max(self.max_rel, self._max_rel(err, b, abs_b))
        self.largest.offer(err, chunk_max, self.mask)
        return ss_err, dot_ab, sum_abs

    def _max_ratio(self, err: F64, b: F64, abs_b: F64 | None) -> float:
        """Max of ``|d| / (atol + rtol*|b|)``; a zero tolerance makes any error infinite (0/0 is 0)."""
        n = err.size
        if abs_b is None:
            abs_b = np.abs(b, out=self.abs_b[:n])
        limit = np.multiply(abs_b, self.tol.rtol, out=self.limit[:n])
        limit += self.tol.atol
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.divide(err, limit, out=limit)
        return float(np.fmax.reduce(ratio)) if n else 0.0  # fmax skips the NaN of 0/0

    def _max_rel(self, err: F64, b: F64, abs_b: F64 | None) -> float:
        """Max of ``|d| / max(|b|, floor)``, divided out only where it can beat the running max."""
        n = err.size
        # |d| <= max_rel * floor implies |d| / max(|b|, floor) <= max_rel; the 2**-50 margin keeps
        # that true after rounding, so skipping those elements never changes the maximum
        candidates = np.greater(err, self.max_rel * self.floor * (1 - 2**-50), out=self.mask[:n])
        if int(np.count_nonzero(candidates)) * 8 < n:
            index = np.flatnonzero(candidates)
            err, abs_b = err[index], np.abs(b[index])
            n = err.size
        elif abs_b is None:
            abs_b = np.abs(b, out=self.abs_b[:n])
        scale = np.maximum(abs_b, self.floors[:n], out=self.limit[:n])
        return float(np.divide(err, scale, out=scale).max()) if n else 0.0

    def _equal_chunk(self, raw: Array) -> tuple[float, float, float, float, float]:
        """Bitwise-equal chunk: errors are exactly zero; only the squares and NaN/Inf remain."""
        n = raw.size
        values = self._as_float64(raw, self.a64)
        squares = dot(values, values)
        finite = n
        if not self.exact and not math.isfinite(squares):
            nan, inf = int(np.count_nonzero(np.isnan(values))), int(np.count_nonzero(np.isinf(values)))
            self.nan_count, self.inf_count = self.nan_count + nan, self.inf_count + inf
            finite = n - nan - inf
            if nan or inf:
                kept = values[np.isfinite(values)]
                squares = dot(kept, kept)
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


def _merge(workers: list[_Worker], count: int, p99: float, *, exact: bool) -> tuple[OutputMetrics, int]:
    """Join the workers' totals; the float sums are folded in chunk order, as one thread would."""
    ss_a = ss_b = ss_err = dot_ab = sum_abs = 0.0
    for _, sums in sorted(item for worker in workers for item in worker.sums.items()):
        ss_a, ss_b, ss_err, dot_ab, sum_abs = (
            ss_a + sums[0],
            ss_b + sums[1],
            ss_err + sums[2],
            dot_ab + sums[3],
            sum_abs + sums[4],
        )
    finite = sum(w.finite_count for w in workers)
    finite_mismatch = sum(w.finite_mismatch for w in workers)
    mismatches = finite_mismatch + sum(w.nonfinite_mismatch for w in workers)
    max_abs = max(w.max_abs for w in workers)
    metrics = OutputMetrics(
        element_count=count,
        max_abs_error=max_abs,
        mean_abs_error=sum_abs / finite if finite else 0.0,
        rms_error=math.sqrt(ss_err / finite) if finite else 0.0,
        max_rel_error=max(w.max_rel for w in workers),
        p99_abs_error=p99,
        cosine_similarity=cosine(dot_ab, ss_a, ss_b),
        snr_db=snr_db(ss_b, ss_err),
        max_ulp=None if exact else max(w.max_ulp for w in workers),
        mismatch_count=mismatches,
        mismatch_ratio=mismatches / count if count else 0.0,
        nan_count=sum(w.nan_count for w in workers),
        nan_mismatch_count=sum(w.nan_mismatch for w in workers),
        inf_count=sum(w.inf_count for w in workers),
        inf_mismatch_count=sum(w.inf_mismatch for w in workers),
        bitwise_equal=all(w.bitwise_equal for w in workers),
        error_ratio=_error_ratio(workers, mismatches, finite_mismatch, exact=exact),
    )
    return metrics, finite_mismatch


def _error_ratio(workers: list[_Worker], mismatches: int, finite_mismatch: int, *, exact: bool) -> float:
    """The worst element's error over its tolerance; a NaN/Inf or integer mismatch is infinitely bad."""
    if mismatches > finite_mismatch or (exact and mismatches):
        return math.inf
    return max(w.max_ratio for w in workers)
