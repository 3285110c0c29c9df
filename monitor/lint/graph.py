"""The model as the lint rules read it: nodes (subgraphs included), constants, shapes, opsets.

Read once per lint with the ``onnx`` package only (no runtime): a rule looks up a node's
constant inputs (initializers and ``Constant`` nodes), the node producing or consuming a
tensor, the inferred shape of a tensor (``onnx.shape_inference``, which keeps symbolic dims
such as ``batch``) and the opset of the node's domain. Node names are the model's own; an
unnamed node is ``<op_type>#<index>``, and a node inside an ``If``/``Loop``/``Scan`` body
carries the path of its parent (``Loop_3/body/Add#0``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Node:
    """One node with the name lint reports it by."""

    proto: onnx.NodeProto
    name: str

    @property
    def op_type(self) -> str:
        return str(self.proto.op_type)

    @property
    def domain(self) -> str:
        return str(self.proto.domain)

    def attribute(self, name: str, default: Any = None) -> Any:
        """The attribute's Python value (bytes decoded), ``default`` when absent."""
        for attr in self.proto.attribute:
            if attr.name == name:
                value = onnx.helper.get_attribute_value(attr)
                return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        return default

    def input(self, index: int) -> str:
        """The name of input ``index``; ``""`` when the input is absent or omitted."""
        return str(self.proto.input[index]) if index < len(self.proto.input) else ""


@dataclass
class LintGraph:
    """A loaded model prepared for the rules; built by ``read``."""

    model: onnx.ModelProto
    nodes: list[Node] = field(default_factory=list)
    producers: dict[str, Node] = field(default_factory=dict)
    consumers: dict[str, list[tuple[Node, int]]] = field(default_factory=dict)
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    constant_nodes: dict[str, onnx.TensorProto] = field(default_factory=dict)
    shapes: dict[str, tuple[int | str, ...]] = field(default_factory=dict)
    base_dir: str = ""  # where external data lives: tensors are read one at a time, when a rule asks

    @property
    def opset(self) -> int:
        """The default-domain (ai.onnx) opset version the model imports (1 when it names none)."""
        return self.opset_of("")

    def opset_of(self, domain: str) -> int:
        domains = DEFAULT_DOMAINS if domain in DEFAULT_DOMAINS else (domain,)
        versions = [int(o.version) for o in self.model.opset_import if o.domain in domains]
        return max(versions) if versions else 1

    def constant(self, name: str) -> np.ndarray[Any, Any] | None:
        """The value of tensor ``name`` when it is an initializer or a ``Constant`` output, else None."""
        tensor = self.initializers.get(name) or self.constant_nodes.get(name)
        if tensor is None:
            return None
        external = tensor.data_location == onnx.TensorProto.EXTERNAL and not _has_data(tensor)
        if external and not self.base_dir:
            return None
        try:
            return np.asarray(numpy_helper.to_array(tensor, base_dir=self.base_dir))
        except Exception:  # an external file that is short or missing, an exotic type
            return None

    def is_graph_input(self, name: str) -> bool:
        return any(v.name == name for v in self.model.graph.input) and name not in self.initializers


def read(model: onnx.ModelProto, *, infer_shapes: bool = True, base_dir: str = "") -> LintGraph:
    """Index ``model`` for the rules; shape inference is best effort (a model it rejects keeps no shapes).

    ``base_dir``: the model file's folder, where externally stored tensors are read from (one at a
    time, so a model with 10 GB of external weights never sits in memory whole).
    """
    graph = LintGraph(model=model, base_dir=base_dir)
    for node in _walk(model.graph, ""):
        graph.nodes.append(node)
        for output in node.proto.output:
            if output:
                graph.producers[output] = node
        for index, name in enumerate(node.proto.input):
            if name:
                graph.consumers.setdefault(name, []).append((node, index))
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS and node.proto.output:
            value = node.attribute("value")
            if isinstance(value, onnx.TensorProto):
                graph.constant_nodes[node.proto.output[0]] = value
    for graph_proto in _graphs(model.graph):
        for init in graph_proto.initializer:
            graph.initializers[init.name] = init
    graph.shapes = _shapes(model) if infer_shapes else {}
    return graph


def external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every initializer and ``Constant`` value (subgraphs included) whose data lives in another file."""
    for graph in _graphs(model.graph):
        candidates = list(graph.initializer) + [
            a.t for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.TENSOR
        ]
        yield from (t for t in candidates if t.data_location == onnx.TensorProto.EXTERNAL)


def _walk(graph: onnx.GraphProto, prefix: str) -> Iterator[Node]:
    for index, proto in enumerate(graph.node):
        name = proto.name or f"{proto.op_type}#{index}"
        yield Node(proto, f"{prefix}{name}")
        for attr in proto.attribute:
            for sub_name, sub in _subgraphs(attr):
                yield from _walk(sub, f"{prefix}{name}/{sub_name}/")


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for proto in graph.node:
        for attr in proto.attribute:
            for _name, sub in _subgraphs(attr):
                yield from _graphs(sub)


def _subgraphs(attr: onnx.AttributeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    if attr.type == onnx.AttributeProto.GRAPH:
        yield attr.name, attr.g
    elif attr.type == onnx.AttributeProto.GRAPHS:
        for i, sub in enumerate(attr.graphs):
            yield f"{attr.name}[{i}]", sub


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int | str, ...]]:
    """Tensor name -> inferred shape (ints, dim names, ``"?"``); empty when inference refuses the model."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # an op inference does not know, a model over 2 GiB, a custom domain
        inferred = model
    found: dict[str, tuple[int | str, ...]] = {}
    values = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    for value in values:
        if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
            continue
        dims: list[int | str] = []
        for dim in value.type.tensor_type.shape.dim:
            dims.append(int(dim.dim_value) if dim.HasField("dim_value") else (dim.dim_param or "?"))
        found[value.name] = tuple(dims)
    return found


def _has_data(tensor: onnx.TensorProto) -> bool:
    return bool(tensor.raw_data) or any(
        len(getattr(tensor, f)) for f in ("float_data", "int32_data", "int64_data", "double_data")
    )
