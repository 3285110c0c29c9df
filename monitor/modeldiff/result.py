"""The value a model diff produces: what changed, where, who reads it, and a summary by kind.

``ModelDiff`` is frozen and answers ``bool()``: False when the two models are the same (the same
values, nodes, types and header), True when anything differs. ``to_dict()`` is the JSON shape
(``changed_tensors``, ``changed_attributes``, ``nodes_added``, ``nodes_removed``,
``nodes_changed``, ``graph_io``, ``header``, ``external_data``, ``summary``, ``quantization_params``:
the scales and zero points that moved, ``quantparams.py``); each list holds at
most ``limit`` entries (the largest changes first) and says how many it left out, so a
conversion touching a thousand weights stays readable. ``render()`` is the short text form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from monitor.modeldiff.quantparams import QuantParamChange
from monitor.modeldiff.walk import Consumer, GraphPath, NodeKey, TensorKey

LIMIT = 200
CONSUMERS_LIMIT = 20


def shown(name: str) -> str:
    """``name`` as written, or JSON-quoted when it holds a newline or another unprintable character."""
    return name if name.isprintable() else json.dumps(name, ensure_ascii=False)


def where(graph: GraphPath, name: str) -> str:
    """A readable place: ``name`` in the main graph, ``If_0.then_branch › name`` inside a subgraph."""
    return " › ".join([*(f"{shown(node)}.{attribute}" for node, attribute in graph), shown(name)])


def _graph(graph: GraphPath) -> dict[str, Any]:
    return {"graph": [list(level) for level in graph]} if graph else {}


def consumer_dict(consumer: Consumer) -> dict[str, Any]:
    return {"node": consumer.node.key, "op_type": consumer.op_type, **_graph(consumer.node.graph)}


@dataclass(frozen=True)
class TensorChange:
    """A tensor value (initializer, ``Constant`` value or tensor attribute) changed, added or removed."""

    key: TensorKey
    kind: str
    status: str  # changed | added | removed
    old_dtype: str | None
    new_dtype: str | None
    old_shape: tuple[int, ...] | None
    new_shape: tuple[int, ...] | None
    consumers: tuple[Consumer, ...] = ()
    changed_elements: int | None = None
    max_abs_change: float | None = None
    max_rel_change: float | None = None
    old_stats: dict[str, float] | None = None
    new_stats: dict[str, float] | None = None

    @property
    def place(self) -> str:
        name = f"{self.key.name}.{self.key.attribute}" if self.key.attribute else self.key.name
        return where(self.key.graph, name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.key.name, **_graph(self.key.graph)}
        if self.key.attribute:
            out["attribute"] = self.key.attribute
        out |= {
            "kind": self.kind,
            "status": self.status,
            "old_dtype": self.old_dtype,
            "new_dtype": self.new_dtype,
            "old_shape": None if self.old_shape is None else list(self.old_shape),
            "new_shape": None if self.new_shape is None else list(self.new_shape),
            "changed_elements": self.changed_elements,
            "max_abs_change": self.max_abs_change,
            "max_rel_change": self.max_rel_change,
            "old_stats": self.old_stats,
            "new_stats": self.new_stats,
            "consumers": [consumer_dict(c) for c in self.consumers[:CONSUMERS_LIMIT]],
        }
        if len(self.consumers) > CONSUMERS_LIMIT:
            out["consumers_omitted"] = len(self.consumers) - CONSUMERS_LIMIT
        return out


@dataclass(frozen=True)
class ListChange:
    """A list attribute holding weights (``coefficients``, ``nodes_values``, …) changed, added or removed."""

    node: NodeKey
    op_type: str
    attribute: str
    status: str
    old_length: int | None
    new_length: int | None
    changed_elements: int | None = None
    max_abs_change: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node.key,
            **_graph(self.node.graph),
            "op_type": self.op_type,
            "attribute": self.attribute,
            "status": self.status,
            "old_length": self.old_length,
            "new_length": self.new_length,
            "changed_elements": self.changed_elements,
            "max_abs_change": self.max_abs_change,
        }


@dataclass(frozen=True)
class NodeEntry:
    """A node present in only one of the two models."""

    node: NodeKey
    name: str
    op_type: str

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node.key, **_graph(self.node.graph), "name": self.name, "op_type": self.op_type}


@dataclass(frozen=True)
class NodeChange:
    """A node in both models whose op type, wiring or (non-weight) attributes differ: field -> (old, new)."""

    node: NodeKey
    op_type: str
    changes: dict[str, tuple[Any, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node.key,
            **_graph(self.node.graph),
            "op_type": self.op_type,
            "changes": {field: {"old": old, "new": new} for field, (old, new) in self.changes.items()},
        }


@dataclass(frozen=True)
class IOChange:
    """A graph input or output whose element type or shape changed, or that was added or removed."""

    which: str  # input | output
    name: str
    status: str
    old: tuple[str, Any] | None  # (dtype, shape)
    new: tuple[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        def side(value: tuple[str, Any] | None) -> dict[str, Any] | None:
            return None if value is None else {"dtype": value[0], "shape": None if value[1] is None else list(value[1])}

        return {
            "which": self.which,
            "name": self.name,
            "status": self.status,
            "old": side(self.old),
            "new": side(self.new),
        }


@dataclass(frozen=True)
class ModelDiff:
    """The static difference between two models (or a model and the manifest of an earlier one)."""

    old: str
    new: str
    exact: bool  # False against a manifest: digests tell *that* values changed, not by how much
    summary: tuple[str, ...]
    header: dict[str, tuple[Any, Any]]
    graph_io: tuple[IOChange, ...]
    changed_tensors: tuple[TensorChange, ...]
    changed_attributes: tuple[ListChange, ...]
    nodes_added: tuple[NodeEntry, ...]
    nodes_removed: tuple[NodeEntry, ...]
    nodes_changed: tuple[NodeChange, ...]
    external_data: dict[str, tuple[str, ...]]
    quantization: tuple[QuantParamChange, ...] = ()  # scales, zero points, re-quantized tensors (quantparams)

    @property
    def same_graph(self) -> bool:
        """True when no node, wiring or graph input/output differs (values may)."""
        return not (self.graph_io or self.nodes_added or self.nodes_removed or self.nodes_changed)

    def __bool__(self) -> bool:
        """True when the models differ in anything the diff looks at."""
        return bool(
            self.header
            or self.graph_io
            or self.changed_tensors
            or self.changed_attributes
            or self.nodes_added
            or self.nodes_removed
            or self.nodes_changed
            or any(self.external_data.values())
        )

    def to_dict(self, limit: int = LIMIT) -> dict[str, Any]:
        """The JSON shape; every list capped at ``limit`` entries with ``<list>_omitted`` counts."""
        out: dict[str, Any] = {
            "old": self.old,
            "new": self.new,
            "identical": not self,
            "exact": self.exact,
            "summary": list(self.summary),
            "header": {field: {"old": old, "new": new} for field, (old, new) in self.header.items()},
            "external_data": {status: list(files) for status, files in self.external_data.items()},
        }
        lists: dict[str, tuple[Any, ...]] = {
            "graph_io": self.graph_io,
            "changed_tensors": self.changed_tensors,
            "changed_attributes": self.changed_attributes,
            "nodes_added": self.nodes_added,
            "nodes_removed": self.nodes_removed,
            "nodes_changed": self.nodes_changed,
            "quantization_params": self.quantization,
        }
        for field, entries in lists.items():
            out[field] = [entry.to_dict() for entry in entries[:limit]]
            out[f"{field}_omitted"] = max(0, len(entries) - limit)
        return out

    def render(self, top: int = 10) -> str:
        """One summary line, then the ``top`` largest tensor changes and node changes, as plain text."""
        if not self:
            return f"identical: {self.new} has the same values, nodes and types as {self.old}"
        lines = ["differs: " + "; ".join(self.summary)]
        for param in self.quantization[:top]:
            lines.append(f"  quantization {param.role.replace('_', ' ')} {param.text()}")
        quantization = {param.key for param in self.quantization}
        weights = [change for change in self.changed_tensors if change.key not in quantization]
        for change in weights[:top]:
            lines.append("  " + _tensor_line(change))
        for attr in self.changed_attributes[:top]:
            lines.append(
                f"  attribute {where(attr.node.graph, attr.node.key)}.{attr.attribute} ({attr.op_type}): "
                f"{attr.status}"
                + (
                    f", {attr.changed_elements} changed, max abs {attr.max_abs_change:.3g}"
                    if attr.changed_elements is not None and attr.max_abs_change is not None
                    else ""
                )
            )
        for node in self.nodes_changed[:top]:
            lines.append(f"  node {where(node.node.graph, node.node.key)} ({node.op_type}): {', '.join(node.changes)}")
        shown = min(top, len(weights)) + min(top, len(self.changed_attributes)) + min(top, len(self.quantization))
        hidden = len(self.changed_tensors) + len(self.changed_attributes) - shown
        hidden += max(0, len(self.nodes_changed) - top)
        if hidden > 0:
            lines.append(f"  … and {hidden} more (--json lists up to {LIMIT} of each)")
        return "\n".join(lines)


def _tensor_line(change: TensorChange) -> str:
    text = f"{change.kind} {change.place}: {change.status}"
    if change.old_dtype != change.new_dtype and change.old_dtype and change.new_dtype:
        text += f" {change.old_dtype}→{change.new_dtype}"
    if change.old_shape != change.new_shape and change.old_shape is not None and change.new_shape is not None:
        text += f" {list(change.old_shape)}→{list(change.new_shape)}"
    if change.changed_elements is not None:
        text += f", {change.changed_elements} elements changed"
    if change.max_abs_change is not None:
        text += f", max abs {change.max_abs_change:.3g}"
    if change.max_rel_change is not None:
        text += f", max rel {change.max_rel_change:.3g}"
    if change.consumers:
        names = ", ".join(f"{shown(c.node.key)} ({c.op_type})" for c in change.consumers[:3])
        more = f" +{len(change.consumers) - 3}" if len(change.consumers) > 3 else ""
        text += f"; read by {names}{more}"
    return text
