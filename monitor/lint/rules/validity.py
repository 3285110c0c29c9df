"""``model_invalid``: a model ONNX Runtime refuses to load, said as a lint error.

Without it ``lint`` would say "no export hazards found" on models no session can be built from. Three findings, each
an ``error`` on the model (the runtime's own refusal, found statically):

- a tensor whose stored data is short of its dims (``files.tensor_storage``: ORT's "raw_data size
  does not match expected size");
- a cycle: nodes that (through each other) consume their own outputs. An unsorted but acyclic graph
  is not one: ONNX Runtime sorts it, where ``onnx.checker`` would refuse it;
- a shape strict shape inference refuses (incompatible dims, an axis out of bounds): what ORT's own
  inference rejects when the session is built. Operators of domains ``onnx`` does not know are left
  to the runtime (strict inference skips them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import onnx

from monitor.files import tensor_storage
from monitor.lint.graph import LintGraph
from monitor.lint.hazards import Hazard, hazard

_PROTOBUF_LIMIT = 2**31 - 1  # strict inference serializes the model: past 2 GiB it cannot


def check(graph: LintGraph) -> Iterable[Hazard]:
    model = graph.model
    for problem in tensor_storage.problems(model):
        yield _invalid(f"{problem} (ONNX Runtime refuses the model)")
    for path, nodes in _cycles(model.graph, ""):
        where = f" in {path}" if path else ""
        names = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
        yield _invalid(f"the graph{where} has a cycle: nodes {names} consume their own outputs")
    if model.ByteSize() <= _PROTOBUF_LIMIT:
        try:
            onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as exc:  # InferenceError: what the runtime's own shape inference rejects too
            refused = _refusals(" ".join(str(exc).split()))
            if refused:
                yield _invalid(f"strict shape inference refuses the model: {'; '.join(refused)[:500]}")


def _refusals(message: str) -> list[str]:
    """The per-node errors of an ``InferenceError``, less "expected to have type but instead is null".

    That one follows an operator whose output type ``onnx`` cannot infer (ai.onnx.ml converters'
    models, which ONNX Runtime loads): a gap in ``onnx``'s inference, not a refusal.
    """
    found = [
        f"{node} ({op_type}): {text.strip()}"
        for op_type, node, text in _NODE_ERROR.findall(message)
        if "instead is null" not in text
    ]
    return found[:5]


_NODE_ERROR = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\): \[\w+\] ([^(]*)")


def _invalid(detail: str) -> Hazard:
    return hazard("model_invalid", "model", "ModelProto", detail)


def _cycles(graph: onnx.GraphProto, path: str) -> Iterator[tuple[str, list[str]]]:
    """Per graph (subgraphs too), the nodes left when every node whose inputs are ready has run (Kahn)."""
    producer = {name: i for i, node in enumerate(graph.node) for name in node.output if name}
    needs = [{producer[name] for name in _consumed(node) if name in producer} for node in graph.node]
    users: dict[int, list[int]] = {}
    for index, wanted in enumerate(needs):
        for other in wanted:
            users.setdefault(other, []).append(index)
    waiting = [len(wanted) for wanted in needs]
    ready = [i for i, count in enumerate(waiting) if count == 0]
    while ready:
        done = ready.pop()
        for user in users.get(done, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    stuck = [_name(graph.node[i], i) for i, count in enumerate(waiting) if count > 0]
    if stuck:
        yield path, stuck
    for index, node in enumerate(graph.node):
        for attribute in node.attribute:
            where = f"{path}/{_name(node, index)}.{attribute.name}".lstrip("/")
            for sub in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs:
                yield from _cycles(sub, where)


def _consumed(node: onnx.NodeProto) -> set[str]:
    """The node's inputs and the outer names its subgraphs read (ONNX Runtime's implicit inputs)."""
    names = {name for name in node.input if name}
    for attribute in node.attribute:
        for sub in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs:
            for inner in sub.node:
                names |= _consumed(inner)
    return names


def _name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}#{index}"
