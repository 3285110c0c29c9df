"""The exact 99th percentile of absolute errors in one streaming pass, in bounded memory.

Each worker keeps only the errors that can still be among the top 1% (``Largest``): a
threshold that only rises rejects most of every chunk at once. ``p99`` then takes the exact
nearest-rank order statistic from the union of the workers' candidates, or says it cannot be
proven (a first-chunk guess that was too high), in which case the caller streams again
without the guess.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
GUESS_SPAN = 4  # the first guess is the (GUESS_SPAN x 1%)-from-top quantile of the first chunk


def p99_rank_from_top(count: int) -> int:
    """Position of the nearest-rank 99th percentile counted from the largest (1 = the max)."""
    return count - -(-99 * count // 100) + 1  # rank from the bottom is ceil(0.99 * count)


class Largest:
    """The ``keep`` largest positive values offered: all values above ``floor``, which only rises.

    ``floor`` starts at a guess (a low quantile of the first chunk, when ``keep`` spans many
    chunks) so the threshold test rejects most of every chunk from the start; when more than
    ``slack`` values pile up they are partitioned down to ``keep`` and ``floor`` becomes the
    smallest kept, which *proves* at least ``keep`` values are >= it. A guess is not proof:
    ``p99`` says when the guess was too high, and the stream is run again without one.
    """

    def __init__(self, keep: int, chunk: int, *, guess: bool) -> None:
        self.keep, self.slack = keep, max(2 * keep, chunk)
        self.guess = guess and keep > chunk
        self.floor, self.proven = 0.0, True  # every finite error is >= 0
        # one buffer for the whole stream: fresh arrays per prune cost more in page faults
        self.buffer, self.size = np.empty(self.slack + chunk), 0

    @property
    def values(self) -> F64:
        return self.buffer[: self.size]

    def offer(self, values: F64, values_max: float, mask: npt.NDArray[np.bool_]) -> None:
        if self.guess:
            self.guess = False
            position = max(0, values.size - GUESS_SPAN * p99_rank_from_top(values.size))
            # just below the guess, so a tie at it (a quantized output) is kept, not a reason to rerun
            self.floor = max(0.0, float(np.nextafter(np.partition(values, position)[position], 0.0)))
            self.proven = self.floor == 0.0
        if values_max <= self.floor:
            return
        above = np.greater(values, self.floor, out=mask[: values.size])
        count = int(np.count_nonzero(above))
        np.compress(above, values, out=self.buffer[self.size : self.size + count])
        self.size += count
        if self.size > self.slack:
            values = self.values
            values.partition(self.size - self.keep)  # in place; the keep largest end up last
            self.buffer[: self.keep] = values[self.size - self.keep :]  # disjoint: size > 2 * keep
            self.size = self.keep
            self.floor, self.proven = float(self.buffer[0]), True


def p99(count: int, largests: Sequence[Largest]) -> float | None:
    """Nearest-rank p99 of ``count`` finite errors from the workers' largest ones; None if unprovable.

    Every error above the highest floor ``F`` was kept by its worker. If at least ``rank`` of
    them are above ``F``, the answer is among them; otherwise it is at most ``F``, and it is
    exactly ``F`` when that floor is proven (at least ``keep >= rank`` errors are >= ``F``).
    """
    rank = p99_rank_from_top(count)
    floor = max(largest.floor for largest in largests)
    proven = any(largest.proven for largest in largests if largest.floor == floor)
    candidates = np.concatenate([largest.values for largest in largests])
    above = candidates[candidates > floor]
    if above.size >= rank:
        return float(np.partition(above, above.size - rank)[above.size - rank])
    return floor if proven else None
