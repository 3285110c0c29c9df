"""The model manifest: what a baseline keeps of its model so that a later model can be diffed against it.

A baseline does not keep a copy of the model file, so it keeps this instead: per tensor its kind,
dtype, shape, the sha256 of its values and (floats) min, max, mean and std; per node its key,
name, op type, inputs, outputs and short attribute texts (``facts.attribute_text``); per list
attribute holding weights its dtype, length and sha256; the opsets, IR version, producer and the
graph's input and output types; and the values of each quantization scale and zero point (a QDQ
model's, up to ``facts.QPARAM_VALUES`` elements each, so a re-calibration says by how much). No
other per-element data: the size grows with the number of tensors and nodes, not with the weights
(measured in docs/modeldiff.md).

``diff_against_manifest`` gives the same ``ModelDiff`` as a diff of two files, with what can be
known without the old values: which tensors changed (digest), their consumers, dtype and shape
changes, the old and new statistics, nodes added, removed and changed, and the summary;
``max_abs_change`` and ``max_rel_change`` are None and ``exact`` is False.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.errors import BaselineError
from monitor.modeldiff.consumers import consumers_of
from monitor.modeldiff.diff import ConsumersOf, compare, path_prefix
from monitor.modeldiff.facts import ListFacts, ModelFacts, NodeFacts, TensorFacts, ValueFacts, facts
from monitor.modeldiff.load import LoadedModel
from monitor.modeldiff.result import ModelDiff
from monitor.modeldiff.walk import Consumer, GraphPath, NodeKey, TensorKey

FORMAT = 1


def manifest(model: LoadedModel) -> dict[str, Any]:
    """The JSON-able manifest of ``model`` (see the module docstring for what it holds)."""
    found = facts(model, digests=True)
    return {
        "format": FORMAT,
        "ir_version": found.ir_version,
        "producer": found.producer,
        "opsets": dict(found.opsets),
        "inputs": [_value(name, v) for name, v in found.inputs.items()],
        "outputs": [_value(name, v) for name, v in found.outputs.items()],
        "tensors": [_tensor(key, t) for key, t in found.tensors.items()],
        "lists": [_list(key, attribute, f) for (key, attribute), f in found.lists.items()],
        "nodes": [_node(key, n) for key, n in found.nodes.items()],
    }


def diff_against_manifest(old: Mapping[str, Any], new: LoadedModel, *, old_name: str = "manifest") -> ModelDiff:
    """What changed from the model the manifest ``old`` describes to ``new``."""
    try:
        before = from_manifest(old)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BaselineError(f"model manifest {old_name} is malformed: {type(exc).__name__}: {exc}") from None
    after = facts(new, digests=True)
    return compare(
        before,
        after,
        old_consumers=consumers_from_nodes(before),
        new_consumers=consumers_of(new.proto),
        names=(old_name, new.path or "new model"),
        exact=False,
    )


def consumers_from_nodes(model: ModelFacts) -> ConsumersOf:
    """Readers of a tensor from node records alone: nodes in its graph or below that list it as an input."""
    by_input: dict[str, list[tuple[NodeKey, str]]] = {}
    for node_key, node in model.nodes.items():
        for name in dict.fromkeys(node.inputs):
            by_input.setdefault(name, []).append((node_key, node.op_type))

    def of(key: TensorKey) -> tuple[Consumer, ...]:
        if key.attribute:
            node = model.nodes.get(NodeKey(key.graph, key.name))
            return () if node is None else (Consumer(NodeKey(key.graph, key.name), node.op_type),)
        return tuple(
            Consumer(node_key, op_type)
            for node_key, op_type in by_input.get(key.name, ())
            if path_prefix(node_key.graph, key.graph)
        )

    return of


def from_manifest(data: Mapping[str, Any]) -> ModelFacts:
    """The ``ModelFacts`` a manifest describes (digests and statistics, no values)."""
    if data.get("format") != FORMAT:
        raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
    return ModelFacts(
        ir_version=int(data["ir_version"]),
        producer=str(data["producer"]),
        opsets={str(k): int(v) for k, v in data["opsets"].items()},
        inputs={v["name"]: ValueFacts(v["dtype"], _shape(v["shape"])) for v in data["inputs"]},
        outputs={v["name"]: ValueFacts(v["dtype"], _shape(v["shape"])) for v in data["outputs"]},
        tensors={
            TensorKey(_path(t), t["name"], t.get("attribute", "")): TensorFacts(
                t["kind"],
                t["dtype"],
                tuple(int(d) for d in t["shape"]),
                t["sha256"],
                t.get("stats"),
                t.get("location"),
                values=None if t.get("values") is None else tuple(float(v) for v in t["values"]),
            )
            for t in data["tensors"]
        },
        lists={
            (NodeKey(_path(f), f["node"]), f["attribute"]): ListFacts(
                f["op_type"], f["dtype"], int(f["length"]), f["sha256"]
            )
            for f in data["lists"]
        },
        nodes={
            NodeKey(_path(n), n["key"]): NodeFacts(
                n.get("name", ""),
                n["op_type"],
                n.get("domain", ""),
                tuple(n["inputs"]),
                tuple(n["outputs"]),
                {str(k): str(v) for k, v in n.get("attributes", {}).items()},
            )
            for n in data["nodes"]
        },
    )


def _graph(path: GraphPath) -> dict[str, Any]:
    return {"graph": [list(level) for level in path]} if path else {}


def _path(entry: Mapping[str, Any]) -> GraphPath:
    return tuple((str(node), str(attribute)) for node, attribute in entry.get("graph", ()))


def _shape(shape: Any) -> tuple[int | str | None, ...] | None:
    return None if shape is None else tuple(shape)


def _value(name: str, value: ValueFacts) -> dict[str, Any]:
    return {"name": name, "dtype": value.dtype, "shape": None if value.shape is None else list(value.shape)}


def _tensor(key: TensorKey, tensor: TensorFacts) -> dict[str, Any]:
    out: dict[str, Any] = {"name": key.name, **_graph(key.graph)}
    if key.attribute:
        out["attribute"] = key.attribute
    out |= {"kind": tensor.kind, "dtype": tensor.dtype, "shape": list(tensor.shape), "sha256": tensor.sha256}
    if tensor.stats is not None:
        out["stats"] = tensor.stats
    if tensor.location is not None:
        out["location"] = tensor.location
    if tensor.values is not None:
        out["values"] = list(tensor.values)
    return out


def _list(node: NodeKey, attribute: str, found: ListFacts) -> dict[str, Any]:
    return {
        "node": node.key,
        **_graph(node.graph),
        "attribute": attribute,
        "op_type": found.op_type,
        "dtype": found.dtype,
        "length": found.length,
        "sha256": found.sha256,
    }


def _node(key: NodeKey, node: NodeFacts) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key.key, **_graph(key.graph), "op_type": node.op_type}
    if node.name != key.key:
        out["name"] = node.name
    if node.domain:
        out["domain"] = node.domain
    out |= {"inputs": list(node.inputs), "outputs": list(node.outputs)}
    if node.attributes:
        out["attributes"] = dict(node.attributes)
    return out
