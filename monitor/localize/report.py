"""What localization found: per-node divergence, the report value, and the divergence rule.

The rule, written once (``tensor_error``): compare in float64. ``scale`` is the standard
deviation of the reference tensor's finite values, floored at ``abs_floor / rel_threshold``
so a near-constant tensor cannot make every tiny difference look huge. Then

    threshold = rel_threshold * scale        (= max(rel_threshold * std, abs_floor))
    rel_error = max_abs_error / scale
    diverged  = max_abs_error > threshold    (equivalently rel_error > rel_threshold)

NaN on both sides at the same position is agreement, and so is an infinity of the same sign;
any other non-finite mismatch is an infinite error. A node's error is the worst of its outputs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from monitor import jsonsafe

Against = Literal["reference", "baseline"]
SearchMode = Literal["all", "bisect"]
Path_ = Literal["direct", "fusion_faithful"]
TOP_COUNT = 10


@dataclass(frozen=True)
class TensorError:
    """How far one tensor moved, against the threshold derived from its reference."""

    max_abs_error: float
    rel_error: float
    threshold: float
    diverged: bool


def tensor_error(
    actual: np.ndarray, reference: np.ndarray, *, rel_threshold: float, abs_floor: float
) -> TensorError | None:
    """The divergence rule above; ``None`` when the shapes differ (a layout change is not comparable)."""
    if np.shape(actual) != np.shape(reference):
        return None
    got = np.asarray(actual).astype(np.float64, copy=False)
    want = np.asarray(reference).astype(np.float64, copy=False)
    finite = np.isfinite(want)
    std = float(np.std(want[finite])) if finite.any() else 0.0
    scale = max(std, abs_floor / rel_threshold)
    threshold = rel_threshold * scale
    if got.size == 0:
        return TensorError(0.0, 0.0, threshold, False)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(got - want)
    both_nan = np.isnan(got) & np.isnan(want)
    same_inf = np.isinf(got) & np.isinf(want) & (np.sign(got) == np.sign(want))
    diff[both_nan | same_inf] = 0.0
    diff[np.isnan(diff)] = np.inf  # NaN on one side only
    max_abs = float(diff.max())
    return TensorError(max_abs, max_abs / scale, threshold, max_abs > threshold)


@dataclass(frozen=True)
class NodeDivergence:
    """One examined node: how far its outputs moved and whether its inputs had already moved.

    ``inputs_diverged`` False on a diverged node means the node itself introduced the change
    (its kernel, its weights or its numeric precision), not something upstream.
    """

    index: int
    name: str
    op_type: str
    outputs: tuple[str, ...]
    max_abs_error: float
    rel_error: float
    threshold: float
    diverged: bool
    inputs_diverged: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "op_type": self.op_type,
            "outputs": list(self.outputs),
            "max_abs_error": jsonsafe.number(self.max_abs_error),
            "rel_error": jsonsafe.number(self.rel_error),
            "threshold": jsonsafe.number(self.threshold),
            "diverged": self.diverged,
            "inputs_diverged": self.inputs_diverged,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeDivergence:
        return cls(
            index=int(data["index"]),
            name=str(data["name"]),
            op_type=str(data["op_type"]),
            outputs=tuple(str(o) for o in data["outputs"]),
            max_abs_error=_float(data["max_abs_error"]),
            rel_error=_float(data["rel_error"]),
            threshold=_float(data["threshold"]),
            diverged=bool(data["diverged"]),
            inputs_diverged=bool(data["inputs_diverged"]),
        )


@dataclass(frozen=True)
class LocalizationReport:
    """The answer of ``localize``: ``bool(report)`` is True when no examined node diverged.

    ``profile`` holds every examined node in topological order (all of them in ``all`` mode,
    the probes and a sampled growth profile in ``bisect`` mode); ``top`` the worst ten by
    relative error. ``complete`` is False when the time budget cut the search short.
    """

    model: str
    against: Against
    mode: SearchMode
    path: Path_
    observer_effect: bool
    observer_detail: str
    first: NodeDivergence | None
    top: tuple[NodeDivergence, ...]
    profile: tuple[NodeDivergence, ...]
    runs: int
    seconds: float
    complete: bool = True
    rel_threshold: float = 0.01
    abs_floor: float = 1e-6
    nodes_total: int = 0
    skipped: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.first is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: non-finite floats become ``"Infinity"``, ``"-Infinity"``, ``"NaN"`` (``monitor.jsonsafe``)."""
        return {
            "model": self.model,
            "against": self.against,
            "mode": self.mode,
            "path": self.path,
            "observer_effect": self.observer_effect,
            "observer_detail": self.observer_detail,
            "first": self.first.to_dict() if self.first else None,
            "top": [n.to_dict() for n in self.top],
            "profile": [n.to_dict() for n in self.profile],
            "runs": self.runs,
            "seconds": jsonsafe.number(self.seconds),
            "complete": self.complete,
            "rel_threshold": jsonsafe.number(self.rel_threshold),
            "abs_floor": jsonsafe.number(self.abs_floor),
            "nodes_total": self.nodes_total,
            "skipped": dict(self.skipped),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LocalizationReport:
        first = data.get("first")
        return cls(
            model=str(data["model"]),
            against=data["against"],
            mode=data["mode"],
            path=data["path"],
            observer_effect=bool(data["observer_effect"]),
            observer_detail=str(data.get("observer_detail", "")),
            first=NodeDivergence.from_dict(first) if first else None,
            top=tuple(NodeDivergence.from_dict(n) for n in data.get("top", ())),
            profile=tuple(NodeDivergence.from_dict(n) for n in data.get("profile", ())),
            runs=int(data["runs"]),
            seconds=float(data["seconds"]),
            complete=bool(data.get("complete", True)),
            rel_threshold=float(data.get("rel_threshold", 0.01)),
            abs_floor=float(data.get("abs_floor", 1e-6)),
            nodes_total=int(data.get("nodes_total", 0)),
            skipped={str(k): str(v) for k, v in dict(data.get("skipped", {})).items()},
            notes=tuple(str(n) for n in data.get("notes", ())),
        )

    def summary(self) -> str:
        """One line for logs and the CLI."""
        if self.first is None:
            return f"{self.model}: no node diverged ({len(self.profile)} examined, path {self.path})"
        origin = "inputs had already moved" if self.first.inputs_diverged else "its inputs had not moved"
        return (
            f"{self.model}: first divergent node {self.first.name!r} ({self.first.op_type}, #{self.first.index}),"
            f" rel error {self.first.rel_error:.3g}; {origin}; path {self.path}"
        )


def top_nodes(profile: Iterable[NodeDivergence], count: int = TOP_COUNT) -> tuple[NodeDivergence, ...]:
    """The ``count`` nodes with the largest relative error, worst first (ties: earlier node first)."""
    return tuple(sorted(profile, key=lambda n: (-_sortable(n.rel_error), n.index))[:count])


def _sortable(value: float) -> float:
    return -1.0 if math.isnan(value) else value


def _float(value: Any) -> float:
    return float(value)  # float() parses "Infinity", "-Infinity", "NaN" and the older "inf", "-inf", "nan"
