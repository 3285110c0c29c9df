"""An SVG picture of a localization: relative error per node on a log scale, both first nodes marked.

Plain SVG text (no plotting library), so the status page and reports can inline it.
Each point carries a ``<title>`` with the node name, op type and error, shown on hover.
"""

from __future__ import annotations

import math
from html import escape

from monitor.localize.report import LocalizationReport

WIDTH, HEIGHT = 720, 280
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 40
FLOOR = 1e-12  # a relative error of exactly 0 is drawn here


def plot_svg(report: LocalizationReport) -> str:
    """Per-node relative error (log scale) over topological index, with the threshold and first divergence."""
    points = [(n.index, n.rel_error, n) for n in report.profile]
    values = [_clamp(r) for _, r, _ in points] or [FLOOR]
    low = math.floor(math.log10(min([*values, report.rel_threshold])))
    high = math.ceil(math.log10(max([*values, report.rel_threshold])))
    high = max(high, low + 1)
    last_index = max([i for i, _, _ in points] + [max(report.nodes_total - 1, 1)])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(index: int) -> float:
        return LEFT + plot_w * index / last_index

    def y_of(value: float) -> float:
        return TOP + plot_h * (high - math.log10(_clamp(value))) / (high - low)

    title = escape(f"{report.model}: relative error per node ({report.mode}, graph level {report.graph_level})")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}"'
        f' viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f"<title>{title}</title>",
        f'<text x="{LEFT}" y="16" font-size="13">{title}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for exponent in range(low, high + 1):
        y = y_of(10.0**exponent)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">1e{exponent}</text>')
    threshold_y = y_of(report.rel_threshold)
    parts.append(
        f'<line x1="{LEFT}" y1="{threshold_y:.1f}" x2="{LEFT + plot_w}" y2="{threshold_y:.1f}"'
        ' stroke="#d08000" stroke-dasharray="4 3"><title>threshold</title></line>'
    )
    if points:
        path = " ".join(f"{x_of(i):.1f},{y_of(r):.1f}" for i, r, _ in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#3060c0" stroke-width="1.2"/>')
    for index, rel, node in points:
        color = "#c03030" if node.diverged else "#3060c0"
        tip = escape(f"#{index} {node.name} ({node.op_type}): rel error {rel:.3g}, max |diff| {node.max_abs_error:.3g}")
        parts.append(
            f'<circle cx="{x_of(index):.1f}" cy="{y_of(rel):.1f}" r="2.5" fill="{color}"><title>{tip}</title></circle>'
        )
    marks = [("first changed", report.first_changed, "#8040a0", TOP + 12)]
    marks.append(("first out of tolerance", report.first_out_of_tolerance, "#c03030", TOP + 26))
    for what, first, mark_color, text_y in marks:
        if first is None:
            continue
        x = x_of(first.index)
        label = escape(f"{what}: {first.name} ({first.op_type})")
        anchor = "end" if x > LEFT + plot_w * 0.6 else "start"
        parts.append(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot_h}" stroke="{mark_color}" stroke-width="1.5"/>'
        )
        parts.append(
            f'<text x="{x + (-4 if anchor == "end" else 4):.1f}" y="{text_y}" fill="{mark_color}"'
            f' text-anchor="{anchor}">{label}</text>'
        )
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">node index</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _clamp(value: float) -> float:
    if math.isnan(value) or math.isinf(value):
        return 1e12
    return min(max(value, FLOOR), 1e12)
