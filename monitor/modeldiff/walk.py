"""Where things are in an ONNX graph: subgraph paths, node keys, tensors, list attributes, consumers.

A model is a tree of graphs: an ``If`` node holds ``then_branch`` and ``else_branch``, a ``Loop``
or ``Scan`` its ``body``. Everything the diff names carries its **graph path**, the tuple of
``(node key, attribute name)`` pairs leading from the main graph to the graph it lives in (empty
for the main graph), so a weight inside a branch is never confused with one of the same name
elsewhere. Paths are tuples, not joined strings: real names contain ``/``, ``:`` and ``.``.

**Node keys (how nodes of two models are matched).** Within one graph, a node whose name is
non-empty and unique in that graph is keyed by its name. Any other node (unnamed, or sharing its
name with another node) is keyed structurally as ``"<op_type>#<k>"``: the k-th such node of that
op type in graph order. Exporters (PyTorch, tf2onnx, skl2onnx) name every node uniquely, and
converters (fp16, quantization) keep the names of the nodes they leave alone, so matching by name
survives inserted Casts and Q/DQ pairs; the structural key is the fallback for hand-made graphs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import onnx

GraphPath = tuple[tuple[str, str], ...]
"""(node key, attribute name) per nesting level, from the main graph down; ``()`` is the main graph."""

# Long integer lists are weights (tree node ids, feature ids), short ones are structure (pads, perm).
LIST_WEIGHT_MIN_INTS = 17


@dataclass(frozen=True, order=True)
class TensorKey:
    """A tensor value of the model: an initializer, a ``Constant``'s value or a tensor attribute.

    ``name`` is the tensor's name for initializers and ``Constant`` values (the name its consumers
    read); for a tensor attribute of any other node it is the node's key and ``attribute`` names the
    attribute.
    """

    graph: GraphPath
    name: str
    attribute: str = ""


@dataclass(frozen=True, order=True)
class NodeKey:
    """A node, by graph path and node key (see the module docstring for how keys are chosen)."""

    graph: GraphPath
    key: str


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(attribute name, graph) for every subgraph a node holds (If branches, Loop and Scan bodies)."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for index, graph in enumerate(attr.graphs):
                yield f"{attr.name}[{index}]", graph


def node_keys(graph: onnx.GraphProto) -> list[str]:
    """The matching key of each node of ``graph``, in graph order."""
    counts = Counter(node.name for node in graph.node if node.name)
    ordinal: Counter[str] = Counter()
    keys = []
    for node in graph.node:
        if node.name and counts[node.name] == 1:
            keys.append(node.name)
        else:
            keys.append(f"{node.op_type}#{ordinal[node.op_type]}")
            ordinal[node.op_type] += 1
    return keys


def graphs(graph: onnx.GraphProto, path: GraphPath = ()) -> Iterator[tuple[GraphPath, onnx.GraphProto]]:
    """``graph`` and every graph nested in it, each with its path, parents before children."""
    yield path, graph
    for key, node in zip(node_keys(graph), graph.node, strict=True):
        for attribute, sub in subgraphs(node):
            yield from graphs(sub, (*path, (key, attribute)))


def keyed_nodes(graph: onnx.GraphProto, path: GraphPath = ()) -> Iterator[tuple[NodeKey, onnx.NodeProto]]:
    """Every node of the tree of graphs with its key."""
    for sub_path, sub in graphs(graph, path):
        for key, node in zip(node_keys(sub), sub.node, strict=True):
            yield NodeKey(sub_path, key), node


def tensors(graph: onnx.GraphProto) -> Iterator[tuple[TensorKey, str, onnx.TensorProto]]:
    """(key, kind, tensor) for every tensor value: kind is initializer, constant or attribute.

    A ``Constant`` holding a ``value`` tensor is keyed by its output name (what consumers read);
    its other forms (``value_float``, ``value_ints``, …) are attributes, compared with the node.
    """
    for path, sub in graphs(graph):
        for tensor in sub.initializer:
            yield TensorKey(path, tensor.name), "initializer", tensor
        for key, node in zip(node_keys(sub), sub.node, strict=True):
            for attr in node.attribute:
                if attr.type != onnx.AttributeProto.TENSOR:
                    continue
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and attr.name == "value":
                    yield TensorKey(path, node.output[0] if node.output else key), "constant", attr.t
                else:
                    yield TensorKey(path, key, attr.name), "attribute", attr.t


def is_list_weight(attr: onnx.AttributeProto) -> bool:
    """A float list of any length, or an integer list long enough to be data rather than structure."""
    if attr.type == onnx.AttributeProto.FLOATS:
        return True
    return attr.type == onnx.AttributeProto.INTS and len(attr.ints) >= LIST_WEIGHT_MIN_INTS


def list_attributes(graph: onnx.GraphProto) -> Iterator[tuple[NodeKey, str, onnx.NodeProto, onnx.AttributeProto]]:
    """(node key, op type, node, attribute) for every list attribute that holds weights."""
    for key, node in keyed_nodes(graph):
        for attr in node.attribute:
            if is_list_weight(attr):
                yield key, node.op_type, node, attr


@dataclass(frozen=True)
class Consumer:
    """A node that reads a tensor."""

    node: NodeKey
    op_type: str


def consumers(graph: onnx.GraphProto) -> dict[tuple[GraphPath, str], list[Consumer]]:
    """(graph path, tensor name) -> the nodes that read it, in graph order.

    A node inside a subgraph that reads a name its own graph does not define reads it from an
    enclosing graph (ONNX's outer-scope rule); it is listed as a consumer of the nearest enclosing
    graph that defines the name.
    """
    found: dict[tuple[GraphPath, str], list[Consumer]] = {}
    _collect(graph, (), [], found)
    return found


def _defined(graph: onnx.GraphProto) -> set[str]:
    names = {t.name for t in graph.initializer} | {v.name for v in graph.input}
    names |= {out for node in graph.node for out in node.output if out}
    return names


def _collect(
    graph: onnx.GraphProto,
    path: GraphPath,
    scopes: list[tuple[GraphPath, set[str]]],
    found: dict[tuple[GraphPath, str], list[Consumer]],
) -> None:
    scopes = [*scopes, (path, _defined(graph))]
    for key, node in zip(node_keys(graph), graph.node, strict=True):
        for name in dict.fromkeys(name for name in node.input if name):
            owner = next((p for p, names in reversed(scopes) if name in names), path)
            found.setdefault((owner, name), []).append(Consumer(NodeKey(path, key), node.op_type))
        for attribute, sub in subgraphs(node):
            _collect(sub, (*path, (key, attribute)), scopes, found)
