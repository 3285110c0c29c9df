"""The run page's "Diagnosis" section: the summary line, causes (measured or evidence), the experiments, incidents.

The line on top is ``Diagnosis.summary()``, the one ``onnxmon check`` prints: the cause a revert
measurably restores, or "no experiment explains this drift" and the evidence. Each cause says what
it rests on (``measured: restores the baseline`` and its before → after, or ``evidence``); no
percentages. The bar chart is inline SVG (no script): one bar per experiment, its length the max
|error| against the baseline on a log scale (finite under any tolerance, unlike error ÷ tolerance,
which a bitwise tolerance makes infinite), the current setup's drawn across; green when the knob
brought every output back within tolerance, a bitwise-equal result drawn as "0". A document an
older onnxmon stored (no measures, fixed per-rule weights) shows its causes and experiments, says
where it comes from, and draws no chart. Below, the incidents similar to this run and a plain POST
form to note one (the API token goes in a password field: a form cannot send an ``Authorization``
header). Values here, markup in ``templates/diagnosis.html``, which escapes everything shown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.diagnose.measure import Measure
from monitor.diagnose.result import FORMAT
from monitor.diagnose.result import Diagnosis as Document
from monitor.diagnose.result import Experiment as Replay
from monitor.results import CAUSE_CODES

BAR_W = 360
ROW_H = 18
LEFT = 230


@dataclass(frozen=True)
class Hypothesis:
    cause: str
    basis: str  # "measured: restores the baseline", "measured", "evidence"
    evidence: str
    fix: str


@dataclass(frozen=True)
class Experiment:
    knob: str
    value: str
    max_abs_error: Any  # None: not measured (or an older document)
    max_ulp: Any
    off: str  # the share of elements off, or "-"
    seconds: Any
    within: bool | None  # None: not measured (``note`` says why)
    result: str


@dataclass(frozen=True)
class Bar:
    y: int
    label: str
    value: float | None  # max |error|; None: not measured
    width: float
    color: str


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    left: int
    bar_h: int
    line_x: float  # the current setup's max |error|
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
    summary: str  # the one line (``Diagnosis.summary``)
    older: bool  # stored by an older onnxmon: fixed per-rule weights, nothing measured
    hypotheses: list[Hypothesis]
    before: str  # the current setup on the replayed samples, described
    experiments: list[Experiment]
    chart: BarChart | None
    notes: list[str]
    error: str  # the diagnosis failed: why
    similar: list[Similar]
    causes: list[str]  # the form's choices


def view(run_id: int, document: Mapping[str, Any] | None, similar: Sequence[Mapping[str, Any]]) -> Diagnosis:
    """The section's values (always there on a non-passing run, for the incident form)."""
    found: Document | None = None
    error = ""
    if isinstance(document, Mapping) and document.get("hypotheses"):
        found = Document.from_dict(document)
    elif isinstance(document, Mapping) and document.get("error"):
        error = str(document["error"])
    replays = list(found.experiments) if found is not None else []
    older = found is not None and found.format < FORMAT
    return Diagnosis(
        run_id=run_id,
        summary=found.summary() if found is not None else "",
        older=older,
        hypotheses=[
            Hypothesis(h.cause, h.label(), "; ".join(h.evidence[:3]), h.fix)
            for h in (found.hypotheses if found is not None else ())
        ],
        before=found.before.describe() if found is not None and found.before is not None else "",
        experiments=[_experiment(e) for e in replays],
        chart=bar_chart(replays, found.before if found is not None else None) if replays and not older else None,
        notes=list(found.notes) if found is not None else [],
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


def _experiment(replay: Replay) -> Experiment:
    measure = replay.measure
    return Experiment(
        replay.knob,
        replay.value,
        measure.max_abs_error if measure is not None else None,
        measure.max_ulp if measure is not None else None,
        f"{100 * measure.mismatch_share:.3g} %" if measure is not None else "-",
        replay.seconds,
        replay.within_tolerance,
        replay.outcome(),
    )


def bar_chart(replays: Sequence[Replay], before: Measure | None = None) -> BarChart:
    """Max |error| against the baseline per knob, log scale, the current setup's on the replayed samples
    (``before``; else its scan's) drawn across. The repeat is left out: it measures run against run."""
    shown = [e for e in replays if e.knob != "repeat"]
    values = [e.measure.max_abs_error if e.measure is not None else None for e in shown]
    positive = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    high = math.log10(max(positive, default=1.0) * 2)
    low = min(math.log10(min(positive, default=1.0) / 100), high - 3)

    def x(value: float) -> float:
        clipped = min(max(value, 10**low), 10**high)
        return LEFT + BAR_W * (math.log10(clipped) - low) / (high - low)

    bars = []
    for i, (replay, value) in enumerate(zip(shown, values, strict=True)):
        label = f"{replay.knob}={replay.value}"[:34]
        color = "#2e7d32" if replay.within_tolerance else "#c62828"
        width = max(1.0, x(value) - LEFT) if value is not None and value > 0 else 1.0
        bars.append(Bar(4 + i * ROW_H, label, value, width, color))
    scanned = next((v for e, v in zip(shown, values, strict=True) if e.knob == "current"), None)
    current = before.max_abs_error if before is not None else scanned
    line = x(current) if current is not None and current > 0 else float(LEFT)
    return BarChart(LEFT + BAR_W + 70, ROW_H * len(shown) + 24, LEFT, ROW_H - 5, line, bars)
