"""Whether each tensor stored in a model file holds as many values as its dims declare.

ONNX Runtime refuses a model whose initializer is short ("raw_data size (2040 bytes) does not match
expected size from shape and data type (2048 bytes)"), but ``onnx.numpy_helper.to_array`` raises a
bare ``ValueError: cannot reshape`` on it, deep in whatever reads the values (the model diff, the
linter). ``problems(model)`` finds every such tensor first, once, with a line naming it, so each
reader turns it into a ``ModelError`` (``modeldiff``) or a lint hazard (issue 30, B5).

Checked: initializers, ``Constant`` values and tensor attributes, in subgraphs too, whose data is in
the file (external data is checked once loaded). Packed 4-bit types hold two values a byte.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import onnx
from onnx import helper

_FOUR_BITS = frozenset(
    getattr(onnx.TensorProto, name) for name in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(onnx.TensorProto, name)
)
_PAIRS = frozenset({onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128})  # two typed values an element


def problems(model: onnx.ModelProto, *, most: int = 5) -> list[str]:
    """One line per tensor (up to ``most``) whose stored values do not fill its dims."""
    found = []
    for where, tensor in _tensors(model.graph, ""):
        problem = problem_of(tensor)
        if problem:
            found.append(f"{where} {tensor.name!r}: {problem}")
            if len(found) >= most:
                break
    return found


def problem_of(tensor: onnx.TensorProto) -> str | None:
    """Why ``tensor``'s stored data cannot be its declared shape, or None when it can (or is external)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL and not tensor.HasField("raw_data"):
        return None
    if any(d < 0 for d in tensor.dims):
        return f"negative dims {list(tensor.dims)}"
    count = math.prod(tensor.dims)
    shape = "x".join(str(d) for d in tensor.dims) or "scalar"
    if tensor.data_type == onnx.TensorProto.STRING:
        held = len(tensor.string_data)
        return None if held == count else f"holds {held} strings, its dims ({shape}) declare {count}"
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        field = helper.tensor_dtype_to_field(tensor.data_type)
    except Exception:
        return f"data type {tensor.data_type} is not an ONNX tensor type"
    name = str(onnx.TensorProto.DataType.Name(tensor.data_type)).lower()
    if tensor.HasField("raw_data"):
        expected = (count + 1) // 2 if tensor.data_type in _FOUR_BITS else count * itemsize
        held = len(tensor.raw_data)
        if held == expected:
            return None
        return f"raw_data holds {held} bytes, its dims ({shape}) and type ({name}) need {expected}"
    values = len(getattr(tensor, field))
    expected = (count + 1) // 2 if tensor.data_type in _FOUR_BITS else count * (2 if tensor.data_type in _PAIRS else 1)
    if values == expected:
        return None
    return f"{field} holds {values} values, its dims ({shape}) and type ({name}) need {expected}"


def _tensors(graph: onnx.GraphProto, path: str) -> Iterator[tuple[str, onnx.TensorProto]]:
    prefix = f"{path}/" if path else ""
    for tensor in graph.initializer:
        yield f"{prefix}initializer", tensor
    for index, node in enumerate(graph.node):
        node_name = node.name or f"{node.op_type}#{index}"
        for attribute in node.attribute:
            where = f"{prefix}{node_name}.{attribute.name}"
            if attribute.type == onnx.AttributeProto.TENSOR:
                yield f"tensor {where}", attribute.t
            elif attribute.type == onnx.AttributeProto.TENSORS:
                for tensor in attribute.tensors:
                    yield f"tensor {where}", tensor
            elif attribute.type == onnx.AttributeProto.GRAPH:
                yield from _tensors(attribute.g, where)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _tensors(sub, where)
