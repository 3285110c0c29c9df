"""ONNX Runtime's own static quantizer, one calibration method at a time (``onnxmon calibrate``).

``quantize_qdq(float_model, target, samples, method)`` runs
``onnxruntime.quantization.quantize_static`` in QDQ format (int8 activations and weights, ORT's
defaults) with ``CalibrationMethod.<method>`` over the given calibration samples. Nothing is tuned
here: the methods are compared as ORT ships them, so what ``calibrate`` measures is what a user of
``quantize_static`` gets.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static

from monitor.errors import ModelError

METHODS = ("MinMax", "Entropy", "Percentile")


class _Samples(CalibrationDataReader):  # type: ignore[misc]
    def __init__(self, samples: Sequence[Mapping[str, np.ndarray]]) -> None:
        self._left: Iterator[Mapping[str, np.ndarray]] = iter(samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        item = next(self._left, None)
        return None if item is None else dict(item)


def quantize_qdq(float_model: Path, target: Path, samples: Sequence[Mapping[str, np.ndarray]], method: str) -> None:
    """Write ``float_model`` quantized (static, QDQ) with calibration ``method`` to ``target``.

    ``ModelError`` naming the method when the quantizer refuses the model (ML ops, unsupported types).
    """
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}; known: {', '.join(METHODS)}")
    if not samples:
        raise ModelError(f"{method} calibration of {float_model} needs at least one sample")
    try:
        # the histogram calibrators print their progress: never onto a command's stdout (its JSON)
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_static(
                str(float_model),
                str(target),
                _Samples(samples),
                quant_format=QuantFormat.QDQ,
                calibrate_method=getattr(CalibrationMethod, method),
                calibration_providers=["CPUExecutionProvider"],
            )
    except Exception as exc:  # the quantizer raises many types: a refusal of this model, said once
        raise ModelError(
            f"onnxruntime.quantization ({method}) cannot quantize {float_model}: {type(exc).__name__}: {exc}"[:600]
        ) from None
