"""The localization section of a run page: the first divergent node, the worst nodes and the per-node plot.

The daemon stores ``LocalizationReport.to_dict()`` under a failing run's ``details["localization"]``
(``localize_on_fail``), or ``{"error": ...}`` when localization itself failed; both are shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.api.web.html import badge, esc, facts, num, section, table
from monitor.localize.plot import plot_svg
from monitor.localize.report import LocalizationReport, NodeDivergence


def render(details: Mapping[str, Any]) -> str:
    """The section, or an empty string when the run was not localized."""
    data = details.get("localization")
    if not isinstance(data, Mapping):
        return ""
    if "error" in data:
        body = f'<div class="callout warn">Localization did not finish: {esc(data["error"])}</div>'
        return section("Localization", body, anchor="localization")
    try:
        report = LocalizationReport.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return section("Localization", '<p class="muted">the stored report is not readable</p>', anchor="localization")
    return section("Localization: where the model moved", _report(report), anchor="localization")


def _report(report: LocalizationReport) -> str:
    parts = [_headline(report)]
    side = "the baseline's stored intermediates" if report.against == "baseline" else "a reference session"
    rule = f"max |diff| > {num(report.rel_threshold)} × std of the reference (floor {num(report.abs_floor)})"
    parts.append(
        facts(
            [
                ("compared against", esc(side)),
                ("search", esc(f"{report.mode}, {report.path.replace('_', '-')} path")),
                ("nodes examined", esc(f"{len(report.profile)} of {report.nodes_total or '?'}")),
                ("divergence rule", esc(rule)),
                ("runs / time", esc(f"{report.runs} session run(s), {num(report.seconds)} s")),
                ("complete", badge("yes", "ok") if report.complete else badge("cut by the time budget", "warn")),
                ("observer effect", _observer(report)),
            ]
        )
    )
    if report.notes:
        parts.append('<ul class="reasons">' + "".join(f"<li>{esc(n)}</li>" for n in report.notes) + "</ul>")
    parts.append(f'<div class="plot">{plot_svg(report)}</div>')
    parts.append("<h2>Worst nodes</h2>")
    parts.append(
        table(
            ["#", "Node", "Op", "Outputs", "max |diff|", "rel error", "threshold", "Diverged", "Inputs moved"],
            (_node_cells(n, report.first) for n in report.top),
            css="nodes",
            empty="no node examined",
        )
    )
    if report.skipped:
        skipped = table(["Node", "Why"], ([esc(k), esc(v)] for k, v in report.skipped.items()))
        parts.append(f"<details><summary>{len(report.skipped)} node(s) skipped</summary>{skipped}</details>")
    return "".join(parts)


def _headline(report: LocalizationReport) -> str:
    first = report.first
    if first is None:
        return f'<div class="callout ok">No examined node diverged ({len(report.profile)} examined).</div>'
    origin = (
        "its inputs had already moved (the change came from upstream)"
        if first.inputs_diverged
        else "its inputs had not moved: this node introduced the change"
    )
    return (
        '<div class="callout">First divergent node: '
        f'<strong class="mono">{esc(first.name)}</strong> ({esc(first.op_type)}, #{first.index}),'
        f" relative error {esc(num(first.rel_error))}; {esc(origin)}.</div>"
    )


def _observer(report: LocalizationReport) -> str:
    if not report.observer_effect:
        return badge("none", "ok", title=report.observer_detail or None)
    return badge("present", "warn") + f" {esc(report.observer_detail)}"


def _node_cells(node: NodeDivergence, first: NodeDivergence | None) -> list[str]:
    name = f'<span class="mono">{esc(node.name)}</span>'
    if first is not None and node.index == first.index:
        name += " " + badge("first", "bad")
    return [
        esc(node.index),
        name,
        esc(node.op_type),
        f'<span class="mono">{esc(", ".join(node.outputs))}</span>',
        f'<span class="num">{esc(num(node.max_abs_error))}</span>',
        f'<span class="num">{esc(num(node.rel_error))}</span>',
        f'<span class="num">{esc(num(node.threshold))}</span>',
        badge("yes", "bad") if node.diverged else badge("no", "none"),
        "yes" if node.inputs_diverged else "no",
    ]
