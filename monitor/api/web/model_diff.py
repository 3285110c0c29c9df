"""The "What changed in the model file" section of a run page: the static diff a check stored.

A check whose model file differs from the baseline's keeps ``details["model_diff"]``
(``monitor.modeldiff``, lists capped): its summary lines, then the changed tensors with the
nodes that read them, and the nodes added, removed or rewired. Every value is escaped; names
come from the model file, which is the user's data, not markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.api.web.html import esc, section, table

MAX_ROWS = 20


def render(details: Mapping[str, Any]) -> str:
    """The section, or "" when the run has no model diff."""
    data = details.get("model_diff")
    if not isinstance(data, Mapping):
        return ""
    if "note" in data:
        return section("What changed in the model file", f'<p class="sub">{esc(data["note"])}</p>')
    parts = ["<ul>" + "".join(f"<li>{esc(line)}</li>" for line in data.get("summary", [])) + "</ul>"]
    tensors = [t for t in data.get("changed_tensors", []) if isinstance(t, Mapping)][:MAX_ROWS]
    if tensors:
        rows = (
            [
                esc(t.get("name", "")),
                esc(t.get("status", "")),
                esc(_types(t)),
                esc(", ".join(f"{c.get('node', '')} ({c.get('op_type', '')})" for c in t.get("consumers", []))),
            ]
            for t in tensors
        )
        parts.append(table(["Tensor", "Change", "dtype / shape", "Read by"], rows))
    nodes = [
        (kind, n)
        for kind in ("nodes_added", "nodes_removed", "nodes_changed")
        for n in data.get(kind, [])[:MAX_ROWS]
        if isinstance(n, Mapping)
    ]
    if nodes:
        rows = (
            [esc(kind.removeprefix("nodes_")), esc(n.get("node", "")), esc(n.get("op_type", ""))] for kind, n in nodes
        )
        parts.append(table(["Node", "Name", "Op"], rows))
    return section("What changed in the model file", "".join(parts))


def _types(tensor: Mapping[str, Any]) -> str:
    old = f"{tensor.get('old_dtype')} {tensor.get('old_shape')}"
    new = f"{tensor.get('new_dtype')} {tensor.get('new_shape')}"
    return old if old == new else f"{old} → {new}"
