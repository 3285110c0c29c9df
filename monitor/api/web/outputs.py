"""A run's outputs as the model and run pages table them: verdict, tolerance, error ÷ tolerance, metrics.

"error ÷ tolerance" is ``error_ratio``; when only its bound is known (``max |err| ÷ atol``) the
row carries the bound instead (``templates/outputs.html`` prints it as ``≤ bound``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from monitor.results import OutputStats

# (label, OutputMetrics field) of the main table; every metric is in "all metrics" below it.
MAIN_METRICS = (
    ("max |err|", "max_abs_error"),
    ("mean |err|", "mean_abs_error"),
    ("RMS err", "rms_error"),
    ("max rel", "max_rel_error"),
    ("cosine", "cosine_similarity"),
    ("SNR dB", "snr_db"),
    ("mismatch", "mismatch_ratio"),
)
HEADERS = ["Output", "Verdict", "dtype", "shape", "atol", "rtol", "error ÷ tolerance"] + [m for m, _ in MAIN_METRICS]


@dataclass(frozen=True)
class OutputRow:
    name: str
    verdict: str
    dtype: str
    shape: str
    atol: float
    rtol: float
    ratio: float
    bound: float | None  # set when only the bound max |err| ÷ atol is known (rtol only adds room)
    metrics: list[Any]  # MAIN_METRICS' values, in order


@dataclass(frozen=True)
class AllMetrics:
    """Every metric and tolerance field (rows) of every output (columns)."""

    outputs: list[str]
    rows: list[tuple[str, list[Any]]]


def rows(outputs: Sequence[OutputStats]) -> list[OutputRow]:
    found = []
    for o in outputs:
        metrics = o.metrics.to_dict()
        value, bound = _ratio(o)
        found.append(
            OutputRow(
                name=o.name,
                verdict=o.verdict.value,
                dtype=o.dtype or "—",
                shape="×".join(str(d) for d in o.shape) or "—",
                atol=o.tolerance.atol,
                rtol=o.tolerance.rtol,
                ratio=value,
                bound=bound,
                metrics=[metrics[field] for _, field in MAIN_METRICS],
            )
        )
    return found


def _ratio(output: OutputStats) -> tuple[float, float | None]:
    """The exact ``|err| ÷ (atol + rtol·|b|)`` when known, else its bound ``max |err| ÷ atol``."""
    value = output.error_ratio
    atol, error = output.tolerance.atol, output.metrics.max_abs_error
    if math.isnan(value) and math.isinf(error):
        return math.inf, None  # an infinite error is infinitely far from any finite tolerance
    if math.isnan(value) and output.is_measured and atol > 0 and math.isfinite(error):
        return value, error / atol
    return value, None


def all_metrics(outputs: Sequence[OutputStats]) -> AllMetrics | None:
    if not outputs:
        return None
    metrics = [o.metrics.to_dict() for o in outputs]
    tolerances = [o.tolerance.to_dict() for o in outputs]
    found = [(name, [m[name] for m in metrics]) for name in metrics[0]]
    found += [(f"tolerance {name}", [t[name] for t in tolerances]) for name in tolerances[0]]
    return AllMetrics([o.name for o in outputs], found)
