"""Server-rendered SVG line charts for the dashboard (no JavaScript library, no CDN).

Input is the leader's queue samples (``awa.queue_samples``, one row per
queue per minute): cumulative terminal counts become per-minute rates by
differencing consecutive samples; depth is read as is.  A counter that
went down between two samples (a prune folding history is not a decrease,
but a DLQ purge or a retry moves jobs out of ``failed``) yields no rate for
that step rather than a negative one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

WIDTH = 640
HEIGHT = 160
PAD = 36


@dataclass(frozen=True)
class Series:
    label: str
    css: str
    #: One value per point (None: no value for that point).
    values: Sequence[float | None]


def per_minute(
    at: Sequence[dt.datetime], totals: Sequence[int]
) -> tuple[list[dt.datetime], list[float | None]]:
    """Rates per minute between consecutive samples of a cumulative counter."""
    times: list[dt.datetime] = []
    rates: list[float | None] = []
    for i in range(1, min(len(at), len(totals))):
        t0, v0, t1, v1 = at[i - 1], totals[i - 1], at[i], totals[i]
        seconds = (t1 - t0).total_seconds()
        times.append(t1)
        rates.append((v1 - v0) * 60.0 / seconds if seconds > 0 and v1 >= v0 else None)
    return times, rates


def line_chart(title: str, times: Sequence[dt.datetime], series: Sequence[Series]) -> SafeString:
    """An SVG chart of ``series`` over ``times`` with a y axis from 0 to the max."""
    values = [v for s in series for v in s.values if v is not None]
    if len(times) < 2 or not values:
        return format_html(
            '<div class="awa-chart awa-chart-empty"><h3>{}</h3>'
            "<p>Not enough samples yet (the leader records one a minute).</p></div>",
            title,
        )
    top = max(values) or 1.0
    start, end = times[0], times[-1]
    span = (end - start).total_seconds() or 1.0

    def x(t: dt.datetime) -> float:
        return PAD + (WIDTH - 2 * PAD) * (t - start).total_seconds() / span

    def y(v: float) -> float:
        return HEIGHT - PAD + (2 * PAD - HEIGHT) * v / top

    parts = [
        f'<svg class="awa-chart-svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<line class="awa-axis" x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" '
        f'y2="{HEIGHT - PAD}"/>',
        f'<line class="awa-axis" x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}"/>',
        f'<text class="awa-tick" x="{PAD - 4}" y="{PAD + 4}" text-anchor="end">'
        f"{_number(top)}</text>",
        f'<text class="awa-tick" x="{PAD - 4}" y="{HEIGHT - PAD}" text-anchor="end">0</text>',
        f'<text class="awa-tick" x="{PAD}" y="{HEIGHT - PAD + 14}">{start:%H:%M}</text>',
        f'<text class="awa-tick" x="{WIDTH - PAD}" y="{HEIGHT - PAD + 14}" '
        f'text-anchor="end">{end:%H:%M}</text>',
    ]
    for s in series:
        for run in _runs(times, s.values):
            points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in run)
            parts.append(f'<polyline class="awa-line {escape(s.css)}" points="{points}"/>')
    parts.append("</svg>")
    legend = "".join(
        f'<span class="awa-legend {escape(s.css)}">{escape(s.label)}</span>' for s in series
    )
    return mark_safe(  # noqa: S308 - every interpolated text above is escaped or numeric
        f'<div class="awa-chart"><h3>{escape(title)}</h3>{"".join(parts)}'
        f'<p class="awa-legends">{legend}</p></div>'
    )


def _runs(
    times: Sequence[dt.datetime], values: Sequence[float | None]
) -> list[list[tuple[dt.datetime, float]]]:
    """Unbroken stretches of points (a None breaks the line)."""
    runs: list[list[tuple[dt.datetime, float]]] = [[]]
    for t, v in zip(times, values, strict=False):
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((t, v))
    return [r for r in runs if r]


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:,.1f}"
