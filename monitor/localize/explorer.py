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
the largest finite one, and its node is red. The first changed node (``report.first_changed``: where
the drift starts) is drawn purple, apart from every node downstream of it.

Node ids. onnxmon names an unnamed node ``<Op>_<index>``; model-explorer-onnx (0.4) names it
otherwise: before drawing, it runs ``onnx_ir``'s ``NameFixPass``, which gives an unnamed node
``node``, then ``node_1``, ``node_2``, ... (the next free name, visiting nodes in graph order and each
node's subgraphs right after it, one counter for the whole model, names unique per graph) and renames
a duplicate ``X`` to ``X_1``. ``adapter_ids`` follows that pass, so the node data of a model with
unnamed nodes keys them as the adapter draws them (``tests/test_explorer_ids.py`` checks it against
the pass itself).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor import jsonsafe
from monitor.localize.report import LocalizationReport, NodeDivergence

if TYPE_CHECKING:
    import onnx

OUT_OF_TOLERANCE = "#d62728"
CHANGED = "#ff7f0e"
FIRST_CHANGED = "#9467bd"
GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 1, "bgColor": "#1f77b4"}]


def node_data(
    report: LocalizationReport, graph_id: str, *, metric: str = "rel_error", ids: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The report's profile as Model Explorer ``ModelNodeData`` for the graph ``graph_id``.

    ``ids`` maps onnxmon's node names to the adapter's node ids (``adapter_ids``); a name it lacks is kept.
    """
    ids = ids or {}
    first = report.first_changed.name if report.first_changed is not None else None
    nodes = [n for n in report.profile if n.name]
    values = [_value(n, metric) for n in nodes]
    finite = [v for v in values if math.isfinite(v)]
    ceiling = 10 * max(finite) if finite and max(finite) > 0 else 1.0
    results: dict[str, dict[str, Any]] = {}
    for node, value in zip(nodes, values, strict=True):
        entry: dict[str, Any] = {"value": value if math.isfinite(value) else ceiling}
        if node.name == first:
            entry["bgColor"] = FIRST_CHANGED
        elif node.out_of_tolerance or not math.isfinite(value):
            entry["bgColor"] = OUT_OF_TOLERANCE
        elif node.changed:
            entry["bgColor"] = CHANGED
        results[ids.get(node.name, node.name)] = entry
    return {graph_id: {"results": results, "gradient": GRADIENT}}


def write(report: LocalizationReport, graph_id: str, path: Path, ids: Mapping[str, str] | None = None) -> list[Path]:
    """Write the relative-error file at ``path`` and its ``.max_abs.json`` sibling; the paths written."""
    written = []
    for metric, target in (("rel_error", path), ("max_abs_error", sibling(path))):
        data = node_data(report, graph_id, metric=metric, ids=ids)
        target.write_text(jsonsafe.dumps(data, indent=2), encoding="utf-8")
        written.append(target)
    return written


def sibling(path: Path) -> Path:
    """``errors.json`` -> ``errors.max_abs.json``."""
    return path.with_name(f"{path.stem}.max_abs{path.suffix or '.json'}")


def graph_name(model_path: Path) -> str:
    """The ONNX graph's name, the graph id model-explorer-onnx gives it (read without the weights)."""
    import onnx

    return str(onnx.load(str(model_path), load_external_data=False).graph.name)


def adapter_ids(graph: onnx.GraphProto) -> dict[str, str]:
    """onnxmon's name of each top-level node (``name`` or ``<Op>_<index>``) -> model-explorer-onnx's node id."""
    pairs = enumerate(zip(graph.node, adapter_names(graph), strict=True))
    return {node.name or f"{node.op_type}_{i}": adapter_id for i, (node, adapter_id) in pairs}


def adapter_names(graph: onnx.GraphProto) -> list[str]:
    """The node ids model-explorer-onnx gives the graph's top-level nodes, in node order.

    Two nodes onnxmon would call by one name (a duplicate name in the file) get two ids here; the
    node data keys the later one.
    """
    return _fix_names(graph, collections.Counter())


def model_ids(model_path: Path) -> dict[str, str]:
    """``adapter_ids`` of a model file's main graph (read without the weights)."""
    import onnx

    return adapter_ids(onnx.load(str(model_path), load_external_data=False).graph)


def _fix_names(graph: onnx.GraphProto, counter: collections.Counter[str]) -> list[str]:
    """``NameFixPass``'s node names for one graph, in node order; its subgraphs share ``counter``."""
    import onnx

    used: set[str] = set()
    names = []
    for node in graph.node:
        preferred = node.name or "node"
        name = preferred
        while name in used:
            counter[preferred] += 1
            name = f"{preferred}_{counter[preferred]}"
        used.add(name)
        names.append(name)
        for attribute in node.attribute:  # the pass visits a node's subgraphs right after it
            for subgraph in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs):
                _fix_names(subgraph, counter)
    return names


def _value(node: NodeDivergence, metric: str) -> float:
    value = float(getattr(node, metric))
    return value if not math.isnan(value) else math.inf
