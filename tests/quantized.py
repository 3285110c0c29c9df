"""QDQ models for the quantization tests, and their ground truth from plain ONNX Runtime and numpy.

``quantize`` calls ``onnxruntime.quantization.quantize_static`` directly (QDQ, ORT's defaults) on
calibration samples; the corpus ships no calibration inputs of its own, so the tests calibrate on
each model's seeded benchmark set (``generate`` with seed 0, deterministic), or on a copy scaled by
a factor. ``clipped_by_numpy`` reads a QDQ model's ``QuantizeLinear`` nodes with ``onnx`` and their
float inputs from a plain ORT session (the inputs added as graph outputs, optimizations off), and
counts in numpy: nothing of onnxmon is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static

RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def quantize(source: Path, target: Path, samples: Sequence[Mapping[str, np.ndarray]], method: str = "MinMax") -> Path:
    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.left = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            item = next(self.left, None)
            return None if item is None else dict(item)

    quantize_static(
        str(source),
        str(target),
        Reader(),
        quant_format=QuantFormat.QDQ,
        calibrate_method=getattr(CalibrationMethod, method),
    )
    return target


def scaled(samples: Sequence[Mapping[str, np.ndarray]], factor: float) -> list[dict[str, np.ndarray]]:
    return [{k: (v * factor).astype(v.dtype) if v.dtype.kind == "f" else v for k, v in s.items()} for s in samples]


def clipped_by_numpy(qdq: Path, samples: Sequence[Mapping[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """Per QuantizeLinear input tensor: values, values outside the code range (but not below a range that
    starts at 0, a ReLU folded in), and the codes used; from plain ORT and numpy."""
    model = onnx.load(str(qdq))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    inputs = {i.name for i in model.graph.input}
    for node in nodes:
        if node.input[0] not in inputs and node.input[0] not in {o.name for o in model.graph.output}:
            model.graph.output.add().name = node.input[0]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    truth: dict[str, dict[str, Any]] = {}
    for sample in samples:
        values = dict(zip(names, sess.run(names, dict(sample)), strict=True)) | dict(sample)
        for node in nodes:
            scale = float(inits[node.input[1]])
            zero = inits[node.input[2]]
            low, high = RANGES[str(zero.dtype)]
            x = values[node.input[0]].astype(np.float64).ravel()
            codes = np.rint(x / scale) + int(zero)
            floored = (codes < low) & (int(zero) == low)
            out = ((codes < low) & ~floored) | (codes > high)
            entry = truth.setdefault(node.input[0], {"values": 0, "clipped": 0, "used": set()})
            entry["values"] += x.size
            entry["clipped"] += int(out.sum())
            entry["used"] |= set(codes[(codes >= low) & (codes <= high)].astype(int).tolist())
    return truth
