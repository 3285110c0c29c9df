"""What the model file itself is, read without its external data: its op types and its kinds.

Evidence for the rules (``op_types``, matched when there is no localization) and for the verify
flow (``kinds``: a quantized or float16 file checked against its framework's outputs).
"""

from __future__ import annotations

import onnx

from monitor.config.plan import CheckPlan


def op_types(plan: CheckPlan) -> set[str]:
    """Every op type of the model (subgraphs included), read without its external data."""
    try:
        model = onnx.load(str(plan.model.path), load_external_data=False)
    except Exception:
        return set()
    found: set[str] = set()
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            found.add(node.op_type)
            graphs += [a.g for a in node.attribute if a.HasField("g")]
            graphs += list(b for a in node.attribute for b in a.graphs)
    return found


_LOW_PRECISION_TYPES = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
_QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinear", "Integer")


def kinds(plan: CheckPlan) -> set[str]:
    """What the model file is: ``quantized`` (QDQ or integer ops), ``precision`` (float16/bfloat16 tensors)."""
    kinds = {"quantized"} if any(m in op for op in op_types(plan) for m in _QUANTIZED_OPS) else set()
    try:
        model = onnx.load(str(plan.model.path), load_external_data=False)
    except Exception:
        return kinds
    graph = model.graph
    if any(t.data_type in _LOW_PRECISION_TYPES for t in graph.initializer) or any(
        v.type.tensor_type.elem_type in _LOW_PRECISION_TYPES for v in (*graph.input, *graph.value_info, *graph.output)
    ):
        kinds.add("precision")
    return kinds
