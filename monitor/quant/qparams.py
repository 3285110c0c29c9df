"""The quantization parameters of a QDQ model: each ``QuantizeLinear`` with its scale, zero point and code range.

A ``QuantizeLinear`` node computes ``q = saturate(round(x / scale) + zero_point)`` (round half to
even, ONNX's rule) into the integer type of its zero point (``uint8`` when there is none, or its
``output_dtype`` attribute from opset 21). The codes it can write are that type's range:
``[-128, 127]`` for int8, ``[0, 255]`` for uint8, and so on. A scale of one element quantizes the
whole tensor; a 1-D scale quantizes per channel along ``axis``. Only scales and zero points that
are initializers or ``Constant`` values are read (what quantizers write); a node whose parameters
are computed at run time is listed in ``skipped`` with why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

# ONNX element type -> the codes its integers can hold
_CODE_RANGES: dict[int, tuple[int, int]] = {
    onnx.TensorProto.UINT8: (0, 255),
    onnx.TensorProto.INT8: (-128, 127),
    onnx.TensorProto.UINT16: (0, 65535),
    onnx.TensorProto.INT16: (-32768, 32767),
    onnx.TensorProto.UINT4: (0, 15),
    onnx.TensorProto.INT4: (-8, 7),
}


@dataclass(frozen=True)
class QuantizedTensor:
    """One ``QuantizeLinear`` input: the float tensor it reads and how it maps it to codes."""

    node: str
    tensor: str
    scale: np.ndarray[Any, Any]  # float64, one element or one per channel
    zero_point: np.ndarray[Any, Any]  # int64, the scale's shape
    axis: int
    qmin: int
    qmax: int
    code_type: str

    @property
    def codes(self) -> int:
        return self.qmax - self.qmin + 1

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1


@dataclass(frozen=True)
class QuantizeNodes:
    """Every ``QuantizeLinear`` of a model's main graph that can be read, and those that cannot."""

    tensors: tuple[QuantizedTensor, ...]
    skipped: dict[str, str]


def quantize_nodes(model: onnx.ModelProto) -> QuantizeNodes:
    """The model's ``QuantizeLinear`` nodes (main graph, in graph order) with their parameters."""
    constants = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a for a in node.attribute if a.name == "value" and a.HasField("t")), None)
            if value is not None:
                constants[node.output[0]] = value.t
    found: list[QuantizedTensor] = []
    skipped: dict[str, str] = {}
    for index, node in enumerate(model.graph.node):
        if node.op_type != "QuantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        name = node.name or f"QuantizeLinear_{index}"
        read = _read(node, name, constants)
        if isinstance(read, str):
            skipped[name] = read
        else:
            found.append(read)
    return QuantizeNodes(tuple(found), skipped)


def _read(node: onnx.NodeProto, name: str, constants: dict[str, onnx.TensorProto]) -> QuantizedTensor | str:
    if len(node.input) < 2 or node.input[1] not in constants:
        return "its scale is not an initializer or a Constant"
    zero_name = node.input[2] if len(node.input) > 2 else ""
    if zero_name and zero_name not in constants:
        return "its zero point is not an initializer or a Constant"
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if int(attributes.get("block_size", 0) or 0):
        return "blocked quantization (block_size) is not read"
    scale = numpy_helper.to_array(constants[node.input[1]]).astype(np.float64)
    if zero_name:
        zero_proto = constants[zero_name]
        code_type = zero_proto.data_type
        zero = numpy_helper.to_array(zero_proto).astype(np.int64)
    else:
        code_type = int(attributes.get("output_dtype", 0) or onnx.TensorProto.UINT8)
        zero = np.zeros(scale.shape, dtype=np.int64)
    if code_type not in _CODE_RANGES:
        return f"codes of type {helper.tensor_dtype_to_np_dtype(code_type)} are not read"
    if scale.ndim > 1 or zero.shape != scale.shape:
        return f"scale {list(scale.shape)} and zero point {list(zero.shape)} are not one per tensor or per channel"
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        return "its scale is not a positive finite number"
    qmin, qmax = _CODE_RANGES[code_type]
    return QuantizedTensor(
        node=name,
        tensor=node.input[0],
        scale=scale.reshape(-1),
        zero_point=zero.reshape(-1),
        axis=int(attributes.get("axis", 1)),
        qmin=qmin,
        qmax=qmax,
        code_type=str(helper.tensor_dtype_to_np_dtype(code_type)),
    )


def codes_of(
    quantized: QuantizedTensor, values: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``round(x / scale) + zero_point`` in int64, *before* saturation (so a clipped value lies outside the range),
    and each value's zero point. Non-finite ``x`` are left out (a NaN has no code); both results are flat.
    """
    x = np.asarray(values, dtype=np.float64)
    scale, zero = quantized.scale, quantized.zero_point
    if quantized.per_channel:
        axis = quantized.axis % x.ndim
        shape = [1] * x.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
        scale, zero = np.broadcast_to(scale, x.shape), np.broadcast_to(zero, x.shape)
    finite = np.isfinite(x)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.rint(x / scale)  # an overflow to ±inf is clipped below: far out of range either way
    scaled = np.clip(np.where(finite, scaled, 0.0), -(2.0**62), 2.0**62)
    codes = scaled.astype(np.int64) + zero
    return np.asarray(codes[finite]), np.asarray(np.broadcast_to(zero, x.shape)[finite])
