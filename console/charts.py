"""SVG chart geometry for the overview, computed on the server: the template only writes out the
shapes. Every mark carries its value (a data attribute and a <title>), each series has its own
pattern or marker shape as well as a colour, and the same figures go into a table."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from alerts.conditions import duration
from console.selectors.charts import Series, Window

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 64, 96, 12, 28  # the right margin holds each line's direct label
LABEL_GAP = 12  # direct labels closer than this are moved apart
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


@dataclass(frozen=True)
class Style:
    name: str  # the series key: CSS class `series-<name>`, pattern / marker id suffix
    label: str
    short: str = ""  # the direct label at the line's end (the label when empty)

    @property
    def direct(self) -> str:
        return self.short or self.label


@dataclass
class Mark:
    series: str
    bucket: datetime
    value: float
    text: str  # the value as people read it
    x: float
    y: float
    width: float = 0
    height: float = 0
    label_y: float = 0  # a direct label's height, moved clear of its neighbours
    partial: bool = False  # the bucket in progress: its count so far

    @property
    def corner_x(self) -> float:  # a line's square marker is centred on the point
        return round(self.x - 3, 2)

    @property
    def corner_y(self) -> float:
        return round(self.y - 3, 2)

    @property
    def label_x(self) -> float:
        return round(self.x + 8, 2)


@dataclass
class Line:
    style: Style
    segments: list[str]  # polyline `points`, split where a bucket has no sample
    points: list[Mark]
    last: Mark | None


@dataclass
class Chart:
    kind: str  # "bars" (stacked) or "lines"
    key: str
    title: str
    summary: str  # the chart in one sentence, for the image's accessible name
    window: Window
    styles: list[Style]
    bars: list[Mark] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    rows: list[tuple[str, list[str]]] = field(default_factory=list)  # the table: bucket, values
    starts: list[datetime] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    plot_w: int = PLOT_W
    plot_h: int = PLOT_H

    @property
    def baseline(self) -> int:
        return TOP + PLOT_H

    @property
    def right(self) -> int:
        return LEFT + PLOT_W

    @property
    def tick_x(self) -> int:
        return LEFT - 6

    @property
    def tick_y(self) -> int:
        return HEIGHT - 8


def count_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def count_ceiling(value: float) -> float:
    """2, 4 or 10 times a power of ten, at least `value` (the y axis' top; its half is whole)."""
    if value <= 2:
        return 2
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (2, 4, 10) if step * power >= value)


AGE_TOPS = [60 * m for m in (2, 10, 30, 60, 120, 240, 720, 1440, 2880, 10080, 20160)]


def age_ceiling(seconds: float) -> float:
    """A round age at least `seconds`: 2 min, 10 min, ... 2 weeks, then whole weeks."""
    return next((top for top in AGE_TOPS if top >= seconds), math.ceil(seconds / 604800) * 604800)


def _bucket_label(window: Window, start: datetime, partial: bool = False) -> str:
    label = start.strftime("%H:%M") if window.key in ("1h", "24h") else start.strftime("%a %d %H:%M")
    return f"{label} (so far)" if partial else label


def _frame(chart: Chart, top: float, value_text: Callable[[float], str]) -> None:
    """The y axis' ticks (0, half, top); on the time axis every tenth minute (1 h), every fourth
    hour (24 h) or each day's start (7 d)."""
    chart.y_ticks = [(TOP + PLOT_H - PLOT_H * f, value_text(top * f)) for f in (0, 0.5, 1)]
    step = PLOT_W / chart.window.buckets
    if chart.window.key == "1h":
        ticks = [(i, start.strftime("%H:%M")) for i, start in enumerate(chart.starts) if start.minute % 10 == 0]
    elif chart.window.key == "24h":
        ticks = [(i, start.strftime("%H:%M")) for i, start in enumerate(chart.starts) if start.hour % 4 == 0]
    else:
        ticks = [(i, start.strftime("%a %d")) for i, start in enumerate(chart.starts) if start.hour == 0]
    chart.x_ticks = [(round(LEFT + i * step, 2), label) for i, label in ticks]


def _y(value: float, top: float) -> float:
    return round(TOP + PLOT_H - PLOT_H * value / top, 2)


def stacked_bars(key: str, title: str, window: Window, series: Series, styles: list[Style]) -> Chart:
    totals = [sum(series.values[s.name][i] for s in styles) for i in range(window.buckets)]
    top = count_ceiling(max(totals, default=0))
    chart = Chart("bars", key, title, f"{title}, {window.label}: {sum(totals)} in all, at most {max(totals)} in one "
                  f"bucket.", window, styles)
    chart.starts = series.starts
    _frame(chart, top, count_text)
    step = PLOT_W / window.buckets
    for i, start in enumerate(series.starts):
        below = 0
        partial = i == series.in_progress
        for style in styles:
            value = series.values[style.name][i]
            if value:
                y = _y(below + value, top)
                chart.bars.append(Mark(style.name, start, value, count_text(value), round(LEFT + i * step + 1, 2), y,
                                       round(step - 2, 2), round(_y(below, top) - y, 2), partial=partial))
            below += value
        chart.rows.append((_bucket_label(window, start, partial),
                           [count_text(series.values[s.name][i]) for s in styles] + [count_text(totals[i])]))
    return chart


def lines(key: str, title: str, window: Window, series: Series, styles: list[Style],
          value_text: Callable[[float], str] = count_text, ceiling: Callable[[float], float] = count_ceiling) -> Chart:
    sampled = [v for s in styles for v in series.values[s.name] if v is not None]
    top = ceiling(max(sampled, default=0))
    # The latest whole bucket: a count so far is not yet what its bucket will read.
    whole = [i for i in range(window.buckets) if i != series.in_progress]
    latest = {s.name: next((series.values[s.name][i] for i in reversed(whole) if series.values[s.name][i] is not None),
                           None) for s in styles}
    now_text = "; ".join(f"{s.label} {value_text(latest[s.name])}" for s in styles if latest[s.name] is not None)
    chart = Chart("lines", key, title, f"{title}, {window.label}: " + (f"latest {now_text}." if now_text else "no samples."),
                  window, styles)
    chart.starts = series.starts
    _frame(chart, top, value_text)
    step = PLOT_W / window.buckets
    for style in styles:
        line = Line(style, [], [], None)
        segment: list[str] = []
        for i, start in enumerate(series.starts):
            value = series.values[style.name][i]
            if value is None or i == series.in_progress:
                # A gap in the samples, or the bucket in progress: the line stops (a count so far is
                # drawn as a hollow mark of its own, not as the line falling towards 0).
                if segment:
                    line.segments.append(" ".join(segment))
                segment = []
                if value is None:
                    continue
            mark = Mark(style.name, start, value, value_text(value), round(LEFT + (i + 0.5) * step, 2), _y(value, top),
                        partial=i == series.in_progress)
            line.points.append(mark)
            if not mark.partial:
                segment.append(f"{mark.x},{mark.y}")
        if segment:
            line.segments.append(" ".join(segment))
        complete = [point for point in line.points if not point.partial]
        line.last = complete[-1] if complete else None
        chart.lines.append(line)
    _separate_labels([line.last for line in chart.lines if line.last])
    for i, start in enumerate(series.starts):
        values = [series.values[s.name][i] for s in styles]
        chart.rows.append((_bucket_label(window, start, i == series.in_progress),
                           ["—" if v is None else value_text(v) for v in values]))
    return chart


def _separate_labels(lasts: list[Mark]) -> None:
    """Direct labels at the lines' ends, top to bottom, at least LABEL_GAP apart."""
    below = -LABEL_GAP
    for mark in sorted(lasts, key=lambda m: m.y):
        mark.label_y = max(mark.y, below + LABEL_GAP)
        below = mark.label_y


def age_text(seconds: float) -> str:
    return duration(seconds) if seconds else "0"
