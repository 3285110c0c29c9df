"""The run page's "Diagnosis" section: likely causes, the experiments as a table and a bar chart, incidents.

The bar chart is inline SVG (no script): one bar per experiment, its length the error ratio on a
log scale (1.0, the tolerance line, drawn across), green when the knob brought every output back
within tolerance. Below it, the incidents similar to this run and a plain POST form to note one
(the API token goes in a password field: a form cannot send an ``Authorization`` header).
Everything shown is escaped: knob values and incident text are data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from monitor.api.web.html import badge, esc, num, section, table
from monitor.results import CAUSE_CODES

BAR_W = 360
ROW_H = 18
LEFT = 230


def render(run_id: int, document: Mapping[str, Any] | None, similar: Sequence[Mapping[str, Any]]) -> str:
    """The section (always there on a non-passing run, for the incident form), or "" for no document and no form."""
    parts = []
    if isinstance(document, Mapping) and document.get("hypotheses"):
        parts.append(_hypotheses(document["hypotheses"]))
        experiments = [e for e in document.get("experiments") or [] if isinstance(e, Mapping)]
        if experiments:
            parts.append(bar_chart(experiments))
            parts.append(_experiments(experiments))
        notes = [str(n) for n in document.get("notes") or []]
        if notes:
            parts.append('<ul class="sub">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    elif isinstance(document, Mapping) and document.get("error"):
        parts.append(f'<p class="sub">the diagnosis failed: {esc(document["error"])}</p>')
    else:
        parts.append(
            f'<p class="sub">not diagnosed: <span class="mono">onnxmon diagnose MODEL --run {run_id}</span></p>'
        )
    parts.append(_similar(similar))
    parts.append(form(run_id))
    return section("Diagnosis", "".join(parts), anchor="incidents")


def _hypotheses(hypotheses: Sequence[Mapping[str, Any]]) -> str:
    rows = (
        [
            badge(h.get("cause", ""), "info" if i == 0 else "none"),
            esc(f"{float(h.get('confidence') or 0):.0%}"),
            esc("; ".join(str(e) for e in (h.get("evidence") or [])[:3])),
            esc(h.get("fix", "")),
        ]
        for i, h in enumerate(hypotheses)
    )
    return table(["Likely cause", "Confidence", "Evidence", "Try"], rows)


def _experiments(experiments: Sequence[Mapping[str, Any]]) -> str:
    rows = (
        [
            f'<span class="mono">{esc(e.get("knob", ""))}</span>',
            esc(e.get("value", "")),
            esc(num(e.get("error_ratio"))),
            _result(e),
            esc(num(e.get("seconds"))),
        ]
        for e in experiments
    )
    inner = table(["Knob", "Value", "error ÷ tol", "Result", "s"], rows)
    return f"<details><summary>Experiments</summary>{inner}</details>"


def _result(experiment: Mapping[str, Any]) -> str:
    within = experiment.get("within_tolerance")
    if within is True:
        return badge("within", "ok")
    if within is False:
        return badge("over", "bad")
    return esc(experiment.get("note") or "—")


def bar_chart(experiments: Sequence[Mapping[str, Any]]) -> str:
    """Error ratio per knob, log scale from 1e-3 to the largest ratio, the tolerance line at 1."""
    ratios = [_ratio(e.get("error_ratio")) for e in experiments]
    finite = [r for r in ratios if r is not None and math.isfinite(r) and r > 0]
    top = max([10.0, *finite]) * 2
    low, high = -3.0, math.log10(top)

    def x(value: float) -> float:
        clipped = min(max(value, 10**low), top)
        return LEFT + BAR_W * (math.log10(clipped) - low) / (high - low)

    height = ROW_H * len(experiments) + 24
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + BAR_W + 70}" height="{height}" role="img"'
             ' aria-label="error ratio per knob">']  # fmt: skip
    for i, (experiment, ratio) in enumerate(zip(experiments, ratios, strict=True)):
        y = 4 + i * ROW_H
        label = f"{experiment.get('knob', '')}={experiment.get('value', '')}"[:34]
        parts.append(f'<text x="{LEFT - 6}" y="{y + 12}" text-anchor="end" font-size="11">{esc(label)}</text>')
        if ratio is None:
            parts.append(f'<text x="{LEFT + 4}" y="{y + 12}" font-size="11" fill="#888">not measured</text>')
            continue
        color = "#2e7d32" if experiment.get("within_tolerance") else "#c62828"
        width = max(1.0, x(ratio) - LEFT) if ratio > 0 else 1.0
        parts.append(f'<rect x="{LEFT}" y="{y + 2}" width="{width:.1f}" height="{ROW_H - 5}" fill="{color}">'
                     f"<title>{esc(label)}: {esc(num(ratio))}</title></rect>")  # fmt: skip
        parts.append(f'<text x="{LEFT + width + 4:.1f}" y="{y + 12}" font-size="10">{esc(num(ratio))}</text>')
    line = x(1.0)
    parts.append(
        f'<line x1="{line:.1f}" x2="{line:.1f}" y1="0" y2="{height - 16}" stroke="#333" stroke-dasharray="3 2"/>'
    )
    parts.append(f'<text x="{line:.1f}" y="{height - 4}" font-size="10" text-anchor="middle">tolerance (1)</text>')
    parts.append("</svg>")
    return "".join(parts)


def _similar(similar: Sequence[Mapping[str, Any]]) -> str:
    if not similar:
        return ""
    rows = (
        [esc(i.get("id")), esc(str(i.get("at", ""))[:10]), badge(i.get("cause", ""), "info"), esc(i.get("fix") or "—"),
         esc(i.get("text", "")), esc(num(i.get("score")))]
        for i in similar
    )  # fmt: skip
    return "<h3>Similar incidents</h3>" + table(["Incident", "On", "Cause", "Fixed by", "Notes", "Score"], rows)


def form(run_id: int) -> str:
    """The no-JavaScript form that notes an incident on this run (POST /runs/{id}/incidents)."""
    options = "".join(f'<option value="{esc(c)}">{esc(c)}</option>' for c in sorted(CAUSE_CODES))
    return (
        f'<h3>Note an incident</h3><form method="post" action="/runs/{run_id}/incidents" class="incident">'
        f'<label>cause <select name="cause" required>{options}</select></label> '
        '<label>what was found <input name="text" required maxlength="10000"></label> '
        '<label>fix <input name="fix" maxlength="10000"></label> '
        '<label>by <input name="by" maxlength="200"></label> '
        '<label>API token <input name="token" type="password" required autocomplete="off"></label> '
        '<button type="submit">Note</button></form>'
    )


def _ratio(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value):
        return float(value)
    if value in ("Infinity", "inf"):
        return math.inf
    return None
