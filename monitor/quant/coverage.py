"""Calibration coverage: how well each quantized tensor's scale and zero point fit the values it gets.

For a QDQ model and a set of inputs, per ``QuantizeLinear`` input tensor ``x`` (``qparams``):

- **clipped**: the share of finite values whose code ``round(x / scale) + zero_point`` falls outside
  the code range (``[-128, 127]`` for int8): the quantizer saturates them, so their value is lost.
  A calibration that saw the inputs has none; production inputs beyond the calibrated range have some.
  A range that starts at exactly 0 (zero point at the lowest code) is one ONNX Runtime's quantizer
  gives a ``Relu`` it removed: the saturation *is* the ReLU. Negative values there are counted as
  ``floored`` (what the removed ReLU did), never as clipped.
- **codes used**: the share of the range's codes that at least one value took. A range calibrated
  far wider than the inputs leaves most codes unused (the resolution is lost instead of the range).

Tensors are listed worst first: the largest clipped share, then the fewest codes used. Values are
counted over every sample (one sample's tensors in memory at a time); the codes are a bitmap per
tensor. ``x / scale`` is computed in float64 (ONNX Runtime divides in float32: a value exactly on a
rounding boundary may land one code apart, never in or out of the range by more than one code).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from monitor import jsonsafe
from monitor.localize.graph import load_model
from monitor.quant import capture
from monitor.quant.qparams import QuantizedTensor, codes_of, quantize_nodes


@dataclass(frozen=True)
class TensorCoverage:
    """One quantized tensor over the whole input set."""

    tensor: str
    node: str
    code_type: str
    per_channel: bool
    values: int
    clipped: int
    below: int  # clipped at the low end
    floored: int  # below a range that starts at 0: the saturation is a ReLU the quantizer folded in
    codes_used: int
    codes: int
    observed_min: float
    observed_max: float
    range_min: float  # the smallest value the scale and zero point represent (per tensor: the first channel's)
    range_max: float

    @property
    def clipped_share(self) -> float:
        return self.clipped / self.values if self.values else 0.0

    @property
    def codes_used_share(self) -> float:
        return self.codes_used / self.codes if self.codes else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor,
            "node": self.node,
            "code_type": self.code_type,
            "per_channel": self.per_channel,
            "values": self.values,
            "clipped": self.clipped,
            "clipped_low": self.below,
            "clipped_high": self.clipped - self.below,
            "floored": self.floored,
            "clipped_share": self.clipped_share,
            "codes_used": self.codes_used,
            "codes": self.codes,
            "codes_used_share": self.codes_used_share,
            "observed_min": jsonsafe.number(self.observed_min),
            "observed_max": jsonsafe.number(self.observed_max),
            "range_min": self.range_min,
            "range_max": self.range_max,
        }


@dataclass(frozen=True)
class Coverage:
    """Every quantized tensor of a model over one input set, worst first."""

    model: str
    samples: int
    tensors: tuple[TensorCoverage, ...]
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def worst_clipped(self) -> TensorCoverage | None:
        return self.tensors[0] if self.tensors and self.tensors[0].clipped else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "samples": self.samples,
            "tensors": [t.to_dict() for t in self.tensors],
            "skipped": dict(self.skipped),
        }


class _Counter:
    def __init__(self, quantized: QuantizedTensor) -> None:
        self.q = quantized
        self.values = self.clipped = self.below = self.floored = 0
        self.used = np.zeros(quantized.codes, dtype=bool)
        self.low, self.high = np.inf, -np.inf

    def feed(self, array: np.ndarray[Any, Any]) -> None:
        finite = np.asarray(array, dtype=np.float64)
        finite = finite[np.isfinite(finite)]
        if finite.size:
            self.low, self.high = min(self.low, float(finite.min())), max(self.high, float(finite.max()))
        codes, zero = codes_of(self.q, array)
        low, over = codes < self.q.qmin, codes > self.q.qmax
        floored = low & (zero == self.q.qmin)
        under = low & ~floored
        self.values += int(codes.size)
        self.floored += int(np.count_nonzero(floored))
        self.below += int(np.count_nonzero(under))
        self.clipped += int(np.count_nonzero(under)) + int(np.count_nonzero(over))
        inside = codes[~(low | over)] - self.q.qmin
        self.used[np.unique(inside)] = True

    def finish(self) -> TensorCoverage:
        q = self.q
        scale, zero = float(q.scale[0]), int(q.zero_point[0])
        return TensorCoverage(
            tensor=q.tensor,
            node=q.node,
            code_type=q.code_type,
            per_channel=q.per_channel,
            values=self.values,
            clipped=self.clipped,
            below=self.below,
            floored=self.floored,
            codes_used=int(np.count_nonzero(self.used)),
            codes=q.codes,
            observed_min=self.low if self.values else float("nan"),
            observed_max=self.high if self.values else float("nan"),
            range_min=(q.qmin - zero) * scale,
            range_max=(q.qmax - zero) * scale,
        )


def coverage(
    model_path: Path, samples: Iterable[Mapping[str, np.ndarray[Any, Any]]], *, timeout_s: float | None = None
) -> Coverage:
    """The calibration coverage of the QDQ model at ``model_path`` over ``samples``."""
    model = load_model(Path(model_path))
    found = quantize_nodes(model)
    counters = [_Counter(q) for q in found.tensors]
    names = [q.tensor for q in found.tensors]
    skipped = dict(found.skipped)
    count = 0
    for values in capture.quantized_values(model, names, samples, timeout_s=timeout_s):
        count += 1
        for counter in counters:
            if counter.q.tensor in values:
                counter.feed(values[counter.q.tensor])
            else:
                skipped.setdefault(counter.q.node, f"tensor {counter.q.tensor!r} was not produced")
    measured = [c.finish() for c in counters if c.q.node not in skipped]
    measured.sort(key=lambda t: (-t.clipped_share, t.codes_used_share, t.tensor))
    return Coverage(str(model_path), count, tuple(measured), skipped)
