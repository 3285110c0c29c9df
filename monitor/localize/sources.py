"""The two sides of a search as tensor sources, and ``Repeated``: a side's noise floor, measured where it matters.

A search reads tensors through a ``TensorSource`` (``fetch(names)``: an ``ExposingRunner`` or
``StoredTensors``). A ``Repeated`` source runs a chunk of its side a second time when a tensor of
it differs from the other side, and keeps the per-tensor spread: the noise floor, and the
evidence of a nondeterministic side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np

from monitor.localize.rule import spread


class TensorSource(Protocol):
    @property
    def producible(self) -> frozenset[str]: ...
    @property
    def runs(self) -> int: ...
    @property
    def skipped(self) -> dict[str, str]: ...

    def fetch(self, names: Iterable[str]) -> dict[str, np.ndarray]: ...


class Repeated:
    """A source whose run-to-run spread (its noise floor, in ``noise``) is measured where it can matter.

    ``fetch`` runs the chunk once. The floor of a tensor only decides anything when the tensor
    differs from the other side (a bitwise-equal tensor is unchanged whatever the floor:
    ``rule.needs_floor``), so ``Search`` calls ``settle`` with the tensors of that chunk that
    differ, and only then is the same chunk run a second time (the same exposure, so the same
    graph) and every tensor's spread recorded. Upstream of a change, where both sides agree to
    the bit, the second run is never paid. ``noise`` therefore holds the floors of the chunks
    that needed one; a tensor missing from it never needed one. ``every_fetch`` runs every chunk
    twice at once instead (a capture, which must know that two exposed passes agree).
    """

    def __init__(self, source: TensorSource, *, every_fetch: bool = False) -> None:
        self._source = source
        self.producible = source.producible
        self.skipped = source.skipped
        self.noise: dict[str, float] = {}
        self.every_fetch = every_fetch  # a capture's faithfulness check: every chunk run twice, at once
        self._last: tuple[list[str], dict[str, np.ndarray]] | None = None  # the fetch to settle

    @property
    def runs(self) -> int:
        return self._source.runs

    @property
    def observer_mismatch(self) -> str | None:
        return getattr(self._source, "observer_mismatch", None)

    def fetch(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = list(names)
        first = self._source.fetch(wanted)
        if self.every_fetch:
            self._record(first, self._source.fetch(wanted))
        else:
            self._last = (wanted, first)
        return first

    def settle(self, differing: Iterable[str]) -> None:
        """Measure the last fetch's floors when a tensor in ``differing`` (it differs from the other
        side) has none yet; then forget that fetch (its arrays are not kept past its chunk)."""
        last, self._last = self._last, None
        if last is None:
            return
        wanted, first = last
        if any(name in first and name not in self.noise for name in differing):
            self._record(first, self._source.fetch(wanted))

    def _record(self, first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray]) -> None:
        for name, value in first.items():
            if name in second:
                self.noise[name] = spread(value, second[name])


def settle(source: TensorSource, differing: Iterable[str]) -> None:
    """``source.settle(differing)`` for a source that measures floors (``Repeated``); else nothing."""
    settle_floor = getattr(source, "settle", None)
    if settle_floor is not None:
        settle_floor(list(differing))
