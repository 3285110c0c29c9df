"""The geometry of the status page's two charts: a sparkline and a run-history chart, both on a log scale.

The plotted value is a run's error ÷ tolerance (``error_ratio``, the largest over its outputs):
1 is the tolerance line. Zero is drawn at the bottom edge, +∞ at the top edge with a triangle,
and a run without a value (an error, or NaN) as a hollow marker on the bottom edge, so no run
silently disappears from the picture. Numbers and labels out (``Spark``, ``Chart``); the SVG
itself is ``templates/charts.html``. No plotting library, no script.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from monitor.api.web.formats import num

COLORS = {"pass": "#16a34a", "fail": "#dc2626", "error": "#d97706"}
MARKER_COLORS = {"environment_changed": "#7c3aed", "baseline_promoted": "#0d9488", "model_changed": "#ea580c"}
MARKER_LETTERS = {"environment_changed": "E", "baseline_promoted": "B", "model_changed": "M"}
_GREY = "#6b7280"
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


@dataclass(frozen=True)
class Dot:
    """A drawn point: where, how big, which colour; ``shape`` is dot, hollow (no value) or inf (a triangle)."""

    x: float
    y: float
    color: str
    r: float = 4
    shape: str = "dot"
    tip: str = ""
    run_id: int = 0


@dataclass(frozen=True)
class Spark:
    width: int
    height: int
    title: str
    one_y: float
    line: str
    dots: list[Dot]


@dataclass(frozen=True)
class Label:
    """A text at ``at`` (a row for the y axis, a column for the time axis)."""

    at: float
    text: str
    anchor: str = "end"


@dataclass(frozen=True)
class EventLine:
    x: float
    label_x: float
    color: str
    letter: str
    tip: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int
    top: int
    plot_w: int
    plot_h: int
    decades: list[Label]
    inf_y: float | None  # the +∞ band's label row, when a value is +∞
    inf_line_y: float
    one_y: float
    ticks: list[Label]
    events: list[EventLine]
    line: str
    dots: list[Dot]


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


def sparkline(points: Sequence[Point], *, width: int = 150, height: int = 34) -> Spark | None:
    """The last runs' error ÷ tolerance, oldest left; a dashed line marks 1; the last point is coloured."""
    if not points:
        return None
    pad = 4
    scale = _LogScale([p.ratio for p in points], pad, height - 2 * pad, inf_band=6)
    step = (width - 2 * pad) / max(len(points) - 1, 1)
    xs = [pad + i * step if len(points) > 1 else width / 2 for i in range(len(points))]
    line = " ".join(f"{x:.1f},{scale.y(p.ratio):.1f}" for x, p in zip(xs, points, strict=True) if p.ratio is not None)
    dots = [
        Dot(x, scale.y(p.ratio), COLORS.get(p.verdict, _GREY), r=2.8 if p is points[-1] else 2)
        for x, p in zip(xs, points, strict=True)
        if p.verdict != "pass" or p is points[-1]
    ]
    last = points[-1]
    title = f"last {len(points)} runs: error ÷ tolerance; latest {num(last.ratio)} ({last.verdict})"
    return Spark(width, height, title, scale.y(1.0), line, dots)


def history_chart(
    points: Sequence[Point], markers: Sequence[Marker], *, width: int = 1100, height: int = 300
) -> Chart | None:
    """Every run's error ÷ tolerance over time (log scale) with event lines; each point links to its run."""
    if not points:
        return None
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

    every = max(1, math.ceil((scale.high - scale.low) / 8))
    decades = [Label(scale.y(10.0**e), _decade_label(e)) for e in range(scale.low, scale.high + 1, every)]
    events = []
    label_x = math.inf
    for marker in sorted(markers, key=lambda m: m.at, reverse=True):  # right to left, so labels can step aside
        x = x_of(marker.at)
        label_x = min(x, label_x - 16)
        color = MARKER_COLORS.get(marker.kind, _GREY)
        events.append(EventLine(x, max(label_x, left), color, MARKER_LETTERS.get(marker.kind, "•"), marker.label))
    return Chart(
        width=width,
        height=height,
        left=left,
        top=top,
        plot_w=plot_w,
        plot_h=plot_h,
        decades=decades,
        inf_y=scale.inf_y if scale.has_inf else None,
        inf_line_y=scale.top - 6,
        one_y=scale.y(1.0),
        ticks=_time_ticks(start, span, left, plot_w),
        events=events,
        line=" ".join(f"{x_of(p.at):.1f},{scale.y(p.ratio):.1f}" for p in points if p.ratio is not None),
        dots=[_dot(p, x_of(p.at), scale.y(p.ratio)) for p in points],
    )


def _time_ticks(start: float, span: float, left: float, plot_w: float) -> list[Label]:
    fmt = "%H:%M:%S" if span < 3600 else "%m-%d %H:%M" if span < 7 * 86400 else "%Y-%m-%d"
    return [
        Label(
            left + plot_w * i / 4,
            datetime.fromtimestamp(start + span * i / 4, UTC).strftime(fmt),
            "start" if i == 0 else "end" if i == 4 else "middle",
        )
        for i in range(5)
    ]


def _dot(p: Point, x: float, y: float) -> Dot:
    tip = f"run #{p.run_id} · {p.verdict} · {p.at:%Y-%m-%d %H:%M:%S} UTC · error ÷ tolerance {num(p.ratio)}"
    shape = "hollow" if p.ratio is None or math.isnan(p.ratio) else "inf" if math.isinf(p.ratio) else "dot"
    return Dot(x, y, COLORS.get(p.verdict, _GREY), shape=shape, tip=tip, run_id=p.run_id)
