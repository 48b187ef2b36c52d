"""`compare --format html`: drift across builds as one self-contained page, each difference
(after minus before) drawn with its Newcombe interval against zero."""

from __future__ import annotations

import math
from html import escape

from ..drift import Comparison, Difference
from .html import page, short, table

PLOT_WIDTH = 600
LABEL_WIDTH = 200
RESULT_WIDTH = 180
ROW_HEIGHT = 28
TICKS = (-1.0, -0.25, -0.05, 0.0, 0.05, 0.25, 1.0)
"""Differences marked on the axis (a signed square-root scale, so small ones get room)."""


def _scale(value: float) -> float:
    half = PLOT_WIDTH / 2
    return LABEL_WIDTH + half + math.copysign(math.sqrt(min(abs(value), 1.0)), value) * half


def _rows(comparison: Comparison) -> list[tuple[str, Difference, bool]]:
    """(label, difference, whether higher is worse) of every difference, pooled then by route;
    a route's is gated when the route has a target, else reported."""
    rows = [
        ("change rate (pooled)", comparison.change, True),
        ("pass rate (pooled)", comparison.pass_rate, False),
    ]
    for r in comparison.routes:
        gate = "target" if r.targeted else "reported, not gated"
        rows += [
            (f"change rate of {r.route} ({gate})", r.change, True),
            (f"pass rate of {r.route} ({gate})", r.pass_rate, False),
        ]
    return rows


def _plot(rows: list[tuple[str, Difference, bool]]) -> str:
    height = ROW_HEIGHT * len(rows) + 34
    zero = _scale(0.0)
    marks = {"worse": "✖", "better": "●", "no change shown": "◆"}
    body = []
    for number, (label, difference, worse_if_higher) in enumerate(rows):
        assert difference.interval is not None
        value, low, high = difference.interval
        verdict = difference.shown(worse_if_higher)
        middle = number * ROW_HEIGHT + ROW_HEIGHT / 2
        body.append(
            f'<g class="row" data-label="{escape(label)}" data-difference="{value!r}" '
            f'data-low="{low!r}" data-high="{high!r}" data-verdict="{verdict}">'
            f'<text x="4" y="{middle + 4:.1f}">{escape(short(label, 30))}</text>'
            f'<line class="interval" x1="{_scale(low):.2f}" x2="{_scale(high):.2f}" '
            f'y1="{middle:.1f}" y2="{middle:.1f}"/>'
            f'<text x="{_scale(value):.2f}" y="{middle + 5:.1f}" text-anchor="middle">'
            f"{marks[verdict]}</text>"
            f'<text x="{LABEL_WIDTH + PLOT_WIDTH + 10}" y="{middle + 4:.1f}">{marks[verdict]} '
            f"{verdict}</text></g>"
        )
    ticks = "".join(
        f'<text x="{_scale(t):.2f}" y="{height - 14:.0f}" text-anchor="middle">{t:+.0%}</text>'
        for t in TICKS
    )
    return (
        f'<svg class="forest" viewBox="0 0 {LABEL_WIDTH + PLOT_WIDTH + RESULT_WIDTH} {height}" '
        'role="img" aria-label="differences after minus before, against zero">'
        f'<line class="zero tolerance" x1="{zero:.2f}" x2="{zero:.2f}" y1="0" '
        f'y2="{height - 30:.0f}"/>{ticks}{"".join(body)}</svg>'
    )


def _difference(d: Difference) -> str:
    """A difference with its interval, or a dash when it has none."""
    if d.interval is None:
        return "—"
    value, low, high = d.interval
    return f"{value:+.3f} [{low:+.3f}, {high:+.3f}]"


def render_comparison_html(comparison: Comparison) -> str:
    """The comparison as a self-contained HTML page: the comparable differences drawn, every
    one in the table."""
    rows = _rows(comparison)
    verdict = "regression" if comparison.regression else "no regression"
    cells = [
        [
            escape(label),
            f"{d.before[0]}/{d.before[1]}",
            f"{d.after[0]}/{d.after[1]}",
            _difference(d),
            d.shown(worse_if_higher),
        ]
        for label, d, worse_if_higher in rows
    ]
    status = "rejected" if comparison.regression else "qualified"
    sections = [
        f'<h1><span class="status {status}">{"✖" if comparison.regression else "✔"} '
        f"{verdict}</span> after minus before</h1>",
        '<p class="note">Each line is a difference between two builds with its 95% Newcombe '
        "interval; the dashed line is zero. A change rate that rose, or a pass rate that fell, "
        "wholly beyond zero is worse: on the pooled rates or a targeted route it is a "
        "regression.</p>",
        f'<div class="scroll">{_plot([row for row in rows if row[1].comparable])}</div>',
        table(["measure", "before", "after", "difference", "verdict"], cells),
    ]
    return page(f"verdictgate compare: {verdict}", sections, "verdictgate.compare/v1")
