"""Calibration methods compared: ONNX Runtime's quantizer under MinMax, Entropy and Percentile, each measured.

``calibrate`` quantizes a float model (static, QDQ, ORT's defaults: ``runtime/quantizer.py``) once per
method on the calibration samples, then measures each build against the float model:

- ``sqnr_db``: the SQNR of the model's float outputs over the whole benchmark set,
  ``10·log10(Σ float² / Σ (float − quantized)²)`` summed over every sample and float output (the
  end-to-end figure); ``layers``: the per-layer SQNR on the first benchmark sample
  (``localize/sqnr.per_layer_sqnr``), ``worst_layer`` the lowest of them;
- ``decisions_flipped`` of ``decisions_total``: what each decided output decides
  (``compare/decisions.decide``: the model's ``decisions:``, else argmax over the last axis of each
  float output, said in ``decisions``) on the float model and on the build, sample by sample;
- ``size_bytes``: the quantized file's size.

Both models run on the CPU provider with the default session options (what a deployment runs).
The recommendation follows one rule, stated with it (``RULE``), over the methods measured: fewest
decisions flipped, then the highest ``sqnr_db``, then the smallest file. A method the quantizer
refuses, or whose build cannot run, is listed with its error and never recommended.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from monitor import jsonsafe
from monitor.compare.decisions import DecisionRule, decide
from monitor.config.settings import ProviderSpec
from monitor.errors import MonitorError
from monitor.localize.sqnr import LayerSQNR, per_layer_sqnr
from monitor.runtime import quantizer
from monitor.runtime.session import Session

RULE = "fewest decisions flipped, then the highest end-to-end SQNR (dB), then the smallest file"
_CPU = (ProviderSpec(name="CPUExecutionProvider"),)
Feeds = Mapping[str, np.ndarray[Any, Any]]


@dataclass(frozen=True)
class Rule:
    """A decision rule (``compare.decisions.DecisionRule``) and where it came from."""

    kind: str
    axis: int = -1
    value: float | None = None
    source: str = "config"  # config | default


@dataclass(frozen=True)
class MethodResult:
    """One calibration method's build, measured; ``error`` when it could not be."""

    method: str
    sqnr_db: float | None = None
    decisions_flipped: int | None = None
    decisions_total: int | None = None
    flipped_by_output: dict[str, int] = field(default_factory=dict)
    size_bytes: int | None = None
    quantize_seconds: float | None = None
    layers: tuple[LayerSQNR, ...] = ()
    path: str | None = None
    error: str | None = None

    @property
    def worst_layer(self) -> LayerSQNR | None:
        return min(self.layers, key=lambda layer: layer.sqnr_db) if self.layers else None

    def to_dict(self) -> dict[str, Any]:
        worst = self.worst_layer
        return {
            "method": self.method,
            "sqnr_db": None if self.sqnr_db is None else jsonsafe.number(self.sqnr_db),
            "decisions_flipped": self.decisions_flipped,
            "decisions_total": self.decisions_total,
            "flipped_by_output": dict(self.flipped_by_output),
            "size_bytes": self.size_bytes,
            "quantize_seconds": self.quantize_seconds,
            "worst_layer": None if worst is None else worst.to_dict(),
            "layers": [layer.to_dict() for layer in self.layers],
            "path": self.path,
            "error": self.error,
        }


@dataclass(frozen=True)
class Calibration:
    """Every method's result and the one the rule picks (None when none was measured)."""

    model: str
    calibration_samples: int
    benchmark_samples: int
    decisions: dict[str, Rule]
    methods: tuple[MethodResult, ...]
    recommended: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "calibration_samples": self.calibration_samples,
            "benchmark_samples": self.benchmark_samples,
            "decisions": {
                name: {"kind": r.kind, "axis": r.axis, "value": r.value, "source": r.source}
                for name, r in self.decisions.items()
            },
            "methods": [m.to_dict() for m in self.methods],
            "recommended": self.recommended,
            "rule": RULE,
        }


def calibrate(
    float_model: Path,
    calibration: Sequence[Feeds],
    benchmark: Sequence[Feeds],
    *,
    decisions: Mapping[str, DecisionRule] | None = None,
    methods: Sequence[str] = quantizer.METHODS,
    keep: Path | None = None,
) -> Calibration:
    """Quantize ``float_model`` once per method on ``calibration``; measure each build on ``benchmark``."""
    if not benchmark:
        raise MonitorError("calibrate needs at least one benchmark sample")
    reference = Session(Path(float_model), _CPU)
    expected = [reference.run(feeds, where="benchmark sample") for feeds in benchmark]
    rules = _rules(decisions, expected[0])
    results: list[MethodResult] = []
    with tempfile.TemporaryDirectory(prefix="onnxmon-calibrate-") as scratch:
        folder = Path(keep) if keep is not None else Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for method in methods:
            target = folder / f"{Path(float_model).stem}.{method.lower()}.onnx"
            results.append(_measure(method, Path(float_model), target, calibration, benchmark, expected, rules, keep))
    return Calibration(str(float_model), len(calibration), len(benchmark), rules, tuple(results), _recommend(results))


def _measure(
    method: str,
    float_model: Path,
    target: Path,
    calibration: Sequence[Feeds],
    benchmark: Sequence[Feeds],
    expected: Sequence[Mapping[str, np.ndarray[Any, Any]]],
    rules: Mapping[str, Rule],
    keep: Path | None,
) -> MethodResult:
    started = time.perf_counter()
    try:
        quantizer.quantize_qdq(float_model, target, calibration, method)
        seconds = time.perf_counter() - started
        built = Session(target, _CPU)
        actual = [built.run(feeds, where="benchmark sample") for feeds in benchmark]
        layers = per_layer_sqnr(float_model, target, benchmark[0])
    except MonitorError as exc:
        return MethodResult(method, error=str(exc)[:600])
    except Exception as exc:  # ORT's own failures on a build it made: this method's result, not the command's
        return MethodResult(method, error=f"{type(exc).__name__}: {exc}"[:600])
    flipped = {name: 0 for name in rules}
    total = 0
    for ours, theirs in zip(actual, expected, strict=True):
        for name, rule in rules.items():
            a, b = decide(rule, ours[name]), decide(rule, theirs[name])
            flipped[name] += int(np.count_nonzero(a != b))
            total += int(a.size)
    return MethodResult(
        method,
        sqnr_db=_sqnr(expected, actual),
        decisions_flipped=sum(flipped.values()),
        decisions_total=total,
        flipped_by_output=flipped,
        size_bytes=target.stat().st_size,
        quantize_seconds=seconds,
        layers=layers,
        path=str(target) if keep is not None else None,
    )


def _sqnr(expected: Sequence[Mapping[str, np.ndarray[Any, Any]]], actual: Sequence[Mapping[str, Any]]) -> float:
    signal = noise = 0.0
    for theirs, ours in zip(expected, actual, strict=True):
        for name, value in theirs.items():
            if value.dtype.kind != "f" or name not in ours:
                continue
            reference = np.asarray(value, dtype=np.float64)
            error = reference - np.asarray(ours[name], dtype=np.float64)
            signal += float(np.sum(reference * reference))
            noise += float(np.sum(error * error))
    if noise == 0.0:
        return math.inf
    return -math.inf if signal == 0.0 else 10.0 * math.log10(signal / noise)


def _rules(
    decisions: Mapping[str, DecisionRule] | None, outputs: Mapping[str, np.ndarray[Any, Any]]
) -> dict[str, Rule]:
    if decisions:
        return {
            name: Rule(rule.kind, rule.axis, rule.value, "config")
            for name, rule in decisions.items()
            if name in outputs  # a companion (name:keys) of a non-tensor output is not quantized
        }
    return {
        name: Rule("argmax", -1, None, "default")
        for name, value in outputs.items()
        if value.dtype.kind == "f" and value.ndim
    }


def _recommend(results: Sequence[MethodResult]) -> str | None:
    measured = [r for r in results if r.error is None and r.sqnr_db is not None]
    if not measured:
        return None
    best = min(
        measured,
        key=lambda r: (
            r.decisions_flipped if r.decisions_flipped is not None else 0,
            -(r.sqnr_db if r.sqnr_db is not None and not math.isnan(r.sqnr_db) else -math.inf),
            r.size_bytes or 0,
        ),
    )
    return best.method
