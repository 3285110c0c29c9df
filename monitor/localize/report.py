"""What localization found: per-node results and the report value with its two answers.

Every report names two of the *model's* nodes (``monitor/localize/rule.py`` holds the rules):

* ``first_changed``: the first node, in topological order, whose output differs from the
  reference while its inputs agree: the node whose weights, attributes or kernel changed.
* ``first_out_of_tolerance``: the first node whose output breaks the check's tolerance (or the
  1%-of-std rule with ``threshold_rule="std"``).

``comparison`` says how *changed* was decided (``bitwise``, or ``noise_floor`` when the stack or
session settings differ from the reference's) and ``comparison_detail`` why; ``graph_level`` the
ONNX Runtime optimization level the exposed graph ran at, and ``graph_level_detail`` why that one.
``bool(report)`` is True when no node is out of tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor import jsonsafe
from monitor.localize.rule import TensorError, tensor_error

__all__ = ["LocalizationReport", "NodeDivergence", "TensorError", "tensor_error", "top_nodes"]

TOP_COUNT = 10


@dataclass(frozen=True)
class NodeDivergence:
    """One examined node: how far its outputs moved and whether its inputs had already changed.

    ``inputs_changed`` False on a changed node means the node itself introduced the change (its
    kernel, its weights or its numeric precision), not something upstream.
    """

    index: int
    name: str
    op_type: str
    outputs: tuple[str, ...]
    max_abs_error: float
    rel_error: float
    threshold: float
    changed: bool
    out_of_tolerance: bool
    inputs_changed: bool
    reasons: tuple[str, ...] = ()
    # Set when the tensor came from ORT's optimized graph: the node that computed it and the model
    # nodes it replaced (a fusion), topologically ordered; empty when it is the model's own node.
    optimized_node: str = ""
    fused_from: tuple[str, ...] = ()
    fused_op_types: tuple[str, ...] = ()  # the op types of ``fused_from``, in the same order

    @property
    def diverged(self) -> bool:
        return self.out_of_tolerance

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "op_type": self.op_type,
            "outputs": list(self.outputs),
            "max_abs_error": jsonsafe.number(self.max_abs_error),
            "rel_error": jsonsafe.number(self.rel_error),
            "threshold": jsonsafe.number(self.threshold),
            "changed": self.changed,
            "out_of_tolerance": self.out_of_tolerance,
            "inputs_changed": self.inputs_changed,
            "reasons": list(self.reasons),
            "optimized_node": self.optimized_node,
            "fused_from": list(self.fused_from),
            "fused_op_types": list(self.fused_op_types),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeDivergence:
        out = bool(data.get("out_of_tolerance", data.get("diverged", False)))
        return cls(
            index=int(data["index"]),
            name=str(data["name"]),
            op_type=str(data["op_type"]),
            outputs=tuple(str(o) for o in data["outputs"]),
            max_abs_error=float(data["max_abs_error"]),  # float() parses "Infinity" and "NaN"
            rel_error=float(data["rel_error"]),
            threshold=float(data["threshold"]),
            changed=bool(data.get("changed", out)),
            out_of_tolerance=out,
            inputs_changed=bool(data.get("inputs_changed", data.get("inputs_diverged", False))),
            reasons=tuple(str(r) for r in data.get("reasons", ())),
            optimized_node=str(data.get("optimized_node", "")),
            fused_from=tuple(str(n) for n in data.get("fused_from", ())),
            fused_op_types=tuple(str(n) for n in data.get("fused_op_types", ())),
        )


@dataclass(frozen=True)
class LocalizationReport:
    """The answer of ``localize``; ``profile`` holds every examined node in topological order."""

    model: str
    against: str  # baseline | unoptimized | model
    mode: str  # all | bisect
    first_changed: NodeDivergence | None
    first_out_of_tolerance: NodeDivergence | None
    top: tuple[NodeDivergence, ...]
    profile: tuple[NodeDivergence, ...]
    runs: int
    seconds: float
    comparison: str = "bitwise"  # bitwise | noise_floor
    comparison_detail: str = ""
    threshold_rule: str = "tolerance"
    rule_detail: str = ""
    graph_level: str = "all"
    graph_level_detail: str = ""
    graph_view: str = "model"  # model (the model's tensors exposed) | optimized (ORT's graph, mapped back)
    reference_model: str = ""
    nondeterministic_reference: tuple[str, ...] = ()
    complete: bool = True
    rel_threshold: float = 0.01
    abs_floor: float = 1e-6
    nodes_total: int = 0
    skipped: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.first_out_of_tolerance is None

    @property
    def first(self) -> NodeDivergence | None:
        """The node a reader should look at first: out of tolerance if any, else the first changed."""
        return self.first_out_of_tolerance or self.first_changed

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: non-finite floats become ``"Infinity"``, ``"-Infinity"``, ``"NaN"`` (``monitor.jsonsafe``)."""
        return {
            "model": self.model,
            "against": self.against,
            "reference_model": self.reference_model,
            "mode": self.mode,
            "first_changed": self.first_changed.to_dict() if self.first_changed else None,
            "first_out_of_tolerance": self.first_out_of_tolerance.to_dict() if self.first_out_of_tolerance else None,
            "comparison": self.comparison,
            "comparison_detail": self.comparison_detail,
            "threshold_rule": self.threshold_rule,
            "rule_detail": self.rule_detail,
            "graph_level": self.graph_level,
            "graph_level_detail": self.graph_level_detail,
            "graph_view": self.graph_view,
            "nondeterministic_reference": list(self.nondeterministic_reference),
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
        def node(key: str) -> NodeDivergence | None:
            value = data.get(key)
            return NodeDivergence.from_dict(value) if value else None

        return cls(
            model=str(data["model"]),
            against=str(data["against"]),
            reference_model=str(data.get("reference_model", "")),
            mode=str(data["mode"]),
            first_changed=node("first_changed"),
            first_out_of_tolerance=node("first_out_of_tolerance"),
            comparison=str(data.get("comparison", "bitwise")),
            comparison_detail=str(data.get("comparison_detail", "")),
            threshold_rule=str(data.get("threshold_rule", "tolerance")),
            rule_detail=str(data.get("rule_detail", "")),
            graph_level=str(data.get("graph_level", "all")),
            graph_level_detail=str(data.get("graph_level_detail", "")),
            graph_view=str(data.get("graph_view", "model")),
            nondeterministic_reference=tuple(str(n) for n in data.get("nondeterministic_reference", ())),
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
        """Two short clauses for logs and the CLI: what changed first, what broke tolerance first."""
        return (
            f"{self.model}: first changed {_describe(self.first_changed)};"
            f" first out of tolerance {_describe(self.first_out_of_tolerance)}"
            f" ({self.comparison} comparison, graph level {self.graph_level})"
        )


def _describe(node: NodeDivergence | None) -> str:
    if node is None:
        return "none"
    origin = "its inputs had changed" if node.inputs_changed else "its inputs had not changed"
    fused = f"; computed by the optimized node {node.optimized_node!r}" if node.optimized_node else ""
    if node.fused_from:
        fused += f", which replaced {', '.join(repr(n) for n in node.fused_from)}"
    return f"{node.name!r} ({node.op_type}, #{node.index}, max |diff| {node.max_abs_error:.3g}; {origin}{fused})"


def top_nodes(profile: Iterable[NodeDivergence], count: int = TOP_COUNT) -> tuple[NodeDivergence, ...]:
    """The ``count`` nodes with the largest relative error, worst first (ties: earlier node first)."""
    return tuple(sorted(profile, key=lambda n: (-_sortable(n.rel_error), n.index))[:count])


def _sortable(value: float) -> float:
    return -1.0 if math.isnan(value) else value
