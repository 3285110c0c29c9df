"""The localization section of a run page: first changed and first out-of-tolerance nodes, worst nodes, plot.

The daemon stores ``LocalizationReport.to_dict()`` under a failing run's ``details["localization"]``
(``localize_on_fail``), or ``{"error": ...}`` when localization itself failed; both are shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from monitor.api.web.html import badge, esc, facts, num, section, table
from monitor.localize import explorer
from monitor.localize.plot import plot_svg
from monitor.localize.report import LocalizationReport, NodeDivergence


def node_data(details: Mapping[str, Any], model_path: Path) -> dict[str, Any]:
    """The run's localization as Model Explorer node data (``localize/explorer.py``); empty results without one."""
    try:
        graph = explorer.graph_name(model_path)
    except Exception:  # the model file moved or is unreadable now: the adapter's default graph name
        graph = "main_graph"
    data = details.get("localization")
    if not isinstance(data, Mapping) or "error" in data:
        return {graph: {"results": {}}}
    try:
        report = LocalizationReport.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return {graph: {"results": {}}}
    return explorer.node_data(report, graph)


def render(details: Mapping[str, Any], *, explorer_url: str = "") -> str:
    """The section, or an empty string when the run was not localized; ``explorer_url`` links its node data."""
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
    body = _report(report)
    if explorer_url:
        body += (
            f'<p>On the graph: <a href="{esc(explorer_url)}">Model Explorer node data</a> (per-node relative'
            ' error; out of tolerance red, changed orange), for <span class="mono">model-explorer MODEL.onnx'
            " --extensions=model_explorer_onnx --node_data_paths=FILE.json</span></p>"
        )
    return section("Localization: where the model moved", body, anchor="localization")


def _report(report: LocalizationReport) -> str:
    parts = [_headline(report)]
    sides = {
        "baseline": "the baseline's stored intermediates",
        "unoptimized": "the same model, unoptimized on CPU",
        "model": f"the reference model {report.reference_model}",
    }
    parts.append(
        facts(
            [
                ("compared against", esc(sides.get(report.against, report.against))),
                ("changed means", esc(f"{report.comparison.replace('_', ' ')}: {report.comparison_detail}")),
                ("out of tolerance means", esc(report.rule_detail or report.threshold_rule)),
                ("graph level", esc(f"{report.graph_level} ({report.graph_view} graph): {report.graph_level_detail}")),
                ("search", esc(report.mode)),
                ("nodes examined", esc(f"{len(report.profile)} of {report.nodes_total or '?'}")),
                ("runs / time", esc(f"{report.runs} session run(s), {num(report.seconds)} s")),
                ("complete", badge("yes", "ok") if report.complete else badge("cut by the time budget", "warn")),
                ("reference", _reference(report)),
            ]
        )
    )
    if report.notes:
        parts.append('<ul class="reasons">' + "".join(f"<li>{esc(n)}</li>" for n in report.notes) + "</ul>")
    parts.append(f'<div class="plot">{plot_svg(report)}</div>')
    parts.append("<h2>Worst nodes</h2>")
    parts.append(
        table(
            ["#", "Node", "Op", "Outputs", "max |diff|", "rel error", "Changed", "Out of tolerance", "Inputs changed"],
            (_node_cells(n, report) for n in report.top),
            css="nodes",
            empty="no node examined",
        )
    )
    if report.skipped:
        skipped = table(["Tensor", "Why"], ([esc(k), esc(v)] for k, v in report.skipped.items()))
        parts.append(f"<details><summary>{len(report.skipped)} tensor(s) skipped</summary>{skipped}</details>")
    return "".join(parts)


def _headline(report: LocalizationReport) -> str:
    lines = []
    for what, node in (
        ("First changed node", report.first_changed),
        ("First node out of tolerance", report.first_out_of_tolerance),
    ):
        if node is None:
            lines.append(f"{what}: none.")
            continue
        origin = (
            "its inputs had already changed (the change came from upstream)"
            if node.inputs_changed
            else "its inputs had not changed: this node introduced the change"
        )
        fused = ""
        if node.optimized_node:  # a node of ORT's optimized graph, mapped back: say what it stands for
            fused = f' Computed by ORT\'s <span class="mono">{esc(node.optimized_node)}</span>'
            if node.fused_from:
                fused += ", which replaced " + ", ".join(f'<span class="mono">{esc(n)}</span>' for n in node.fused_from)
            fused += "."
        lines.append(
            f'{what}: <strong class="mono">{esc(node.name)}</strong> ({esc(node.op_type)}, #{node.index}),'
            f" max |diff| {esc(num(node.max_abs_error))}; {esc(origin)}.{fused}"
        )
    css = "callout ok" if report.first_changed is None and report.first_out_of_tolerance is None else "callout"
    return f'<div class="{css}">' + "<br>".join(lines) + "</div>"


def _reference(report: LocalizationReport) -> str:
    if not report.nondeterministic_reference:
        return badge("deterministic", "ok") if report.against != "baseline" else badge("stored", "none")
    names = ", ".join(report.nondeterministic_reference[:5])
    return badge("nondeterministic", "warn") + f" {esc(names)}"


def _node_cells(node: NodeDivergence, report: LocalizationReport) -> list[str]:
    name = f'<span class="mono">{esc(node.name)}</span>'
    if report.first_changed is not None and node.index == report.first_changed.index:
        name += " " + badge("first changed", "warn")
    if report.first_out_of_tolerance is not None and node.index == report.first_out_of_tolerance.index:
        name += " " + badge("first out of tolerance", "bad")
    return [
        esc(node.index),
        name,
        esc(node.op_type),
        f'<span class="mono">{esc(", ".join(node.outputs))}</span>',
        f'<span class="num">{esc(num(node.max_abs_error))}</span>',
        f'<span class="num">{esc(num(node.rel_error))}</span>',
        badge("yes", "warn") if node.changed else badge("no", "none"),
        badge("yes", "bad") if node.out_of_tolerance else badge("no", "none"),
        "yes" if node.inputs_changed else "no",
    ]
