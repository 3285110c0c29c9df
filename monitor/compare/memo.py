"""A warm check's comparison answered from the last one when every output is bitwise the same.

A warm worker checks one model against one baseline every interval, and on a healthy stack the model
computes the same bits every time. The comparison is a pure function of what it is fed: the
baseline's arrays, the produced arrays, the tolerances and decisions, the counts. So when, sample
by sample, every compared output is bitwise equal to the last check's (same dtype, same shape,
same bytes) and the baseline's outputs are the very objects the last check compared against (a
warm worker's kept arrays, verified by stat stamp: a re-read or a promoted baseline gives new
objects), the last check's ``OutputStats`` are this check's, to the bit. Checking that costs one
``memcmp`` per output; the metric pass it replaces costs the accumulators' per-sample Python and
one chunked pass over every element (issue 29: the comparison was a third of a small model's check).

The first sample that differs (an output moved by one ULP, a baseline re-read, another count)
switches to the real comparison, with nothing lost: the samples before it, bitwise equal to the
last check's, are fed from the held arrays, then the rest as they come, so the result is the one a
comparison fed from the start gives. What is held between checks is one benchmark set's compared
outputs, within ``budget_bytes`` (over it nothing is held and the next check compares in full: a
check's memory stays bounded by one sample beyond that), and weak references to the baseline's
arrays: a record never keeps alive a baseline its owner let go (a full re-read, a promotion, arrays
read afresh because they were over the kept budget), and a dead one matches nothing. Object arrays
(strings, maps: their bytes are pointers, not values) are never matched.

``Memo`` is the slot a ``ModelSource`` keeps between its checks (``runtime/kept.py``); a fresh
check passes a new one, so it always compares in full.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.compare.accumulate import Comparison
from monitor.compare.decisions import DecisionRule
from monitor.results import AppliedTolerance, OutputStats

DEFAULT_BUDGET_BYTES = 32 * 1024 * 1024  # produced outputs held between two checks, at most
_SMALL_BYTES = 64 * 1024  # below this, two ``tobytes`` and one bytes compare beat numpy's dispatch

Arrays = tuple[np.ndarray, ...]
_ABSENT = object()  # a baseline output missing from a sample's mapping: never identical to anything


@dataclass(frozen=True)
class _Record:
    """One finished comparison: what it was fed and what it answered."""

    key: tuple[Any, ...]
    produced: tuple[Arrays, ...]  # per sample, the compared outputs in ``names`` order (read-only)
    # per sample, the baseline's arrays compared against, by identity: weak references, so a record
    # never pins a baseline its owner let go (a full re-read, a promotion, arrays over the kept budget)
    expected: tuple[tuple[weakref.ref[Any], ...], ...]
    actual_samples: int | None
    result: tuple[OutputStats, ...]


class Memo:
    """Where the last comparison is kept between two checks of one model (empty: compare in full)."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.record: _Record | None = None
        self.answered = 0  # checks answered from the record
        self.reused = False  # whether the last finished check was (its ``details.warm.comparison_reused``)


def key_of(
    expected: Sequence[str],
    produced: Sequence[str],
    tolerances: Mapping[str, AppliedTolerance],
    samples: int,
    elements: Mapping[str, int],
    decisions: Mapping[str, DecisionRule] | None,
) -> tuple[Any, ...]:
    """Everything a ``Comparison`` is built from, as one comparable value."""
    return (
        tuple(expected),
        tuple(sorted(produced)),
        tuple((name, tolerances.get(name)) for name in expected),
        samples,
        tuple((name, elements.get(name)) for name in expected),
        tuple(sorted((decisions or {}).items())),
    )


def remembered(
    expected: Sequence[str],
    produced: Sequence[str],
    tolerances: Mapping[str, AppliedTolerance],
    *,
    samples: int,
    elements: Mapping[str, int],
    decisions: Mapping[str, DecisionRule] | None,
    memo: Memo,
) -> Remembered:
    """A ``Comparison`` of these arguments, answered from ``memo`` while the check matches its record."""
    comparison = Comparison(expected, produced, tolerances, samples=samples, elements=elements, decisions=decisions)
    return Remembered(comparison, key_of(expected, produced, tolerances, samples, elements, decisions), memo)


class Remembered:
    """A ``Comparison`` fed as usual, answered from ``memo`` while every sample matches its record.

    ``comparison`` is built by the caller (so its configuration errors are raised as always) and not
    fed until a sample differs from the record; ``key`` is ``key_of`` its arguments.
    """

    def __init__(self, comparison: Comparison, key: tuple[Any, ...], memo: Memo) -> None:
        self.comparison, self.key, self.memo = comparison, key, memo
        self.names = [name for name in comparison.expected if name in comparison.accumulators]
        self.baseline_names = list(comparison.expected)
        record = memo.record
        # The record still being matched; None from the first difference on (the comparison is fed).
        self._previous = record if record is not None and record.key == key else None
        self._held: list[Arrays] | None = []  # this check's arrays from the first difference on
        self._held_bytes = 0
        self._expected: list[tuple[object, ...]] = []  # per sample fed, its baseline's arrays

    def feed(self, actual: Mapping[str, object], expected: Mapping[str, object]) -> None:
        """One sample, as ``Comparison.feed``."""
        index, previous = len(self._expected), self._previous
        arrays = self._arrays(actual)
        baseline = tuple(expected.get(name, _ABSENT) for name in self.baseline_names)
        self._expected.append(baseline)
        if previous is not None:
            if (
                arrays is not None
                and index < len(previous.produced)
                and _identical(baseline, previous.expected[index])
                and _same(arrays, previous.produced[index])
            ):
                return
            self._replay(index)  # the first difference: the samples before it are the record's
        self.comparison.feed(actual, expected)
        self._hold(arrays)

    def finish(self, actual_samples: int | None = None) -> tuple[OutputStats, ...]:
        """The stats, as ``Comparison.finish``: the record's when every sample matched it."""
        previous = self._previous
        if previous is not None:
            if len(self._expected) == len(previous.produced) and actual_samples == previous.actual_samples:
                self.memo.answered += 1
                self.memo.reused = True
                return previous.result
            self._replay(len(self._expected))  # fewer samples, or another count: compare in full
        result = self.comparison.finish(actual_samples)
        self.memo.reused = False
        held, expected = self._held, _weak(self._expected)
        if held is None or expected is None:
            self.memo.record = None
        else:
            self.memo.record = _Record(self.key, tuple(held), expected, actual_samples, result)
        return result

    def _arrays(self, actual: Mapping[str, object]) -> Arrays | None:
        """The compared outputs of one sample, or None when one cannot be matched by its bytes."""
        arrays = []
        for name in self.names:
            value = actual.get(name)
            if not isinstance(value, np.ndarray) or value.dtype.hasobject or not value.flags.c_contiguous:
                return None
            arrays.append(value)
        return tuple(arrays)

    def _replay(self, count: int) -> None:
        """Feed the first ``count`` samples from the record (this check's are bitwise the same), hold them,
        and stop matching: from here on the comparison is fed."""
        previous, self._previous = self._previous, None
        assert previous is not None
        for index in range(count):
            actual = dict(zip(self.names, previous.produced[index], strict=True))
            baseline = [ref() for ref in previous.expected[index]]  # alive: this check matched them
            self.comparison.feed(actual, dict(zip(self.baseline_names, baseline, strict=True)))
        if self._held is not None:
            self._held = list(previous.produced[:count])
            self._held_bytes = sum(a.nbytes for sample in self._held for a in sample)

    def _hold(self, arrays: Arrays | None) -> None:
        if self._held is None:
            return
        size = sum(a.nbytes for a in arrays) if arrays is not None else 0
        if arrays is None or self._held_bytes + size > self.memo.budget_bytes:
            self._held = None  # not kept: the next check compares in full
            return
        for array in arrays:
            array.flags.writeable = False  # held for the next check: nothing may change its bits
        self._held.append(arrays)
        self._held_bytes += size


def _identical(baseline: tuple[object, ...], previous: tuple[weakref.ref[Any], ...]) -> bool:
    """The same baseline objects (a warm worker's kept, read-only arrays), none of them absent."""
    return all(now is before() and now is not _ABSENT for now, before in zip(baseline, previous, strict=True))


def _weak(expected: list[tuple[object, ...]]) -> tuple[tuple[weakref.ref[Any], ...], ...] | None:
    """Weak references to a check's baseline arrays; None when one cannot have any (nothing is kept then)."""
    try:
        return tuple(tuple(weakref.ref(array) for array in sample) for sample in expected)
    except TypeError:
        return None


def _same(arrays: Arrays, previous: Arrays) -> bool:
    for now, before in zip(arrays, previous, strict=True):
        if now.dtype != before.dtype or now.shape != before.shape:
            return False
        if now.nbytes < _SMALL_BYTES:
            if now.tobytes() != before.tobytes():
                return False
        elif not np.array_equal(_words(now), _words(before)):
            return False
    return True


def _words(array: np.ndarray) -> np.ndarray:
    """A C-contiguous array's bytes as the widest unsigned integers that divide its size (a fast compare)."""
    flat = array.reshape(-1).view(np.uint8)
    for dtype in (np.uint64, np.uint32, np.uint16):
        if flat.size % np.dtype(dtype).itemsize == 0:
            return flat.view(dtype)
    return flat
