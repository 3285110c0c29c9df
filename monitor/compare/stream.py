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

Each chunk is measured by a ``chunk.Worker`` (about twenty numpy passes and forty Python calls per
chunk); ``bench/bench_compare.py`` measures the whole comparison against one copy of both tensors.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from monitor.compare import p99
from monitor.compare.chunk import Worker
from monitor.compare.formulas import cosine, snr_db
from monitor.compare.p99 import Largest, p99_rank_from_top
from monitor.results import AppliedTolerance, OutputMetrics

# 64k elements keep each worker's float64 buffers near its 2 MiB L2, with few Python calls per
# element. The sums are folded per chunk (formulas.py), so another size changes their low bits.
DEFAULT_CHUNK_ELEMENTS = 1 << 16
# Two threads: numpy releases the GIL inside each pass, so two workers cut the wall time (1.2-1.9x
# on a lightly loaded two-core machine); more would take cores from the model being monitored.
DEFAULT_WORKERS = min(2, os.cpu_count() or 1)

Array = npt.NDArray[np.generic]
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
            Worker(dtype, tol, chunk, Largest(keep, chunk), exact=exact, ulp_dtype=ulp_dtype) for _ in range(threads)
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
        if self.pending + actual.size < self.chunk:  # a small sample: batched with the next ones, measured later
            self.pending_a.append(actual.reshape(-1).copy())  # a copy: a view would pin the whole sample
            self.pending_b.append(expected.reshape(-1).copy())
            self.pending += actual.size
            return
        self._consume(list(self._pieces(actual.reshape(-1), expected.reshape(-1))))

    def finish(self) -> tuple[OutputMetrics, int]:
        """The metrics over everything fed, and the count of finite elements breaking the element rule."""
        if self.pending:
            self._consume([(np.concatenate(self.pending_a), np.concatenate(self.pending_b))])
            self.pending_a, self.pending_b, self.pending = [], [], 0
        p99_value = p99.p99(sum(w.finite_count for w in self.workers), [w.largest for w in self.workers])
        return _merge(self.workers, self.count, p99_value, exact=self.exact)

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

        def work(worker: Worker) -> None:
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


def _merge(workers: list[Worker], count: int, p99: float, *, exact: bool) -> tuple[OutputMetrics, int]:
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


def _error_ratio(workers: list[Worker], mismatches: int, finite_mismatch: int, *, exact: bool) -> float:
    """The worst element's error over its tolerance; a NaN/Inf or integer mismatch is infinitely bad."""
    if mismatches > finite_mismatch or (exact and mismatches):
        return math.inf
    return max(w.max_ratio for w in workers)
