"""The run page's "Diagnosis" section: likely causes, the experiments as a table and a bar chart, incidents.

The bar chart is inline SVG (no script): one bar per experiment, its length the error ratio on a
log scale (1.0, the tolerance line, drawn across), green when the knob brought every output back
within tolerance. Below it, the incidents similar to this run and a plain POST form to note one
(the API token goes in a password field: a form cannot send an ``Authorization`` header).
Values here, markup in ``templates/diagnosis.html``, which escapes everything shown: knob values
and incident text are data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.results import CAUSE_CODES

BAR_W = 360
ROW_H = 18
LEFT = 230


@dataclass(frozen=True)
class Hypothesis:
    cause: str
    confidence: str
    evidence: str
    fix: str


@dataclass(frozen=True)
class Experiment:
    knob: str
    value: str
    error_ratio: Any
    seconds: Any
    within: bool | None  # None: not measured (``note`` says why)
    note: str


@dataclass(frozen=True)
class Bar:
    y: int
    label: str
    ratio: float | None  # None: not measured
    width: float
    color: str


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    left: int
    bar_h: int
    line_x: float  # the tolerance line, at 1
    bars: list[Bar]


@dataclass(frozen=True)
class Similar:
    id: str
    on: str
    cause: str
    fix: str
    text: str
    score: Any


@dataclass(frozen=True)
class Diagnosis:
    run_id: int
    hypotheses: list[Hypothesis]
    experiments: list[Experiment]
    chart: BarChart | None
    notes: list[str]
    error: str  # the diagnosis failed: why
    similar: list[Similar]
    causes: list[str]  # the form's choices


def view(run_id: int, document: Mapping[str, Any] | None, similar: Sequence[Mapping[str, Any]]) -> Diagnosis:
    """The section's values (always there on a non-passing run, for the incident form)."""
    hypotheses: list[Hypothesis] = []
    experiments: list[Mapping[str, Any]] = []
    notes: list[str] = []
    error = ""
    if isinstance(document, Mapping) and document.get("hypotheses"):
        hypotheses = [
            Hypothesis(
                str(h.get("cause", "")),
                f"{float(h.get('confidence') or 0):.0%}",
                "; ".join(str(e) for e in (h.get("evidence") or [])[:3]),
                str(h.get("fix", "")),
            )
            for h in document["hypotheses"]
        ]
        experiments = [e for e in document.get("experiments") or [] if isinstance(e, Mapping)]
        notes = [str(n) for n in document.get("notes") or []]
    elif isinstance(document, Mapping) and document.get("error"):
        error = str(document["error"])
    return Diagnosis(
        run_id=run_id,
        hypotheses=hypotheses,
        experiments=[
            Experiment(
                str(e.get("knob", "")),
                str(e.get("value", "")),
                e.get("error_ratio"),
                e.get("seconds"),
                e.get("within_tolerance") if isinstance(e.get("within_tolerance"), bool) else None,
                str(e.get("note") or "—"),
            )
            for e in experiments
        ],
        chart=bar_chart(experiments) if experiments else None,
        notes=notes,
        error=error,
        similar=[
            Similar(
                str(i.get("id")),
                str(i.get("at", ""))[:10],
                str(i.get("cause", "")),
                str(i.get("fix") or "—"),
                str(i.get("text", "")),
                i.get("score"),
            )
            for i in similar
        ],
        causes=sorted(CAUSE_CODES),
    )


def bar_chart(experiments: Sequence[Mapping[str, Any]]) -> BarChart:
    """Error ratio per knob, log scale from 1e-3 to the largest ratio, the tolerance line at 1."""
    ratios = [_ratio(e.get("error_ratio")) for e in experiments]
    finite = [r for r in ratios if r is not None and math.isfinite(r) and r > 0]
    top = max([10.0, *finite]) * 2
    low, high = -3.0, math.log10(top)

    def x(value: float) -> float:
        clipped = min(max(value, 10**low), top)
        return LEFT + BAR_W * (math.log10(clipped) - low) / (high - low)

    bars = []
    for i, (experiment, ratio) in enumerate(zip(experiments, ratios, strict=True)):
        label = f"{experiment.get('knob', '')}={experiment.get('value', '')}"[:34]
        color = "#2e7d32" if experiment.get("within_tolerance") else "#c62828"
        width = max(1.0, x(ratio) - LEFT) if ratio is not None and ratio > 0 else 1.0
        bars.append(Bar(4 + i * ROW_H, label, ratio, width, color))
    return BarChart(LEFT + BAR_W + 70, ROW_H * len(experiments) + 24, LEFT, ROW_H - 5, x(1.0), bars)


def _ratio(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value):
        return float(value)
    if value in ("Infinity", "inf"):
        return math.inf
    return None
