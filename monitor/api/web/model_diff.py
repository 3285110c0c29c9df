"""The "What changed in the model file" section of a run page: the static diff a check stored.

A check whose model file differs from the baseline's keeps ``details["model_diff"]``
(``monitor.modeldiff``, lists capped): its summary lines, then the changed tensors with the
nodes that read them, and the nodes added, removed or rewired (``templates/model_diff.html``,
which escapes every value: names come from the model file, the user's data, not markup).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_ROWS = 20


@dataclass(frozen=True)
class ModelDiff:
    note: str | None  # why there is no diff (the section says only that)
    summary: list[str]
    tensors: list[tuple[str, str, str, str]]  # name, change, dtype / shape, read by
    nodes: list[tuple[str, str, str]]  # added / removed / changed, name, op


def view(details: Mapping[str, Any]) -> ModelDiff | None:
    """The section's values, or None when the run has no model diff."""
    data = details.get("model_diff")
    if not isinstance(data, Mapping):
        return None
    if "note" in data:
        return ModelDiff(str(data["note"]), [], [], [])
    tensors = [
        (
            str(t.get("name", "")),
            str(t.get("status", "")),
            _types(t),
            ", ".join(f"{c.get('node', '')} ({c.get('op_type', '')})" for c in t.get("consumers", [])),
        )
        for t in [t for t in data.get("changed_tensors", []) if isinstance(t, Mapping)][:MAX_ROWS]
    ]
    nodes = [
        (kind.removeprefix("nodes_"), str(n.get("node", "")), str(n.get("op_type", "")))
        for kind in ("nodes_added", "nodes_removed", "nodes_changed")
        for n in data.get(kind, [])[:MAX_ROWS]
        if isinstance(n, Mapping)
    ]
    return ModelDiff(None, [str(line) for line in data.get("summary", [])], tensors, nodes)


def _types(tensor: Mapping[str, Any]) -> str:
    old = f"{tensor.get('old_dtype')} {tensor.get('old_shape')}"
    new = f"{tensor.get('new_dtype')} {tensor.get('new_shape')}"
    return old if old == new else f"{old} → {new}"
