"""One localization's options, frozen and validated once: what ``onnxmon localize`` asks for.

The options of a localization (which sample, against what, which search, which graph, which
rule, how many tensors per run, the budget) travel together, validated in one place with one
wording. A ``LocalizeRequest`` is built once, where the options come from (the CLI, the
daemon's ``localize_on_fail``, a diagnosis, a library caller), refuses a bad value at
construction with a ``RequestError`` naming the field, and is passed unchanged down to
``configured.localize_model``, ``engine.localize`` and ``selfruns.localize_self``. It is frozen
and pickles, so it crosses the process boundary to the isolated child as ``CheckPlan`` does.

What a request does not hold is what the model's configuration or baseline says (providers,
session options, tolerance, stored intermediates, whether the stack is the baseline's): those are
resolved by ``configured.py`` from the ``CheckPlan``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from monitor.errors import MonitorError
from monitor.localize.levels import LEVELS, View
from monitor.localize.rule import ThresholdRule

__all__ = ["Against", "LocalizeRequest", "Mode", "RequestError"]

Against = Literal["auto", "baseline", "unoptimized", "reference", "model", "self"]
Mode = Literal["auto", "all", "bisect"]
AGAINST: tuple[Against, ...] = ("auto", "baseline", "unoptimized", "reference", "model", "self")
MODES: tuple[Mode, ...] = ("auto", "all", "bisect")
VIEWS: tuple[View, ...] = ("auto", "model", "optimized")
RULES: tuple[ThresholdRule, ...] = ("tolerance", "std")
MAX_RUNS = 100


class RequestError(MonitorError):
    """A localization option out of its range; ``field`` names it (the CLI maps it to its flag)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"localize: {field} {message}")
        self.field = field


@dataclass(frozen=True)
class LocalizeRequest:
    """Which sample, against what, how: validated at construction; ``replace`` validates again.

    ``against="auto"`` with a ``reference_model`` is ``model``; ``reference_model`` goes with
    ``model`` only. ``runs`` is the number of identical runs of ``against="self"``.
    ``time_budget_s`` stops the search when exceeded (the report then says ``complete=False``).
    """

    sample: int = 0
    against: Against = "auto"
    reference_model: Path | None = None
    mode: Mode = "auto"
    graph_level: str | None = None
    graph_view: View = "auto"
    threshold_rule: ThresholdRule = "tolerance"
    chunk_size: int = 64
    rel_threshold: float = 0.01
    abs_floor: float = 1e-6
    time_budget_s: float | None = None
    runs: int = 3

    def __post_init__(self) -> None:
        _one_of("against", self.against, AGAINST)
        _one_of("mode", self.mode, MODES)
        _one_of("graph_view", self.graph_view, VIEWS)
        _one_of("threshold_rule", self.threshold_rule, RULES)
        if self.graph_level is not None:
            _one_of("graph_level", self.graph_level, LEVELS)
        _integer("sample", self.sample, 0, None)
        _integer("chunk_size", self.chunk_size, 1, None)
        _integer("runs", self.runs, 2, MAX_RUNS)
        if not _finite(self.rel_threshold) or not self.rel_threshold > 0:
            raise RequestError("rel_threshold", f"must be > 0, got {self.rel_threshold!r}")
        if not _finite(self.abs_floor) or not self.abs_floor >= 0:
            raise RequestError("abs_floor", f"must be >= 0, got {self.abs_floor!r}")
        if self.time_budget_s is not None and (not _finite(self.time_budget_s) or not self.time_budget_s >= 0):
            raise RequestError("time_budget_s", f"must be >= 0 seconds (or None), got {self.time_budget_s!r}")
        if self.reference_model is not None:
            if not isinstance(self.reference_model, Path):
                object.__setattr__(self, "reference_model", Path(self.reference_model))
            if self.against == "auto":
                object.__setattr__(self, "against", "model")
            elif self.against != "model":
                raise RequestError(
                    "reference_model", f"goes with against='model' (and only with it), not against={self.against!r}"
                )
        elif self.against == "model":
            raise RequestError("reference_model", "is needed with against='model': the reference model file")

    def resolved(self, against: Against) -> LocalizeRequest:
        """This request against a side chosen by the caller (``configured.py`` resolving ``auto``)."""
        return replace(self, against=against, reference_model=self.reference_model if against == "model" else None)


def _one_of(field: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise RequestError(field, f"must be {', '.join(repr(a) for a in allowed)}; got {value!r}")


def _integer(field: str, value: object, low: int, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(field, f"must be a whole number, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"{low}..{high}"
        raise RequestError(field, f"must be {bound}, got {value}")


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
