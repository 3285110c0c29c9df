"""Small inline SVG charts for the status page: a sparkline and a run-history chart, both on a log scale.

The plotted value is a run's error ÷ tolerance (``error_ratio``, the largest over its outputs):
1 is the tolerance line. Zero is drawn at the bottom edge, +∞ at the top edge with a triangle,
and a run without a value (an error, or NaN) as a hollow marker on the bottom edge, so no run
silently disappears from the picture. Pure text out, no plotting library, no script.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from monitor.api.web.html import esc, num, url

COLORS = {"pass": "#16a34a", "fail": "#dc2626", "error": "#d97706"}
MARKER_COLORS = {"environment_changed": "#7c3aed", "baseline_promoted": "#0d9488", "model_changed": "#ea580c"}
MARKER_LETTERS = {"environment_changed": "E", "baseline_promoted": "B", "model_changed": "M"}
_FLOOR_EXP, _CEIL_EXP = -12, 12


@dataclass(frozen=True)
class Point:
    """One run on a chart."""

    at: datetime
    ratio: float | None
    verdict: str
    run_id: int


@dataclass(frozen=True)
class Marker:
    """A vertical line for an event (environment change, baseline promotion, model change)."""

    at: datetime
    kind: str
    label: str


def _usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def _exponent_range(values: Sequence[float | None]) -> tuple[int, int]:
    """Decades covering every finite positive value and 1 (the tolerance line)."""
    positive = [v for v in values if v is not None and _usable(v)]
    low = math.floor(math.log10(min([*positive, 1.0])))
    high = math.ceil(math.log10(max([*positive, 1.0])))
    if any(v == 0 for v in values):
        low -= 1  # leave room under the smallest value for exact zeros
    low, high = max(low, _FLOOR_EXP), min(high, _CEIL_EXP)
    return low, max(high, low + 1)


class _LogScale:
    """Decades top to bottom; when a value is +∞ a band above the highest decade holds it."""

    def __init__(self, values: Sequence[float | None], top: float, height: float, inf_band: float) -> None:
        self.low, self.high = _exponent_range(values)
        self.has_inf = any(v is not None and math.isinf(v) and v > 0 for v in values)
        band = inf_band if self.has_inf else 0.0
        self.inf_y = top
        self.top, self.height = top + band, height - band

    def y(self, value: float | None) -> float:
        """Pixel row of ``value``: zero and missing at the bottom, +∞ in its band at the top."""
        if value is None or math.isnan(value) or value <= 0:
            return self.top + self.height
        if math.isinf(value):
            return self.inf_y
        exponent = min(max(math.log10(value), self.low), self.high)
        return self.top + self.height * (self.high - exponent) / (self.high - self.low)


def _decade_label(exponent: int) -> str:
    return f"{10.0**exponent:g}" if -3 <= exponent <= 3 else f"1e{exponent}"


def sparkline(points: Sequence[Point], *, width: int = 150, height: int = 34) -> str:
    """The last runs' error ÷ tolerance, oldest left; a dashed line marks 1; the last point is coloured."""
    if not points:
        return '<span class="muted">no runs</span>'
    pad = 4
    scale = _LogScale([p.ratio for p in points], pad, height - 2 * pad, inf_band=6)
    step = (width - 2 * pad) / max(len(points) - 1, 1)
    xs = [pad + i * step if len(points) > 1 else width / 2 for i in range(len(points))]
    parts = [
        f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" role="img">',
        f"<title>{esc(_spark_title(points))}</title>",
        f'<line x1="0" x2="{width}" y1="{scale.y(1.0):.1f}" y2="{scale.y(1.0):.1f}" stroke="#dc2626"'
        ' stroke-opacity=".45" stroke-dasharray="3 2"/>',
    ]
    line = " ".join(f"{x:.1f},{scale.y(p.ratio):.1f}" for x, p in zip(xs, points, strict=True) if p.ratio is not None)
    if line:
        parts.append(f'<polyline points="{line}" fill="none" stroke="#64748b" stroke-width="1.3"/>')
    for x, p in zip(xs, points, strict=True):
        if p.verdict != "pass" or p is points[-1]:
            parts.append(
                f'<circle cx="{x:.1f}" cy="{scale.y(p.ratio):.1f}" r="{2.8 if p is points[-1] else 2}"'
                f' fill="{COLORS.get(p.verdict, "#6b7280")}"/>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _spark_title(points: Sequence[Point]) -> str:
    last = points[-1]
    return f"last {len(points)} runs: error ÷ tolerance; latest {num(last.ratio)} ({last.verdict})"


def history_chart(points: Sequence[Point], markers: Sequence[Marker], *, width: int = 1100, height: int = 300) -> str:
    """Every run's error ÷ tolerance over time (log scale) with event lines; each point links to its run."""
    if not points:
        return '<p class="muted">no runs yet</p>'
    left, right, top, bottom = 58, 18, 26, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    scale = _LogScale([p.ratio for p in points], top, plot_h, inf_band=22)
    times = [p.at.timestamp() for p in points] + [m.at.timestamp() for m in markers]
    start, end = min(times), max(times)
    span = end - start or 1.0
    if end == start:
        start -= 0.5

    def x_of(moment: datetime) -> float:
        return left + plot_w * (moment.timestamp() - start) / span

    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" font-size="11" role="img">',
        "<title>error ÷ tolerance per run (log scale)</title>",
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#d1d5db"/>',
    ]
    every = max(1, math.ceil((scale.high - scale.low) / 8))
    for exponent in range(scale.low, scale.high + 1, every):
        y = scale.y(10.0**exponent)
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#f1f5f9"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#6b7280">{_decade_label(exponent)}</text>'
        )
    if scale.has_inf:
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{scale.top - 6:.1f}" y2="{scale.top - 6:.1f}" stroke="#e5e7eb"'
            ' stroke-dasharray="2 3"/>'
            f'<text x="{left - 6}" y="{scale.inf_y + 5:.1f}" text-anchor="end" fill="#6b7280">∞</text>'
        )
    one = scale.y(1.0)
    parts.append(
        f'<line x1="{left}" x2="{left + plot_w}" y1="{one:.1f}" y2="{one:.1f}" stroke="#dc2626"'
        ' stroke-dasharray="5 3"><title>1 = the absolute tolerance</title></line>'
        f'<text x="{left + plot_w - 4}" y="{one - 4:.1f}" text-anchor="end" fill="#dc2626">tolerance</text>'
    )
    parts += _time_ticks(start, span, left, plot_w, top + plot_h)
    label_x = math.inf
    for marker in sorted(markers, key=lambda m: m.at, reverse=True):  # right to left, so labels can step aside
        x = x_of(marker.at)
        label_x = min(x, label_x - 16)
        parts.append(_marker(marker, x, max(label_x, left), top, plot_h))
    line = " ".join(f"{x_of(p.at):.1f},{scale.y(p.ratio):.1f}" for p in points if p.ratio is not None)
    if line:
        parts.append(f'<polyline points="{line}" fill="none" stroke="#94a3b8" stroke-width="1.2"/>')
    for p in points:
        parts.append(_point(p, x_of(p.at), scale.y(p.ratio)))
    parts.append("</svg>")
    return "".join(parts)


def _time_ticks(start: float, span: float, left: float, plot_w: float, baseline_y: float) -> list[str]:
    fmt = "%H:%M:%S" if span < 3600 else "%m-%d %H:%M" if span < 7 * 86400 else "%Y-%m-%d"
    parts = []
    for i in range(5):
        moment = start + span * i / 4
        x = left + plot_w * i / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        label = datetime.fromtimestamp(moment, UTC).strftime(fmt)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{baseline_y}" y2="{baseline_y + 4}" stroke="#9ca3af"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{baseline_y + 16}" text-anchor="{anchor}" fill="#6b7280">{esc(label)}</text>'
        )
    return parts


def _marker(marker: Marker, x: float, label_x: float, top: float, plot_h: float) -> str:
    color = MARKER_COLORS.get(marker.kind, "#6b7280")
    letter = MARKER_LETTERS.get(marker.kind, "•")
    tip = esc(marker.label)
    return (
        f"<g><title>{tip}</title>"
        f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="{color}" stroke-width="1.5"'
        ' stroke-dasharray="2 2"/>'
        f'<rect x="{label_x - 7:.1f}" y="{top - 18}" width="14" height="14" rx="3" fill="{color}"/>'
        f'<text x="{label_x:.1f}" y="{top - 7}" text-anchor="middle" fill="#fff" font-weight="700">{letter}</text></g>'
    )


def _point(p: Point, x: float, y: float) -> str:
    color = COLORS.get(p.verdict, "#6b7280")
    tip = esc(f"run #{p.run_id} · {p.verdict} · {p.at:%Y-%m-%d %H:%M:%S} UTC · error ÷ tolerance {num(p.ratio)}")
    if p.ratio is None or math.isnan(p.ratio):
        shape = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#fff" stroke="{color}" stroke-width="2"/>'
    elif math.isinf(p.ratio):
        shape = f'<path d="M{x - 5:.1f},{y + 7:.1f} L{x:.1f},{y:.1f} L{x + 5:.1f},{y + 7:.1f} Z" fill="{color}"/>'
    else:
        shape = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}" stroke="#fff" stroke-width="1"/>'
    return f'<a href="{esc(url("runs", str(p.run_id)))}"><title>{tip}</title>{shape}</a>'
