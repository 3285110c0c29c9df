"""How one intermediate tensor moved: changed or not, inside the check's tolerance or not.

Two questions are asked of every tensor both sides produce, each its own answer in the report:

* **changed**: does the subject's value differ from the reference's? With ``noise == 0`` (the
  stack and session settings match the reference's, so replays are bitwise reproducible) any
  difference in the bits counts; with a noise floor (measured by repeating a side) the largest
  absolute difference must exceed it. NaN on both sides at the same position is agreement, and so
  is an infinity of the same sign.
* **out of tolerance**, by one of two rules:

  - ``tolerance`` (the default): the model's own check tolerance applied to the tensor, through
    ``monitor.compare.outputs.compare_output`` (atol/rtol per element, cosine and SNR when
    configured; top-k is dropped, it means nothing for an intermediate);
  - ``std``: the older rule, ``max |diff| > rel_threshold * max(std(reference), abs_floor /
    rel_threshold)``.

A changed shape or dtype is both changed and out of tolerance (it is a divergence at that node,
not something to skip), except that ``cast_floats`` compares float values across float dtypes in
float64, as the check compares an fp16 output with an fp32 baseline (localization sets it on every
side: an fp16 build against fp32 intermediates, a PyTorch reference, or its fp32 model file). Integer and bool
tensors are compared exactly by the tolerance rule and by value by the std rule; 0-d tensors are
ordinary tensors. ``rel_error`` (the difference over the reference's spread) is reported by both
rules, for ranking and the plot.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from monitor.compare.outputs import compare_output
from monitor.results import AppliedTolerance

ThresholdRule = Literal["tolerance", "std"]
DEFAULT_TOLERANCE = AppliedTolerance(atol=1e-5, rtol=1e-4)


@dataclass(frozen=True)
class TensorError:
    """How far one tensor moved and what each rule says about it."""

    max_abs_error: float
    rel_error: float
    threshold: float  # the std rule's threshold (reported by both rules, drawn in the plot)
    changed: bool
    out_of_tolerance: bool
    reasons: tuple[str, ...] = ()

    @property
    def diverged(self) -> bool:
        """The older name of ``out_of_tolerance``."""
        return self.out_of_tolerance


@dataclass(frozen=True)
class Rule:
    """The comparison that applies to one localization (chosen once, stated in the report)."""

    threshold_rule: ThresholdRule = "tolerance"
    tolerance: AppliedTolerance = DEFAULT_TOLERANCE
    rel_threshold: float = 0.01
    abs_floor: float = 1e-6
    cast_floats: bool = False

    def __post_init__(self) -> None:
        # Top-k agreement is a classifier's figure; an intermediate has no meaningful last axis.
        object.__setattr__(self, "tolerance", dataclasses.replace(self.tolerance, topk_k=None, topk_min_agreement=None))

    def measure(self, name: str, actual: np.ndarray, reference: np.ndarray, noise: float = 0.0) -> TensorError:
        """Judge ``actual`` against ``reference``; ``noise`` is the floor for *changed* (0: bitwise)."""
        got, want = np.asarray(actual), np.asarray(reference)
        if self.cast_floats and got.dtype.kind == "f" and want.dtype.kind == "f" and got.dtype != want.dtype:
            got, want = got.astype(np.float64), want.astype(np.float64)
        if got.shape != want.shape or got.dtype != want.dtype:
            why = f"{got.dtype}{list(got.shape)} vs reference {want.dtype}{list(want.shape)}"
            return TensorError(math.inf, math.inf, 0.0, True, True, (f"shape/dtype changed: {why}",))
        if _bitwise_equal(got, want):  # the common case upstream of a change: one pass, no float64 copies
            scale = _floored_std(want, self.rel_threshold, self.abs_floor)
            return TensorError(0.0, 0.0, self.rel_threshold * scale, False, False)
        max_abs, scale = _max_abs_and_scale(got, want, self.rel_threshold, self.abs_floor)
        threshold = self.rel_threshold * scale
        changed = max_abs > noise if noise > 0 else True
        if self.threshold_rule == "std":
            out = max_abs > threshold
            reasons: tuple[str, ...] = (f"max |diff| {max_abs:.3g} > {threshold:.3g}",) if out else ()
        elif not changed:
            out, reasons = False, ()
        elif self._element_rule_only and got.dtype.kind == "f" and math.isfinite(max_abs):
            out = _breaks_element_rule(got, want, self.tolerance)
            reasons = ("atol_rtol",) if out else ()
        else:
            stats = compare_output(name, [got], [want], self.tolerance)
            out = not stats
            reasons = tuple(r.code for r in stats.reasons)
        return TensorError(max_abs, max_abs / scale, threshold, changed, out, reasons)

    @property
    def _element_rule_only(self) -> bool:
        """The tolerance is the element rule alone (no cosine, SNR or mismatch allowance): then a
        finite float tensor fails exactly when one element breaks it, which one pass decides, without
        the full metric suite (``compare_output`` gives the same verdict and reason;
        ``tests/test_localize.py`` checks it)."""
        t = self.tolerance
        return t.cosine_min is None and t.snr_min_db is None and t.max_mismatch_ratio == 0

    def describe(self) -> str:
        """One line saying which out-of-tolerance rule applied."""
        if self.threshold_rule == "std":
            return f"max |diff| > {self.rel_threshold:g} x std of the reference (floor {self.abs_floor:g})"
        t = self.tolerance
        extra = "".join(
            f", {label} {value:g}"
            for label, value in (("cosine >=", t.cosine_min), ("SNR dB >=", t.snr_min_db))
            if value is not None
        )
        return f"the check's tolerance per tensor: |a-b| <= {t.atol:g} + {t.rtol:g}*|b|{extra}"


def needs_floor(rule: Rule, actual: np.ndarray, reference: np.ndarray) -> bool:
    """Whether ``rule.measure`` of this pair could depend on a noise floor: only when the two differ.

    A shape or dtype change, and a bitwise-equal pair, are judged the same whatever the floor (see
    ``Rule.measure``); the same float cast applies first.
    """
    got, want = np.asarray(actual), np.asarray(reference)
    if rule.cast_floats and got.dtype.kind == "f" and want.dtype.kind == "f" and got.dtype != want.dtype:
        got, want = got.astype(np.float64), want.astype(np.float64)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    return not _bitwise_equal(got, want)


def tensor_error(
    actual: np.ndarray, reference: np.ndarray, *, rel_threshold: float, abs_floor: float
) -> TensorError | None:
    """The std rule alone (kept for callers of the older API); ``None`` when shapes differ."""
    if np.shape(actual) != np.shape(reference):
        return None
    rule = Rule(threshold_rule="std", rel_threshold=rel_threshold, abs_floor=abs_floor, cast_floats=True)
    return rule.measure("tensor", np.asarray(actual), np.asarray(reference).astype(np.asarray(actual).dtype))


def spread(first: np.ndarray, second: np.ndarray) -> float:
    """Max |first - second| between two runs of one side (position rule for NaN/Inf); inf on a layout change."""
    a, b = np.asarray(first), np.asarray(second)
    if a.shape != b.shape or a.dtype != b.dtype:
        return math.inf
    if _bitwise_equal(a, b):
        return 0.0
    if a.dtype.kind not in "fiub":
        return math.inf
    return _max_abs_and_scale(a, b, 1.0, 0.0)[0]


def _max_abs_and_scale(
    got: np.ndarray, want: np.ndarray, rel_threshold: float, abs_floor: float
) -> tuple[float, float]:
    """(max |got - want| in float64 under the position rule, the reference's floored std)."""
    if want.dtype.kind not in "fiub":  # strings and objects: equal or not
        same = bool(np.array_equal(got, want))
        return (0.0 if same else math.inf), max(abs_floor / rel_threshold, 1e-300)
    g = np.asarray(got, dtype=np.float64).reshape(-1)  # reshape(-1): 0-d tensors become one element
    w = np.asarray(want, dtype=np.float64).reshape(-1)
    scale = _floored_std(w, rel_threshold, abs_floor)
    if g.size == 0:
        return 0.0, scale
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(g - w)
    largest = float(diff.max())
    if math.isfinite(largest):  # max propagates NaN and inf: no NaN or infinity on either side
        return largest, scale
    agree = (np.isnan(g) & np.isnan(w)) | (np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w)))
    diff[agree] = 0.0
    diff[np.isnan(diff)] = np.inf  # NaN on one side only
    return float(diff.max()), scale


def _breaks_element_rule(got: np.ndarray, want: np.ndarray, tolerance: AppliedTolerance) -> bool:
    """Any element with ``|a-b| > atol + rtol*|b|`` (float64; both sides finite, checked by the caller)."""
    g = np.asarray(got, dtype=np.float64).reshape(-1)
    w = np.asarray(want, dtype=np.float64).reshape(-1)
    return bool(np.any(np.abs(g - w) > tolerance.atol + tolerance.rtol * np.abs(w)))


def _floored_std(want: np.ndarray, rel_threshold: float, abs_floor: float) -> float:
    """The reference's standard deviation over its finite values (float64), floored at ``abs_floor / rel_threshold``."""
    floor = max(abs_floor / rel_threshold, 1e-300)
    if want.dtype.kind not in "fiub" or want.size == 0:
        return floor
    w = want.reshape(-1)
    if w.dtype.kind == "f":
        finite = np.isfinite(w)
        if not finite.all():
            w = w[finite]
    std = float(np.std(w, dtype=np.float64)) if w.size else 0.0
    return max(std, floor)


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fcV":
        return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    return bool(np.array_equal(a, b))
