"""What the diff knows about one model: per tensor, per list attribute, per node, and the header.

``facts(model)`` reads a model into a ``ModelFacts``: small records keyed as in ``walk``. With
``digests=True`` every tensor and list attribute gets its sha256 and (floats) its statistics;
that is what the manifest stores. Without, the records keep a reference to the protobuf instead,
and the diff compares the values themselves. Nothing here copies a weight.

Node attributes other than weights are kept as short text: the value itself when its text is at
most ``SHORT`` characters (``"pads": "[0, 0, 1, 1]"``), else ``"sha256:<16 hex>"`` of the text.
Tensor and graph attributes are left out (tensors are compared as tensors, subgraphs node by node),
and so are the list weights (compared as list attributes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from monitor.modeldiff import values
from monitor.modeldiff.load import LoadedModel
from monitor.modeldiff.walk import GraphPath, NodeKey, TensorKey, is_list_weight, keyed_nodes, list_attributes, tensors

SHORT = 64
ListKey = tuple[NodeKey, str]
QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
QPARAM_VALUES = 4096  # a scale or zero point up to this many elements keeps its values (manifest too)
Role = tuple[str, str | None]  # (scale | zero_point | quantized, the scale a quantized tensor is read under)


@dataclass(frozen=True)
class TensorFacts:
    """One tensor value: its kind (initializer, constant, attribute), type, and digest or protobuf."""

    kind: str
    dtype: str
    shape: tuple[int, ...]
    sha256: str | None = None
    stats: dict[str, float] | None = None
    location: str | None = None
    proto: onnx.TensorProto | None = field(default=None, compare=False, repr=False)
    values: tuple[float, ...] | None = field(default=None, compare=False, repr=False)  # scales and zero points


@dataclass(frozen=True)
class ListFacts:
    """One list attribute holding weights (``coefficients``, ``nodes_values``, long int lists)."""

    op_type: str
    dtype: str
    length: int
    sha256: str | None = None
    array: np.ndarray[Any, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class NodeFacts:
    """One node: what it is, what it reads and writes, and its non-weight attributes as short text."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, str]


@dataclass(frozen=True)
class ValueFacts:
    """A graph input or output: element type and shape (dims as ints, symbols or None)."""

    dtype: str
    shape: tuple[int | str | None, ...] | None


@dataclass(frozen=True)
class ModelFacts:
    """Everything the diff compares, for one model."""

    ir_version: int
    producer: str
    opsets: dict[str, int]
    inputs: dict[str, ValueFacts]
    outputs: dict[str, ValueFacts]
    tensors: dict[TensorKey, TensorFacts]
    lists: dict[ListKey, ListFacts]
    nodes: dict[NodeKey, NodeFacts]


def facts(model: LoadedModel, *, digests: bool) -> ModelFacts:
    """The facts of ``model``; with ``digests``, hashes and statistics instead of protobuf references."""
    proto = model.proto
    graph = proto.graph
    found_tensors: dict[TensorKey, TensorFacts] = {}
    keyed = list(keyed_nodes(graph))
    roles = parameter_names((key.graph, node.op_type, tuple(node.input)) for key, node in keyed)
    for key, kind, tensor in tensors(graph):
        found = tensor_facts(tensor, kind, model.external.get(key), digests=digests)
        role = roles.get((key.graph, key.name))
        if digests and not key.attribute and role and role[0] != "quantized" and _small(tensor):
            found = dataclasses.replace(found, values=tuple(float(v) for v in values.as_array(tensor)))
        found_tensors[key] = found
    found_lists: dict[ListKey, ListFacts] = {}
    for node_key, op_type, _node, attr in list_attributes(graph):
        array = list_array(attr)
        found_lists[(node_key, attr.name)] = ListFacts(
            op_type,
            str(array.dtype),
            int(array.size),
            sha256=values.list_digest(array) if digests else None,
            array=None if digests else array,
        )
    nodes = {
        key: NodeFacts(
            node.name,
            node.op_type,
            node.domain,
            tuple(node.input),
            tuple(node.output),
            {attr.name: text for attr in node.attribute if (text := attribute_text(attr)) is not None},
        )
        for key, node in keyed
    }
    return ModelFacts(
        ir_version=int(proto.ir_version),
        producer=f"{proto.producer_name} {proto.producer_version}".strip(),
        opsets={o.domain or "ai.onnx": int(o.version) for o in proto.opset_import},
        inputs={v.name: value_facts(v) for v in graph.input},
        outputs={v.name: value_facts(v) for v in graph.output},
        tensors=found_tensors,
        lists=found_lists,
        nodes=nodes,
    )


def parameter_names(nodes: Iterable[tuple[GraphPath, str, Sequence[str]]]) -> dict[tuple[GraphPath, str], Role]:
    """Each Q/DQ parameter's role by (graph, name), from (graph, op type, inputs) of every node."""
    roles: dict[tuple[GraphPath, str], Role] = {}
    for graph, op_type, inputs in nodes:
        if op_type not in QDQ:
            continue
        scale = inputs[1] if len(inputs) > 1 and inputs[1] else None
        if scale:
            roles[(graph, scale)] = ("scale", None)
        if len(inputs) > 2 and inputs[2]:
            roles[(graph, inputs[2])] = ("zero_point", None)
        if op_type == "DequantizeLinear" and inputs and inputs[0]:
            roles.setdefault((graph, inputs[0]), ("quantized", scale))
    return roles


def _small(tensor: onnx.TensorProto) -> bool:
    return values.is_numeric(tensor.data_type) and int(np.prod(tensor.dims, dtype=np.int64)) <= QPARAM_VALUES


def tensor_facts(tensor: onnx.TensorProto, kind: str, location: str | None, *, digests: bool) -> TensorFacts:
    dtype = values.dtype_name(tensor.data_type)
    shape = tuple(int(d) for d in tensor.dims)
    if not digests:
        return TensorFacts(kind, dtype, shape, location=location, proto=tensor)
    stats = values.stats(values.as_array(tensor)) if values.is_float(tensor.data_type) else None
    return TensorFacts(kind, dtype, shape, values.digest(tensor), stats, location)


def list_array(attr: onnx.AttributeProto) -> np.ndarray[Any, Any]:
    """A list attribute's values: float32 for FLOATS (what ONNX stores), int64 for INTS."""
    if attr.type == onnx.AttributeProto.FLOATS:
        return np.asarray(attr.floats, dtype=np.float32)
    return np.asarray(attr.ints, dtype=np.int64)


def attribute_text(attr: onnx.AttributeProto) -> str | None:
    """The attribute as short text (or a digest of it); None for tensors, graphs and list weights."""
    if attr.type in (onnx.AttributeProto.TENSOR, onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return None
    if is_list_weight(attr):
        return None
    if attr.type in (onnx.AttributeProto.TENSORS, onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TYPE_PROTO):
        text: str = attr.SerializeToString().hex()
    else:
        text = json.dumps(_plain(helper.get_attribute_value(attr)), ensure_ascii=False)
    if len(text) <= SHORT:
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _plain(value: Any) -> Any:
    """The attribute value as JSON-able Python (bytes decoded, non-finite floats spelled out)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return str(value)
    return value


def value_facts(value: onnx.ValueInfoProto) -> ValueFacts:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        return ValueFacts(str(kind or "undefined"), None)
    tensor_type = value.type.tensor_type
    shape: tuple[int | str | None, ...] | None = None
    if tensor_type.HasField("shape"):
        shape = tuple(
            int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in tensor_type.shape.dim
        )
    return ValueFacts(values.dtype_name(tensor_type.elem_type), shape)
