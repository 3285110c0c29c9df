"""The exact 99th percentile of absolute errors in one streaming pass, in bounded memory.

The pass keeps only the errors that can still be among the top 1% (``Largest``): a threshold
that only rises rejects most of every chunk at once. ``p99`` then takes the exact nearest-rank
order statistic from the candidates (of one ``Largest`` or the union of several).

Why there is no guessed threshold: a check feeds the comparison one sample at a time and drops
each sample after its feed, so the stream cannot be run a second time. The threshold therefore
starts at 0 and rises only to values it has proven (``keep`` errors at least as large have been
seen), which makes the answer exact in a single pass. The price is the first ~2% of the
elements, which are all copied as candidates before the first prune (``bench/bench_compare.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


def p99_rank_from_top(count: int) -> int:
    """Position of the nearest-rank 99th percentile counted from the largest (1 = the max)."""
    return count - -(-99 * count // 100) + 1  # rank from the bottom is ceil(0.99 * count)


class Largest:
    """The ``keep`` largest positive values offered: all values above ``floor``, which only rises.

    When more than ``slack`` values pile up they are partitioned down to ``keep`` and ``floor``
    becomes the smallest kept, which *proves* at least ``keep`` values are >= it. ``keep`` must be
    at least the rank ``p99`` will ask for: it is taken from an upper bound of the element count.
    """

    def __init__(self, keep: int, chunk: int) -> None:
        self.keep, self.slack = keep, max(2 * keep, chunk)
        self.floor = 0.0  # every finite error is >= 0
        # one buffer for the whole stream: fresh arrays per prune cost more in page faults
        self.buffer, self.size = np.empty(self.slack + chunk), 0

    @property
    def values(self) -> F64:
        return self.buffer[: self.size]

    def offer(self, values: F64, values_max: float, mask: npt.NDArray[np.bool_]) -> int:
        """Keep the ``values`` above ``floor``; how many there were."""
        if values_max <= self.floor:
            return 0
        above = np.greater(values, self.floor, out=mask[: values.size])
        count = int(np.count_nonzero(above))
        np.compress(above, values, out=self.buffer[self.size : self.size + count])
        self.accept(count)
        return count

    def offer_few(self, above: F64) -> None:
        """Take ``above``: the offered values above ``floor``, already picked, in their order."""
        self.buffer[self.size : self.size + above.size] = above
        self.accept(above.size)

    def accept(self, count: int) -> None:
        """Take the ``count`` values ``offer`` just wrote after ``values``."""
        self.size += count
        if self.size > self.slack:
            values = self.values
            values.partition(self.size - self.keep)  # in place; the keep largest end up last
            self.buffer[: self.keep] = values[self.size - self.keep :]  # disjoint: size > 2 * keep
            self.size = self.keep
            self.floor = float(self.buffer[0])


def p99(count: int, largests: Sequence[Largest]) -> float:
    """Nearest-rank p99 of ``count`` finite errors from the workers' largest ones.

    Every error above the highest floor ``F`` was kept by its worker. If at least ``rank`` of
    them are above ``F``, the answer is among them; otherwise it is exactly ``F``: that worker
    has seen at least ``keep >= rank`` errors >= ``F`` (or ``F`` is 0, the least error there is).
    """
    rank = p99_rank_from_top(count)
    if any(rank > largest.keep for largest in largests):
        raise ValueError(f"p99 of {count} errors needs {rank} candidates, the workers kept {largests[0].keep}")
    floor = max(largest.floor for largest in largests)
    candidates = np.concatenate([largest.values for largest in largests])
    above = candidates[candidates > floor]
    if above.size >= rank:
        return float(np.partition(above, above.size - rank)[above.size - rank])
    return floor
