"""What an experiment measured, on scales that stay finite under any tolerance, and what a revert changes.

The check's figure, error ÷ tolerance, is infinite for every differing element under a bitwise
tolerance (``atol: 0, rtol: 0``): "inf → inf" says nothing about whether a knob moved the numbers.
A ``Measure`` is how far one setup's outputs are from the baseline's on the replayed samples,
worst over the outputs: the largest absolute error (finite positions), the largest ULP distance,
the share of elements outside the tolerance, and the NaN/Inf positions that differ. ``effect``
compares an experiment's measure with the current setup's on the same samples:

* ``restores``: the check's own rule finds every output within tolerance again;
* ``reduces``: no scale got worse, and the largest error or the share of elements off fell at
  least tenfold (or the NaN/Inf positions that differed all agree again);
* ``none``: anything else (the numbers moved, not towards the baseline by that much).

A ``ProductionChange`` is what a fix would set in production's config (field → now, then), and
whether that is how the baseline was captured. Plain data: the pages and the metrics read it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

RESTORES = "restores"
REDUCES = "reduces"
NO_EFFECT = "none"
TENFOLD = 10.0


@dataclass(frozen=True)
class Measure:
    """One setup's distance from the baseline on the replayed samples (worst over the outputs)."""

    max_abs_error: float
    max_ulp: int | None = None  # None: no float output
    mismatch_share: float = 0.0  # elements outside the tolerance ÷ elements, of the worst output (0..1)
    position_mismatches: int = 0  # NaN/Inf positions that differ from the baseline's

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_abs_error": self.max_abs_error,
            "max_ulp": self.max_ulp,
            "mismatch_share": self.mismatch_share,
            "position_mismatches": self.position_mismatches,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Measure | None:
        """A stored measure; None for anything else (a document of an older onnxmon has none)."""
        if not isinstance(data, Mapping) or not _finite(data.get("max_abs_error")):
            return None
        ulp = data.get("max_ulp")
        return cls(
            float(data["max_abs_error"]),
            int(ulp) if isinstance(ulp, int | float) and not isinstance(ulp, bool) and math.isfinite(ulp) else None,
            float(data["mismatch_share"]) if _finite(data.get("mismatch_share")) else 0.0,
            int(data.get("position_mismatches") or 0),
        )

    def describe(self) -> str:
        """``max |error| 2.38e-06, 4 ULP, 72.9 % of elements off``."""
        parts = [f"max |error| {_num(self.max_abs_error)}"]
        if self.max_ulp is not None:
            parts.append(f"{self.max_ulp} ULP")
        parts.append(f"{_share(self.mismatch_share)} of elements off")
        if self.position_mismatches:
            parts.append(f"{self.position_mismatches} NaN/Inf positions differ")
        return ", ".join(parts)


def of_outputs(stats: Any) -> Measure | None:
    """The measure of a comparison (``compare.outputs`` stats); None when an output could not be measured."""
    stats = list(stats)
    if not stats or not all(s.is_measured for s in stats):
        return None
    ulps = [s.metrics.max_ulp for s in stats if s.metrics.max_ulp is not None]
    errors = [s.metrics.max_abs_error for s in stats if math.isfinite(s.metrics.max_abs_error)]
    return Measure(
        max(errors, default=0.0),
        max(ulps) if ulps else None,
        max(float(s.metrics.mismatch_ratio) for s in stats),
        sum(s.metrics.nan_mismatch_count + s.metrics.inf_mismatch_count for s in stats),
    )


def effect(before: Measure | None, after: Measure | None, within: bool | None) -> str | None:
    """``restores``, ``reduces`` or ``none`` (module docstring); None when either side was not measured."""
    if before is None or after is None or within is None:
        return None
    if within:
        return RESTORES
    pairs = (
        (before.max_abs_error, after.max_abs_error),
        (before.mismatch_share, after.mismatch_share),
        (float(before.position_mismatches), float(after.position_mismatches)),
    )
    if any(now > was for was, now in pairs):
        return NO_EFFECT
    cut = any(was > 0 and now <= was / TENFOLD for was, now in pairs[:2])
    cleared = before.position_mismatches > 0 and after.position_mismatches == 0
    return REDUCES if cut or cleared else NO_EFFECT


@dataclass(frozen=True)
class Effect:
    """What one knob's revert did to the failing samples: the measure before and after."""

    knob: str
    value: str
    kind: str  # RESTORES or REDUCES
    before: Measure
    after: Measure

    def describe(self) -> str:
        """``threads=1 restores the baseline: max |error| 3.1e-06 → 0, 12 → 0 ULP, 64 % → 0 % of elements off``."""
        what = "restores the baseline" if self.kind == RESTORES else "reduces the drift, not within tolerance"
        return f"{self.knob}={self.value} {what}: {compare(self.before, self.after)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "knob": self.knob,
            "value": self.value,
            "kind": self.kind,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Effect | None:
        if not isinstance(data, Mapping):
            return None
        before, after = Measure.from_dict(data.get("before")), Measure.from_dict(data.get("after"))
        if before is None or after is None:
            return None
        kind = RESTORES if data.get("kind") == RESTORES else REDUCES
        return cls(str(data.get("knob", "")), str(data.get("value", "")), kind, before, after)


def compare(before: Measure, after: Measure) -> str:
    """``max |error| 2.4e-06 → 0, 4 → 0 ULP, 72.9 % → 0 % of elements off``: every scale, before → after."""
    parts = [f"max |error| {_num(before.max_abs_error)} → {_num(after.max_abs_error)}"]
    if before.max_ulp is not None and after.max_ulp is not None:
        parts.append(f"{before.max_ulp} → {after.max_ulp} ULP")
    parts.append(f"{_share(before.mismatch_share)} → {_share(after.mismatch_share)} of elements off")
    if before.position_mismatches or after.position_mismatches:
        parts.append(f"NaN/Inf positions differing {before.position_mismatches} → {after.position_mismatches}")
    return ", ".join(parts)


@dataclass(frozen=True)
class ProductionChange:
    """What a fix sets in production's config: field → (production now, the fix), and whether the baseline had it."""

    changes: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    baseline_had_it: bool | None = None  # None: the baseline recorded no settings to compare with

    def describe(self) -> str:
        """``changes production: session.execution_mode sequential → parallel, not the baseline's setting``."""
        moved = ", ".join(f"{name} {old} → {new}" for name, old, new in self.rows())
        whose = {True: ", back to the baseline's setting", False: ", not the baseline's setting", None: ""}
        return f"changes production: {moved}{whose[self.baseline_had_it]}"

    def rows(self) -> list[tuple[str, str, str]]:
        return [(name, old, new) for name, (old, new) in self.changes.items()]

    def to_dict(self) -> dict[str, Any]:
        changes = {k: [old, new] for k, (old, new) in self.changes.items()}
        return {"changes": changes, "baseline_had_it": self.baseline_had_it}

    @classmethod
    def from_dict(cls, data: Any) -> ProductionChange | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("changes"), Mapping):
            return None
        changes = {
            str(k): (str(v[0]), str(v[1]))
            for k, v in data["changes"].items()
            if isinstance(v, list | tuple) and len(v) == 2
        }
        had = data.get("baseline_had_it")
        return cls(changes, had if isinstance(had, bool) else None)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _num(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def _share(value: float) -> str:
    """A measured share as a percentage: ``72.9 %``; ``0 %`` only when none, ``<0.1 %`` when some."""
    if value == 0:
        return "0 %"
    return "<0.1 %" if value < 0.001 else f"{100 * value:.3g} %"
