"""The chunked accumulator behind ``monitor.compare``: every float/int metric in one pass, fed per sample.

``compare.py`` owns the tolerance rule and the metric definitions; this module only computes
them, with memory bounded by the chunk size plus the p99 candidates (up to 2% of the elements,
in float64). The flattened samples are cut into chunks of ``chunk`` elements (small samples are
packed together), each measured in turn by one ``chunk.Worker`` (about twenty numpy passes and
forty Python calls per chunk, in its own float64 scratch buffers); the floating-point sums are
kept per chunk and folded in chunk order at the end (``formulas.py``).

One thread: a second one does not pay (each numpy call over a chunk hands the GIL over, and the
other core is the monitored model's; ``bench/bench_compare.py`` measures the pass), so there is no
thread pool to keep.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt

from monitor.compare import p99
from monitor.compare.chunk import Worker
from monitor.compare.formulas import cosine, snr_db
from monitor.compare.p99 import Largest, p99_rank_from_top
from monitor.results import AppliedTolerance, OutputMetrics

# 64k elements keep the float64 buffers near a core's 2 MiB L2, with few Python calls per
# element. The sums are folded per chunk (formulas.py), so another size changes their low bits.
DEFAULT_CHUNK_ELEMENTS = 1 << 16

Array = npt.NDArray[np.generic]
Pair = tuple[Array, Array]


class ChunkStream:
    """The chunked pass over one output, fed one sample's (actual, baseline) pair at a time.

    ``elements`` bounds the elements that will be fed (the baseline's sizes summed over its
    samples): it fixes the chunk size and the p99 candidates kept (1% of it), so the result is
    the same for any split of the same data into samples. Chunk indices run on across samples,
    and small samples are packed together across feeds. Memory: the worker's buffers plus,
    between feeds, at most one chunk of pending elements (copied, so a sample is never kept alive
    after its feed).
    """

    def __init__(
        self,
        dtype: np.dtype[np.generic],
        tol: AppliedTolerance,
        chunk: int,
        *,
        exact: bool,
        elements: int,
        ulp_dtype: np.dtype[np.generic] | None = None,
    ) -> None:
        self.exact, self.elements, self.count = exact, elements, 0
        self.chunk = chunk = min(chunk, max(elements, 1))
        keep = p99_rank_from_top(elements)
        self.worker = Worker(dtype, tol, chunk, Largest(keep, chunk), exact=exact, ulp_dtype=ulp_dtype)
        self.next_index = 0
        self.pending_a: list[Array] = []
        self.pending_b: list[Array] = []
        self.pending = 0

    def feed(self, actual: Array, expected: Array) -> None:
        """Measure one sample's pair (same dtype and shape; contiguous or not)."""
        self.count += actual.size
        if self.count > self.elements:
            raise ValueError(f"{self.count} elements fed, more than the {self.elements} announced")
        if self.pending + actual.size < self.chunk:  # a small sample: batched with the next ones, measured later
            self.pending_a.append(actual.reshape(-1).copy())  # a copy: a view would pin the whole sample
            self.pending_b.append(expected.reshape(-1).copy())
            self.pending += actual.size
            return
        self._consume(self._pieces(actual.reshape(-1), expected.reshape(-1)))

    def finish(self) -> tuple[OutputMetrics, int]:
        """The metrics over everything fed, and the count of finite elements breaking the element rule."""
        if self.pending:
            self._consume([(np.concatenate(self.pending_a), np.concatenate(self.pending_b))])
            self.pending_a, self.pending_b, self.pending = [], [], 0
        worker = self.worker
        return _merge(worker, self.count, p99.p99(worker.finite_count, [worker.largest]), exact=self.exact)

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

    def _consume(self, pieces: Iterable[Pair]) -> None:
        """Measure ``pieces`` in order, numbering each chunk for the sums' fold."""
        for a, b in pieces:
            self.worker.update(self.next_index, a, b)
            self.next_index += 1


def _merge(worker: Worker, count: int, p99: float, *, exact: bool) -> tuple[OutputMetrics, int]:
    """The worker's totals as metrics; the float sums are folded in chunk order."""
    ss_a = ss_b = ss_err = dot_ab = sum_abs = 0.0
    for _, sums in sorted(worker.sums.items()):
        ss_a, ss_b, ss_err, dot_ab, sum_abs = (
            ss_a + sums[0],
            ss_b + sums[1],
            ss_err + sums[2],
            dot_ab + sums[3],
            sum_abs + sums[4],
        )
    finite, finite_mismatch = worker.finite_count, worker.finite_mismatch
    mismatches = finite_mismatch + worker.nonfinite_mismatch
    metrics = OutputMetrics(
        element_count=count,
        max_abs_error=worker.max_abs,
        mean_abs_error=sum_abs / finite if finite else 0.0,
        rms_error=math.sqrt(ss_err / finite) if finite else 0.0,
        max_rel_error=worker.max_rel,
        p99_abs_error=p99,
        cosine_similarity=cosine(dot_ab, ss_a, ss_b),
        snr_db=snr_db(ss_b, ss_err),
        max_ulp=None if exact else worker.max_ulp,
        mismatch_count=mismatches,
        mismatch_ratio=mismatches / count if count else 0.0,
        nan_count=worker.nan_count,
        nan_mismatch_count=worker.nan_mismatch,
        inf_count=worker.inf_count,
        inf_mismatch_count=worker.inf_mismatch,
        bitwise_equal=worker.bitwise_equal,
        error_ratio=_error_ratio(worker, mismatches, finite_mismatch, exact=exact),
    )
    return metrics, finite_mismatch


def _error_ratio(worker: Worker, mismatches: int, finite_mismatch: int, *, exact: bool) -> float:
    """The worst element's error over its tolerance; a NaN/Inf or integer mismatch is infinitely bad."""
    if mismatches > finite_mismatch or (exact and mismatches):
        return math.inf
    return worker.max_ratio
