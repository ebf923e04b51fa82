"""The dashboard's charts, drawn on the server as inline SVG
(django_bgtasks/admin/charts.py), without a database: stacked bars from the
bottom up, each with what it counts on hover; lines broken where a series
has no value, a lone point drawn as a dash; the scale's round top; and the
words in them escaped. (The dashboard that draws them:
tests/admin/test_dashboard.py.)"""

from __future__ import annotations

import re

from django_bgtasks.admin.charts import HEIGHT, WIDTH, Series, bars, lines


def written(value: float) -> str:
    return f"{value:g}"


def test_bars_stack_from_the_bottom_up_and_say_what_they_count_on_hover() -> None:
    stacks = [Series("succeeded", "ok", [3, 0, 1]), Series("failed", "bad", [2, None, 0])]
    chart = bars("ended", "Ended", ["10:00", "10:01", "10:02"], stacks, written)
    assert (chart.key, chart.title, chart.top, chart.series) == ("ended", "Ended", "5", stacks)
    svg = str(chart.svg)
    assert svg.startswith(
        f'<svg id="bgtasks-chart-ended" class="bgtasks-chart" viewBox="0 0 {WIDTH} {HEIGHT}"'
    )
    rects = re.findall(r"<rect ([^>]*)><title>([^<]*)</title></rect>", svg)
    # A bar a point, a third of the width each, 80% of it drawn; nothing for a 0 or None.
    assert rects == [
        (
            'class="bgtasks-chart-ok" x="33.33" y="40.00" width="266.67" height="60.00"',
            "10:00: succeeded 3, failed 2",
        ),
        (
            'class="bgtasks-chart-bad" x="33.33" y="0.00" width="266.67" height="40.00"',
            "10:00: succeeded 3, failed 2",
        ),
        (
            'class="bgtasks-chart-ok" x="700.00" y="80.00" width="266.67" height="20.00"',
            "10:02: succeeded 1, failed 0",
        ),
    ]


def test_lines_break_where_a_series_has_no_value_and_a_lone_point_is_a_dash() -> None:
    lag = Series("lag", "lag", [1.0, None, 0.5, 2.0])
    chart = lines("lag", "Lag", ["a", "b", "c", "d"], [lag], written)
    assert chart.top == "2"  # the largest value's round top
    svg = str(chart.svg)
    assert re.findall(r'<polyline class="bgtasks-chart-lag" points="([^"]*)"/>', svg) == [
        "41.67,50.00 208.33,50.00",  # the first point alone: a dash across its place
        "625.00,75.00 875.00,0.00",
    ]
    assert re.findall(r'cx="([^"]*)" cy="([^"]*)" r="0"><title>([^<]*)</title>', svg) == [
        ("125.00", "50.00", "a: lag 1"),
        ("625.00", "75.00", "c: lag 0.5"),
        ("875.00", "0.00", "d: lag 2"),
    ]
    # A fixed top (a ratio's 1.0): a value above it is drawn at the top.
    ratio = lines(
        "ratio", "Failure ratio", ["a", "b"], [Series("r", "r", [0.5, 2.0])], written, 1.0
    )
    assert ratio.top == "1" and 'points="250.00,50.00 750.00,0.00"' in str(ratio.svg)


def test_a_scales_top_is_1_2_or_5_times_a_power_of_ten() -> None:
    tops = {
        largest: lines("x", "X", ["a"], [Series("x", "x", [largest])], written).top
        for largest in (0.0, 0.07, 1.0, 1.5, 3.0, 5.0, 7.0, 120.0, 5000.0)
    }
    assert tops == {
        0.0: "1",  # nothing to scale: 1
        0.07: "0.1",
        1.0: "1",
        1.5: "2",
        3.0: "5",
        5.0: "5",
        7.0: "10",
        120.0: "200",
        5000.0: "5000",
    }
    empty = bars("x", "X", [], [Series("x", "x", [])], written)
    assert empty.top == "1" and "<rect" not in str(empty.svg)


def test_the_words_in_a_chart_are_escaped() -> None:
    hostile = '<script>alert("x")</script>'
    chart = bars("e", "E", [hostile], [Series(hostile, "ok", [1])], written)
    svg = str(chart.svg)
    assert "<script>" not in svg and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in svg
