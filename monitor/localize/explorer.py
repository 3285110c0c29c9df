"""A localization as Google Model Explorer node data: each node's error on the graph itself.

Model Explorer (``pip install ai-edge-model-explorer model-explorer-onnx``) draws an ONNX model with
the model-explorer-onnx adapter, whose node ids are the model's node names and whose graph id is the
ONNX graph's name; a *node data* file colours those nodes by a value. Its format is the
``ModelNodeData`` of Model Explorer's ``node_data_builder.py``: ``{graph id: {"results": {node id:
{"value": number, "bgColor"?: css}}, "gradient": [{"stop": 0..1, "bgColor": css}], ...}}``.

Two files come out of one localization: ``FILE`` with each measured node's relative error (the
difference over the reference's spread, as the report ranks them) and ``FILE``'s ``.max_abs.json``
sibling with its max absolute difference. A node out of tolerance is drawn red and a node that only
changed orange, whatever its value; the rest follow a white-to-blue gradient. Values are finite
numbers (the format has no infinity): a non-finite error (a shape change) is written as ten times
the largest finite one, and its node is red.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from monitor import jsonsafe
from monitor.localize.report import LocalizationReport, NodeDivergence

OUT_OF_TOLERANCE = "#d62728"
CHANGED = "#ff7f0e"
GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 1, "bgColor": "#1f77b4"}]


def node_data(report: LocalizationReport, graph_id: str, *, metric: str = "rel_error") -> dict[str, Any]:
    """The report's profile as Model Explorer ``ModelNodeData`` for the graph ``graph_id``."""
    nodes = [n for n in report.profile if n.name]
    values = [_value(n, metric) for n in nodes]
    finite = [v for v in values if math.isfinite(v)]
    ceiling = 10 * max(finite) if finite and max(finite) > 0 else 1.0
    results: dict[str, dict[str, Any]] = {}
    for node, value in zip(nodes, values, strict=True):
        entry: dict[str, Any] = {"value": value if math.isfinite(value) else ceiling}
        if node.out_of_tolerance or not math.isfinite(value):
            entry["bgColor"] = OUT_OF_TOLERANCE
        elif node.changed:
            entry["bgColor"] = CHANGED
        results[node.name] = entry
    return {graph_id: {"results": results, "gradient": GRADIENT}}


def write(report: LocalizationReport, graph_id: str, path: Path) -> list[Path]:
    """Write the relative-error file at ``path`` and its ``.max_abs.json`` sibling; the paths written."""
    written = []
    for metric, target in (("rel_error", path), ("max_abs_error", sibling(path))):
        target.write_text(jsonsafe.dumps(node_data(report, graph_id, metric=metric), indent=2), encoding="utf-8")
        written.append(target)
    return written


def sibling(path: Path) -> Path:
    """``errors.json`` -> ``errors.max_abs.json``."""
    return path.with_name(f"{path.stem}.max_abs{path.suffix or '.json'}")


def graph_name(model_path: Path) -> str:
    """The ONNX graph's name, the graph id model-explorer-onnx gives it (read without the weights)."""
    import onnx

    return str(onnx.load(str(model_path), load_external_data=False).graph.name)


def _value(node: NodeDivergence, metric: str) -> float:
    value = float(getattr(node, metric))
    return value if not math.isnan(value) else math.inf
