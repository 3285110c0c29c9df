"""Comparing the facts of two models into a ``ModelDiff``.

Both sides are ``facts.ModelFacts``. Where both carry protobuf references (two model files), the
values are compared element by element (``values.change``); where the old side carries only
digests (a manifest), a digest mismatch says the tensor changed and the statistics say roughly
how, but ``max_abs_change`` stays None. Tensors and list attributes are visited one at a time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from monitor.modeldiff import quantparams, values
from monitor.modeldiff.facts import ListFacts, ModelFacts, TensorFacts
from monitor.modeldiff.result import IOChange, ListChange, ModelDiff, NodeChange, NodeEntry, TensorChange
from monitor.modeldiff.summary import summarize
from monitor.modeldiff.walk import Consumer, GraphPath, NodeKey, TensorKey

ConsumersOf = Callable[[TensorKey], tuple[Consumer, ...]]
_STATUS_ORDER = {"changed": 0, "added": 1, "removed": 2}


def compare(
    old: ModelFacts,
    new: ModelFacts,
    *,
    old_consumers: ConsumersOf,
    new_consumers: ConsumersOf,
    names: tuple[str, str],
    exact: bool,
) -> ModelDiff:
    """The diff from ``old`` to ``new``; ``*_consumers`` name the readers of a tensor in each model.

    ``exact`` says whether both sides carry values (two models) rather than digests (a manifest).
    """
    tensors = _tensor_changes(old, new, old_consumers, new_consumers)
    lists = _list_changes(old.lists, new.lists)
    added = tuple(NodeEntry(k, n.name, n.op_type) for k, n in new.nodes.items() if k not in old.nodes)
    removed = tuple(NodeEntry(k, n.name, n.op_type) for k, n in old.nodes.items() if k not in new.nodes)
    changed = tuple(c for k in new.nodes if k in old.nodes and (c := _node_change(k, old, new)) is not None)
    header = _header(old, new)
    graph_io = _io("input", old.inputs, new.inputs) + _io("output", old.outputs, new.outputs)
    old_files = {t.location for t in old.tensors.values() if t.location is not None}
    new_files = {t.location for t in new.tensors.values() if t.location is not None}
    external = {"added": tuple(sorted(new_files - old_files)), "removed": tuple(sorted(old_files - new_files))}
    ordered = tuple(sorted(tensors, key=_severity))
    diff = ModelDiff(
        old=names[0],
        new=names[1],
        exact=exact,
        summary=(),
        header=header,
        graph_io=graph_io,
        changed_tensors=ordered,
        changed_attributes=lists,
        nodes_added=added,
        nodes_removed=removed,
        nodes_changed=changed,
        external_data=external,
        quantization=quantparams.changes(ordered, old, new),
    )
    return dataclasses.replace(diff, summary=summarize(diff, new))


def _severity(change: TensorChange) -> tuple[int, float]:
    size = change.max_rel_change if change.max_rel_change is not None else (change.max_abs_change or 0.0)
    return _STATUS_ORDER[change.status], -size


def _tensor_changes(
    old: ModelFacts, new: ModelFacts, old_consumers: ConsumersOf, new_consumers: ConsumersOf
) -> list[TensorChange]:
    found: list[TensorChange] = []
    for key, after in new.tensors.items():
        before = old.tensors.get(key)
        if before is None:
            found.append(_one_sided(key, after, "added", new_consumers(key)))
        elif (change := _tensor_change(key, before, after, new_consumers)) is not None:
            found.append(change)
    for key, before in old.tensors.items():
        if key not in new.tensors:
            found.append(_one_sided(key, before, "removed", old_consumers(key)))
    return found


def _one_sided(key: TensorKey, side: TensorFacts, status: str, consumers: tuple[Consumer, ...]) -> TensorChange:
    if status == "added":
        return TensorChange(key, side.kind, status, None, side.dtype, None, side.shape, consumers)
    return TensorChange(key, side.kind, status, side.dtype, None, side.shape, None, consumers)


def _tensor_change(
    key: TensorKey, before: TensorFacts, after: TensorFacts, consumers: ConsumersOf
) -> TensorChange | None:
    same_type = before.dtype == after.dtype and before.shape == after.shape
    changed_elements = max_abs = max_rel = None
    old_stats, new_stats = before.stats, after.stats
    if before.proto is not None and after.proto is not None:
        a, b = before.proto, after.proto
        if same_type and a.HasField("raw_data") and b.HasField("raw_data") and a.raw_data == b.raw_data:
            return None
        if before.shape == after.shape and values.is_numeric(a.data_type) and values.is_numeric(b.data_type):
            old_array, new_array = values.as_array(a), values.as_array(b)
            change = values.change(old_array, new_array)
            if same_type and change.changed == 0:
                return None
            changed_elements, max_abs, max_rel = change.changed, change.max_abs, change.max_rel
            if values.is_float(a.data_type):
                old_stats = values.stats(old_array)
            if values.is_float(b.data_type):
                new_stats = values.stats(new_array)
        elif same_type and values.digest(a) == values.digest(b):
            return None
    else:
        after_digest = after.sha256 if after.sha256 is not None else _digest(after)
        if same_type and before.sha256 == after_digest:
            return None
    return TensorChange(
        key,
        after.kind,
        "changed",
        before.dtype,
        after.dtype,
        before.shape,
        after.shape,
        consumers(key),
        changed_elements,
        max_abs,
        max_rel,
        old_stats,
        new_stats,
    )


def _digest(side: TensorFacts) -> str | None:
    return None if side.proto is None else values.digest(side.proto)


def _list_changes(old: Mapping[Any, ListFacts], new: Mapping[Any, ListFacts]) -> tuple[ListChange, ...]:
    found: list[ListChange] = []
    for (node, attribute), after in new.items():
        before = old.get((node, attribute))
        if before is None:
            found.append(ListChange(node, after.op_type, attribute, "added", None, after.length))
            continue
        changed_elements = max_abs = None
        if before.array is not None and after.array is not None:
            if before.length == after.length:
                change = values.change(before.array, after.array)
                if change.changed == 0 and before.dtype == after.dtype:
                    continue
                changed_elements, max_abs = change.changed, change.max_abs
        else:
            after_digest = after.sha256 or (None if after.array is None else values.list_digest(after.array))
            if before.sha256 == after_digest and before.length == after.length:
                continue
        found.append(
            ListChange(
                node, after.op_type, attribute, "changed", before.length, after.length, changed_elements, max_abs
            )
        )
    for (node, attribute), before in old.items():
        if (node, attribute) not in new:
            found.append(ListChange(node, before.op_type, attribute, "removed", before.length, None))
    found.sort(key=lambda c: (_STATUS_ORDER[c.status], -(c.max_abs_change or 0.0)))
    return tuple(found)


def _node_change(key: NodeKey, old: ModelFacts, new: ModelFacts) -> NodeChange | None:
    before, after = old.nodes[key], new.nodes[key]
    changes: dict[str, tuple[Any, Any]] = {}
    if (before.domain, before.op_type) != (after.domain, after.op_type):
        changes["op_type"] = (_op(before.domain, before.op_type), _op(after.domain, after.op_type))
    if before.inputs != after.inputs:
        changes["inputs"] = (list(before.inputs), list(after.inputs))
    if before.outputs != after.outputs:
        changes["outputs"] = (list(before.outputs), list(after.outputs))
    for name in dict.fromkeys([*before.attributes, *after.attributes]):
        if before.attributes.get(name) != after.attributes.get(name):
            changes[f"attribute {name}"] = (before.attributes.get(name), after.attributes.get(name))
    return NodeChange(key, after.op_type, changes) if changes else None


def _op(domain: str, op_type: str) -> str:
    return f"{domain}::{op_type}" if domain not in ("", "ai.onnx") else op_type


def _header(old: ModelFacts, new: ModelFacts) -> dict[str, tuple[Any, Any]]:
    header: dict[str, tuple[Any, Any]] = {}
    if old.ir_version != new.ir_version:
        header["ir_version"] = (old.ir_version, new.ir_version)
    if old.producer != new.producer:
        header["producer"] = (old.producer, new.producer)
    for domain in sorted(set(old.opsets) | set(new.opsets)):
        if old.opsets.get(domain) != new.opsets.get(domain):
            header[f"opset {domain}"] = (old.opsets.get(domain), new.opsets.get(domain))
    return header


def _io(which: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[IOChange, ...]:
    found = []
    for name, after in new.items():
        before = old.get(name)
        if before is None:
            found.append(IOChange(which, name, "added", None, (after.dtype, after.shape)))
        elif before != after:
            found.append(IOChange(which, name, "changed", (before.dtype, before.shape), (after.dtype, after.shape)))
    found += [
        IOChange(which, name, "removed", (before.dtype, before.shape), None)
        for name, before in old.items()
        if name not in new
    ]
    return tuple(found)


def path_prefix(inner: GraphPath, outer: GraphPath) -> bool:
    """True when ``inner`` is ``outer`` or a graph nested in it."""
    return inner[: len(outer)] == outer
