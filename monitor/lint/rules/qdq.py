"""QDQ models: pairs no quantized kernel takes, weights quantized at run time, per-tensor weights.

Why: ONNX Runtime turns ``DequantizeLinear -> op -> QuantizeLinear`` groups into integer kernels
for the ops it has selectors for (Conv, MatMul, Add, pooling, data movement, ...). A Q/DQ pair in
front of any other op only adds a rounding step and runs in float, which is rarely what the
quantization tool intended. A ``QuantizeLinear`` whose input is a float initializer quantizes a
weight on every run instead of storing it as int8 beside a ``DequantizeLinear``. A weight with one
scale for the whole tensor, consumed where the op takes a per-channel scale (Conv, ConvTranspose,
Gemm, MatMul weights), usually loses more than per-channel quantization would.
"""

from __future__ import annotations

from collections.abc import Iterator

from monitor.lint.graph import LintGraph, Node
from monitor.lint.hazards import Hazard, hazard

# Ops with a QDQ node-group selector in ONNX Runtime (qdq_selector_action_transformer.cc), or that
# QDQ propagation moves pairs through: a DQ feeding one of these is expected to be fused.
FUSED_BY_RUNTIME = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "MatMul",
        "Gemm",
        "Add",
        "Mul",
        "Concat",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "LeakyRelu",
        "Sigmoid",
        "Softmax",
        "Tanh",
        "Relu",
        "Clip",
        "Gather",
        "GatherElements",
        "Reshape",
        "Transpose",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Expand",
        "Slice",
        "Resize",
        "Pad",
        "Split",
        "Where",
        "ArgMax",
        "InstanceNormalization",
        "Identity",
        "DepthToSpace",
        "SpaceToDepth",
        "QuantizeLinear",
        "MatMulInteger",
        "ConvInteger",
    }
)
# op -> index of the weight input that may carry a per-channel (axis) scale
PER_CHANNEL_WEIGHT = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}
QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")


def check(graph: LintGraph) -> Iterator[Hazard]:
    for node in graph.nodes:
        if node.domain not in QDQ_DOMAINS:
            continue
        if node.op_type == "QuantizeLinear" and node.input(0) in graph.initializers:
            yield hazard(
                "qdq_unfused",
                node.name,
                node.op_type,
                f"quantizes the float initializer {node.input(0)!r} on every run; store it as int8 with a"
                " DequantizeLinear (quantize_static does)",
            )
        elif node.op_type == "DequantizeLinear":
            yield from _dequantize(graph, node)


def _dequantize(graph: LintGraph, node: Node) -> Iterator[Hazard]:
    output = node.proto.output[0] if node.proto.output else ""
    readers = graph.consumers.get(output, [])
    producer = graph.producers.get(node.input(0))
    if producer is not None and producer.op_type == "QuantizeLinear" and readers:
        unfused = sorted({r.op_type for r, _ in readers if r.op_type not in FUSED_BY_RUNTIME})
        if unfused and len(unfused) == len({r.op_type for r, _ in readers}):
            first = next(r for r, _ in readers if r.op_type in unfused)
            yield hazard(
                "qdq_unfused",
                first.name,
                first.op_type,
                f"the Q/DQ pair {producer.name} -> {node.name} feeds only {unfused}, which no quantized kernel"
                " takes: it runs in float after a rounding step",
                severity="info",
            )
    weight = node.input(0)
    if weight not in graph.initializers and producer is not None and producer.op_type == "QuantizeLinear":
        weight = producer.input(0)  # a float weight quantized at run time (reported above)
    scale = graph.constant(node.input(1)) if node.input(1) else None
    if weight not in graph.initializers or scale is None or scale.size != 1:
        return
    for reader, index in readers:
        if PER_CHANNEL_WEIGHT.get(reader.op_type) == index and _channels(graph, weight) > 1:
            yield hazard(
                "qdq_per_tensor",
                reader.name,
                reader.op_type,
                f"weight {weight!r} has one scale for all {_channels(graph, weight)} channels; {reader.op_type}"
                " takes a per-channel scale (quantize with per_channel=True)",
            )


def _channels(graph: LintGraph, weight: str) -> int:
    tensor = graph.initializers[weight]
    return int(tensor.dims[0]) if tensor.dims else 1
