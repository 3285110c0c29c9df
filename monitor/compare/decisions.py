"""What an output decides, and how many of those decisions differ from the baseline's: pure numpy.

``models[].decisions`` names, per output, the decision the model's user acts on:

=============  ===========================================  ==========================================
kind           one decision                                 a row (``DecisionStats.flips``)
=============  ===========================================  ==========================================
``argmax``     ``argmax(x, axis)``: a class per row         the index in the argmax's raveled result
``threshold``  ``x > value``: yes/no per element            the flat index of the element
``equal``      the element itself (integer, bool or text)   the flat index of the element
=============  ===========================================  ==========================================

A decision is *flipped* when the model's decision and the baseline's differ. ``DecisionCounter``
is fed one sample at a time beside the output's accumulator (``accumulate.py``), counts every
decision and every flip and keeps the first ``FIRST_FLIPS`` flipped (sample, row) pairs for the
run page. Each side is decided in its own dtype (argmax of float16 scores is exact), except that
``x > value`` compares exactly (a float ``x`` in float64: a float16 ``x`` is never compared with a
rounded ``value``; an integer ``x`` as an integer: ``2**53 + 1 > 2**53`` is yes, where float64 says
no). Some rows decide nothing: an argmax row whose maximum is a NaN or an infinity (a tie of
infinities from an overflow, where numpy would pick the first, class 0) and a NaN element under
``threshold`` are the decision "undecidable" (``NO_DECISION``), which agrees only with an
undecidable row at the same place in the baseline. Where the baseline decided, it is a flipped
decision and fails under ``tolerance.numeric: warn`` too (numpy's answer can be the baseline's: a
model that overflows or emits NaN would pass as a mere warning). An argmax over an empty axis (an
output ``[1, 0]``) has no rows: it decides nothing and counts no decision. ``tiered`` applies the
two-tier rule (MLPerf TEST01) across a check's outputs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from monitor.results import AppliedTolerance, DecisionStats, OutputStats, Reason, Verdict

FIRST_FLIPS = 100  # flipped (sample, row) pairs kept per output
KINDS = ("argmax", "threshold", "equal")

# What the two-tier rule demotes: drift of the numbers themselves. A float output that became another
# float dtype (dtype_changed), nondeterministic repeats and every check-level reason still fail.
NUMERIC_CODES = frozenset({"atol_rtol", "cosine", "snr", "topk", "nan_mismatch", "inf_mismatch", "exact_mismatch"})


class DecisionRule(Protocol):
    """One ``models[].decisions`` entry (``config.decisions.Decision`` is one)."""

    @property
    def kind(self) -> str: ...
    @property
    def axis(self) -> int: ...
    @property
    def value(self) -> float | None: ...


def misfit(rule: DecisionRule, dtype: np.dtype[np.generic], ndim: int) -> str | None:
    """Why an array of ``dtype`` and rank ``ndim`` cannot be decided by ``rule``; None when it can."""
    kind = dtype.kind
    if rule.kind == "argmax":
        if kind not in "fiu":
            return f"argmax needs numeric scores, not {dtype}"
        if not -ndim <= rule.axis < ndim:
            return f"argmax axis {rule.axis} is out of range for a rank-{ndim} output"
    elif rule.kind == "threshold":
        if kind not in "fiu":
            return f"threshold compares numbers, not {dtype}"
    elif rule.kind == "equal":
        if kind not in "iubU":
            return f"equal compares integer, bool or string labels as they are, not {dtype} (use threshold or argmax)"
    else:
        return f"unknown decision kind {rule.kind!r}; kinds are {list(KINDS)}"
    return None


NO_DECISION = -1
"""The decision of an undecidable argmax row (its max a NaN or an infinity) or a NaN element (threshold)."""


def decide(rule: DecisionRule, array: np.ndarray) -> np.ndarray:
    """The decisions of one sample's output, raveled (one per row); ``NO_DECISION`` where none can be taken.

    An argmax over an empty axis (an output ``[1, 0]``) has no rows: nothing is decided, nothing compared.
    """
    if rule.kind == "argmax":
        if array.shape[rule.axis] == 0:
            return np.empty(0, dtype=np.intp)
        chosen = np.asarray(np.argmax(array, axis=rule.axis))
        if array.dtype.kind == "f":  # NaN propagates through max: a row with a NaN is undecidable too
            chosen = np.where(np.isfinite(np.max(array, axis=rule.axis)), chosen, NO_DECISION)
        return chosen.ravel()
    if rule.kind == "threshold":
        assert rule.value is not None
        if array.dtype.kind in "iu":
            return _exceeds_integers(array, rule.value).ravel()
        # x > value exactly: a float16 x is widened, never the value rounded
        wide = array.astype(np.float64, copy=False)
        return np.where(np.isnan(wide), NO_DECISION, _exceeds_floats(wide, rule.value)).astype(np.int8).ravel()
    return array.ravel()


def _exceeds_integers(array: np.ndarray, value: float) -> np.ndarray:
    """``array > value`` for an integer ``array``, exactly: ``x > value`` is ``x > floor(value)`` (never in float64)."""
    bound = math.floor(value)
    info = np.iinfo(array.dtype)
    if bound >= info.max:
        return np.zeros(array.shape, dtype=bool)
    if bound < info.min:
        return np.ones(array.shape, dtype=bool)
    return np.asarray(array > array.dtype.type(bound))


def _exceeds_floats(wide: np.ndarray, value: float) -> np.ndarray:
    """``wide > value`` for float64 ``wide``; an integer ``value`` no float64 holds is compared exactly too."""
    rounded = float(value)
    if rounded == value:
        return np.asarray(wide > rounded)
    # value lies strictly between two float64s: x > value holds from the one above it on
    return np.asarray(wide >= rounded) if rounded > value else np.asarray(wide > rounded)


class DecisionCounter:
    """One output's decisions, fed one sample at a time; ``finish`` gives the counts."""

    def __init__(self, name: str, rule: DecisionRule, keep: int = FIRST_FLIPS) -> None:
        self.name, self.rule, self.keep = name, rule, keep
        self.total = self.flipped = 0
        self.flips: list[tuple[int, int]] = []
        self.problem: Reason | None = None

    def feed(self, index: int, actual: np.ndarray, expected: np.ndarray) -> Reason | None:
        """Count sample ``index``'s decisions (same shape on both sides); a ``config_error`` when it cannot."""
        if self.problem is not None:
            return self.problem
        for side, array in (("output", actual), ("baseline", expected)):
            why = misfit(self.rule, array.dtype, array.ndim)
            if why is not None:
                detail = f"decisions.{self.name} ({self.rule.kind}): {side} {array.dtype} {list(array.shape)}: {why}"
                self.problem = Reason("config_error", detail, output=self.name)
                return self.problem
        ours, theirs = decide(self.rule, actual), decide(self.rule, expected)
        differ = np.flatnonzero(ours != theirs)
        self.total += int(ours.size)
        self.flipped += int(differ.size)
        room = self.keep - len(self.flips)
        if room > 0:
            self.flips += [(index, int(row)) for row in differ[:room]]
        return None

    def finish(self) -> DecisionStats:
        return DecisionStats(self.rule.kind, self.total, self.flipped, tuple(self.flips))


def judge(name: str, stats: DecisionStats, tolerance: AppliedTolerance) -> Reason | None:
    """``decision_changed`` when more decisions flipped than ``max_decision_flip_ratio`` allows."""
    if stats.ratio <= tolerance.max_decision_flip_ratio:
        return None
    first = ", ".join(f"sample {s} row {r}" for s, r in stats.flips[:3])
    detail = (
        f"{stats.flipped} of {stats.total} {stats.kind} decisions differ from the baseline's"
        f" ({stats.ratio:.3g} > max {tolerance.max_decision_flip_ratio:g}); first: {first}"
    )
    return Reason("decision_changed", detail, output=name)


def tiered(outputs: Sequence[OutputStats]) -> tuple[OutputStats, ...]:
    """The two-tier rule: with ``tolerance.numeric: warn``, numeric drift that flips no decision is a warning.

    It applies to a check whose outputs decide something (some output has ``decisions``) and none of
    whose decisions changed (no ``decision_changed``): each ``warn`` output's numeric reasons move to
    ``warnings`` and, when nothing else is wrong with it, its verdict becomes ``pass``. A decision
    change anywhere leaves every reason a failure.
    """
    measured = any(o.decisions is not None for o in outputs)
    changed = any(r.code == "decision_changed" for o in outputs for r in o.reasons)
    if not measured or changed:
        return tuple(outputs)
    return tuple(_demoted(o) if o.tolerance.numeric == "warn" and o.verdict is Verdict.FAIL else o for o in outputs)


def _demoted(output: OutputStats) -> OutputStats:
    warnings = tuple(r for r in output.reasons if r.code in NUMERIC_CODES)
    if not warnings:
        return output
    reasons = tuple(r for r in output.reasons if r.code not in NUMERIC_CODES)
    verdict = Verdict.FAIL if reasons else Verdict.PASS
    return dataclasses.replace(output, verdict=verdict, reasons=reasons, warnings=(*output.warnings, *warnings))
