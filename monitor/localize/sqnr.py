"""Per-layer SQNR between a float model and its QDQ-quantized version.

``onnxruntime.quantization.quantize_static(..., quant_format=QDQ)`` keeps the float tensor
names and inserts ``T -> QuantizeLinear -> T_QuantizeLinear_Output -> DequantizeLinear ->
T_DequantizeLinear_Output``. The value the next layer really consumes is the dequantized
one, so each float tensor ``T`` is matched with ``T_DequantizeLinear_Output`` when that
exists, else with ``T`` itself.

Both models run on the CPU provider with graph optimizations disabled: Q/DQ pairs are then
evaluated as written (simulated quantization), and exposing tensors cannot change fusions.

    SQNR_dB = 10 * log10( sum(float^2) / sum((float - quantized)^2) )     (inf when identical)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor import jsonsafe
from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.localize.graph import ExposingRunner, graph_nodes, load_model, refuse_disjoint

DEQUANTIZED_SUFFIX = "_DequantizeLinear_Output"
_CPU = (ProviderSpec(name="CPUExecutionProvider"),)
_UNOPTIMIZED = SessionConfig(graph_optimization_level="disable")


@dataclass(frozen=True)
class LayerSQNR:
    """Signal-to-quantization-noise ratio of one float tensor against its quantized counterpart."""

    index: int
    node: str
    op_type: str
    tensor: str
    quantized_tensor: str
    sqnr_db: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "node": self.node,
            "op_type": self.op_type,
            "tensor": self.tensor,
            "quantized_tensor": self.quantized_tensor,
            "sqnr_db": jsonsafe.number(self.sqnr_db),  # +inf for identical tensors
        }


def sqnr_db(reference: np.ndarray, quantized: np.ndarray) -> float:
    """10·log10(signal power / noise power) in float64; inf when equal, -inf for a zero signal with noise."""
    signal = np.asarray(reference, dtype=np.float64)
    noise = signal - np.asarray(quantized, dtype=np.float64)
    noise_power = float(np.sum(noise * noise))
    signal_power = float(np.sum(signal * signal))
    if noise_power == 0.0:
        return math.inf
    if signal_power == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal_power / noise_power)


def per_layer_sqnr(
    float_model: Path, qdq_model: Path, feeds: Mapping[str, np.ndarray], *, chunk_size: int = 64
) -> tuple[LayerSQNR, ...]:
    """SQNR (dB) of every float-model node output that the QDQ model also produces, in graph order."""
    float_proto, qdq_proto = load_model(Path(float_model)), load_model(Path(qdq_model))
    with (
        ExposingRunner(float_proto, feeds, providers=_CPU, session=_UNOPTIMIZED, label="float") as float_side,
        ExposingRunner(qdq_proto, feeds, providers=_CPU, session=_UNOPTIMIZED, label="qdq") as qdq_side,
    ):
        refuse_disjoint(float_proto, str(float_model), str(qdq_model), qdq_side.producible, DEQUANTIZED_SUFFIX)
        pairs: list[tuple[int, str, str, str, str]] = []
        for node in graph_nodes(float_proto):
            if node.op_type == "Constant":
                continue
            for tensor in node.outputs:
                partner = _partner(tensor, qdq_side.producible)
                if partner is not None:
                    pairs.append((node.index, node.name, node.op_type, tensor, partner))
        layers: list[LayerSQNR] = []
        for start in range(0, len(pairs), chunk_size):
            chunk = pairs[start : start + chunk_size]
            floats = float_side.fetch(p[3] for p in chunk)
            quantized = qdq_side.fetch(p[4] for p in chunk)
            for index, node_name, op_type, tensor, partner in chunk:
                if tensor in floats and partner in quantized and floats[tensor].shape == quantized[partner].shape:
                    value = sqnr_db(floats[tensor], quantized[partner])
                    layers.append(LayerSQNR(index, node_name, op_type, tensor, partner, value))
    return tuple(layers)


def _partner(tensor: str, available: frozenset[str]) -> str | None:
    if tensor + DEQUANTIZED_SUFFIX in available:
        return tensor + DEQUANTIZED_SUFFIX
    return tensor if tensor in available else None
