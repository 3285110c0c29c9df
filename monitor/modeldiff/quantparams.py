"""Quantization parameters that moved: scales and zero points of ``QuantizeLinear``/``DequantizeLinear``.

A QDQ model rebuilt from the same float model with other calibration data keeps its graph and its
weights' quantized values (a weight's scale comes from the weight itself), but its activations get
new scales and zero points, and each bias (stored as int32 under ``input scale × weight scale``) is
re-quantized under its new scale. ``changes`` picks those out of a diff's changed tensors by the role
the tensor plays in the new and the old graph, so the summary says "quantization parameters changed"
apart from weight changes:

- ``scale``: input 1 of a ``QuantizeLinear``/``DequantizeLinear``, in both models;
- ``zero_point``: input 2 of one;
- ``requantized``: input 0 of a ``DequantizeLinear`` (a stored quantized weight or bias) whose
  scale changed too: its codes moved with its scale. A quantized tensor whose scale stayed is a
  weight change, reported as such.

Old and new values are read from the protobufs (two files) or from the manifest, which keeps the
values of every scale and zero point (``facts.QPARAM_VALUES`` elements at most).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.modeldiff import values
from monitor.modeldiff.facts import ModelFacts, Role, TensorFacts, parameter_names
from monitor.modeldiff.walk import GraphPath, TensorKey

SHOWN_VALUES = 8  # values listed per tensor in the JSON (the change is over all of them)


@dataclass(frozen=True)
class QuantParamChange:
    """One scale, zero point or re-quantized tensor that differs between the two models."""

    key: TensorKey
    role: str  # scale | zero_point | requantized
    readers: tuple[str, ...]
    old: tuple[float, ...] | None
    new: tuple[float, ...] | None
    max_abs_change: float | None
    max_rel_change: float | None

    @property
    def name(self) -> str:
        return self.key.name

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.key.name, "role": self.role, "readers": list(self.readers)}
        if self.key.graph:
            out["graph"] = [list(level) for level in self.key.graph]
        if self.role != "requantized":
            out["old"] = None if self.old is None else list(self.old[:SHOWN_VALUES])
            out["new"] = None if self.new is None else list(self.new[:SHOWN_VALUES])
        out |= {"max_abs_change": self.max_abs_change, "max_rel_change": self.max_rel_change}
        return out

    def text(self) -> str:
        if self.role == "requantized" or self.old is None or self.new is None:
            return f"{self.key.name} ({self.role.replace('_', ' ')})"
        if len(self.old) == 1 and len(self.new) == 1:
            change = f"{self.old[0]:.4g}→{self.new[0]:.4g}"
        else:
            change = f"{len(self.new)} channels, max abs change {self.max_abs_change:.3g}"
        if self.role == "scale" and self.max_rel_change is not None:
            change += f" ({self.max_rel_change:+.1%})" if len(self.new) == 1 else f", max rel {self.max_rel_change:.1%}"
        return f"{self.key.name} {change}"


def _roles(model: ModelFacts) -> dict[tuple[GraphPath, str], Role]:
    return parameter_names((key.graph, node.op_type, node.inputs) for key, node in model.nodes.items())


def changes(changed: Sequence[Any], old: ModelFacts, new: ModelFacts) -> tuple[QuantParamChange, ...]:
    """The Q/DQ parameters among ``changed`` (``TensorChange``s), scales by largest relative change first."""
    before, after = _roles(old), _roles(new)
    moved: set[tuple[GraphPath, str]] = set()
    found: list[QuantParamChange] = []
    candidates = [c for c in changed if c.status == "changed" and not c.key.attribute]
    for change in candidates:
        place = (change.key.graph, change.key.name)
        role = after.get(place)
        if role is None or before.get(place) != role or role[0] == "quantized":
            continue
        old_values, new_values = _values(old.tensors[change.key]), _values(new.tensors[change.key])
        found.append(_parameter(change, role[0], old_values, new_values))
        moved.add(place)
    for change in candidates:
        place = (change.key.graph, change.key.name)
        role = after.get(place)
        if role is None or before.get(place) != role or role[0] != "quantized":
            continue
        if role[1] is not None and (change.key.graph, role[1]) in moved:
            readers = tuple(c.node.key for c in change.consumers)
            found.append(
                QuantParamChange(
                    change.key, "requantized", readers, None, None, change.max_abs_change, change.max_rel_change
                )
            )
    order = {"scale": 0, "zero_point": 1, "requantized": 2}
    found.sort(key=lambda c: (order[c.role], -(c.max_rel_change or 0.0), -(c.max_abs_change or 0.0), c.name))
    return tuple(found)


def _parameter(
    change: Any, role: str, old: np.ndarray[Any, Any] | None, new: np.ndarray[Any, Any] | None
) -> QuantParamChange:
    readers = tuple(c.node.key for c in change.consumers)
    max_abs = max_rel = None
    if old is not None and new is not None and old.shape == new.shape and old.size:
        diff = np.abs(new.astype(np.float64) - old.astype(np.float64))
        max_abs = float(diff.max())
        if role == "scale":
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = (new.astype(np.float64) - old.astype(np.float64)) / np.abs(old.astype(np.float64))
            worst = int(np.argmax(np.abs(rel)))
            max_rel = float(rel[worst]) if np.isfinite(rel[worst]) else None
    return QuantParamChange(
        change.key,
        role,
        readers,
        None if old is None else tuple(float(v) for v in old),
        None if new is None else tuple(float(v) for v in new),
        max_abs,
        max_rel,
    )


def _values(tensor: TensorFacts) -> np.ndarray[Any, Any] | None:
    if tensor.proto is not None:
        return values.as_array(tensor.proto)
    return None if tensor.values is None else np.asarray(tensor.values, dtype=np.float64)
