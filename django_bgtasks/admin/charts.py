"""The dashboard's charts, drawn on the server as inline SVG: nothing to
load from a CDN, no script to draw them, and the same picture on every
browser and in a screenshot.

A chart is a plot (the SVG, stretched to its box's width, so its lines keep
their thickness with ``vector-effect``) and its words in HTML beside it (the
title, the top of the scale, the first and last times), which a stretched
SVG would distort. Each bar or point has a ``<title>``: hovering it says
the time and the values. Colours are admin.css's classes, from the admin's
own palette, so the dark theme has them too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

# The plot's own units: 1,000 wide, whatever its points, 100 high.
WIDTH, HEIGHT = 1000, 100


@dataclass(frozen=True)
class Series:
    """A chart's values, a point each (``None``: nothing to plot there)."""

    label: str
    css: str  # its colour's class in admin.css: bgtasks-chart-<css>
    values: Sequence[float | None]


@dataclass(frozen=True)
class Chart:
    """One chart: what the template writes around the plot, and the plot."""

    key: str  # its id in the page, for the tests and the live refresh
    title: str
    top: str  # the value at the top of the scale, written out
    series: Sequence[Series]
    svg: SafeString


def bars(
    key: str,
    title: str,
    when: Sequence[str],
    stacks: Sequence[Series],
    written: Callable[[float], str],
) -> Chart:
    """Stacked bars, a bar a point: the ``stacks`` from the bottom up."""
    top = _top(
        sum(value or 0 for value in column)
        for column in zip(*(s.values for s in stacks), strict=True)
    )
    width = WIDTH / max(len(when), 1)
    shapes = []
    for index, moment in enumerate(when):
        base = 0.0
        hover = ", ".join(f"{s.label} {written(s.values[index] or 0)}" for s in stacks)
        for series in stacks:
            value = series.values[index] or 0
            if value:
                height = HEIGHT * value / top
                shapes.append(
                    format_html(
                        '<rect class="bgtasks-chart-{}" x="{}" y="{}" width="{}"'
                        ' height="{}"><title>{}: {}</title></rect>',
                        series.css,
                        _n(index * width + width * 0.1),
                        _n(HEIGHT - base - height),
                        _n(width * 0.8),
                        _n(height),
                        moment,
                        hover,
                    )
                )
                base += height
    return Chart(key, title, written(top), stacks, _svg(key, shapes))


def lines(
    key: str,
    title: str,
    when: Sequence[str],
    series: Sequence[Series],
    written: Callable[[float], str],
    top: float | None = None,
) -> Chart:
    """A line each series, broken where it has no value; ``top`` fixes the
    scale (a ratio's 1.0), else it fits the largest value."""
    scale = top or _top(v for s in series for v in s.values if v is not None)
    step = WIDTH / max(len(when), 1)
    shapes = []
    for one in series:
        runs: list[list[str]] = [[]]
        for index, value in enumerate(one.values):
            if value is None:
                runs.append([])
                continue
            x, y = step * (index + 0.5), HEIGHT - HEIGHT * min(value, scale) / scale
            runs[-1].append(f"{x:.2f},{y:.2f}")
            shapes.append(
                format_html(
                    '<circle class="bgtasks-chart-{}" cx="{}" cy="{}" r="0">'
                    "<title>{}: {} {}</title></circle>",
                    one.css,
                    _n(x),
                    _n(y),
                    when[index],
                    one.label,
                    written(value),
                )
            )
        for run in runs:
            if len(run) == 1:  # a lone point: a dash, not an invisible line
                across, height = run[0].split(",")
                middle = float(across)
                run = [f"{middle - step / 3:.2f},{height}", f"{middle + step / 3:.2f},{height}"]
            if run:
                shapes.append(
                    format_html(
                        '<polyline class="bgtasks-chart-{}" points="{}"/>', one.css, " ".join(run)
                    )
                )
    return Chart(key, title, written(scale), series, _svg(key, shapes))


def _n(value: float) -> str:
    """A coordinate, to the hundredth of the plot's unit."""
    return f"{value:.2f}"


def _top(values: Iterable[float | None]) -> float:
    """A round top for a scale over ``values``: 1, 2 or 5 times a power of
    ten, at least the largest (1 when there is none)."""
    largest = max((value for value in values if value), default=0.0)
    if largest <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(largest))
    return next(m * power for m in (1, 2, 5, 10) if largest <= m * power * (1 + 1e-9))


def _svg(key: str, shapes: list[SafeString]) -> SafeString:
    grid = format_html_join(
        "",
        '<line class="bgtasks-chart-grid" x1="0" x2="{}" y1="{}" y2="{}"/>',
        ((WIDTH, y, y) for y in (0, HEIGHT // 2, HEIGHT)),
    )
    return format_html(
        '<svg id="bgtasks-chart-{}" class="bgtasks-chart" viewBox="0 0 {} {}"'
        ' preserveAspectRatio="none" role="img">{}{}</svg>',
        key,
        WIDTH,
        HEIGHT,
        grid,
        format_html_join("", "{}", ((shape,) for shape in shapes)),
    )
