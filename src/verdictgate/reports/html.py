"""The report as one self-contained HTML page: inline CSS and SVG, no script and no network,
drawn from the same Assessment as every other format. Its centre is a forest plot: each
route's change-rate interval against that route's tolerance, its result readable without
colour (a mark, a word and the numbers)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING

from ..admission import ci_label, interval, level_text, percent
from ..assessment import Assessment, Status
from ..stats import ChangeRate, Stability
from .bounds import Omitted, bounded
from .checks import checks
from .json_report import REPORT_SCHEMA

if TYPE_CHECKING:
    from ..baseline import Regression

PLOT_WIDTH = 600
LABEL_TEXT_WIDTH = 170
"""Where the result's word starts, after the route's name."""
LABEL_WIDTH = 290
RIGHT_MARGIN = 24
ROW_HEIGHT = 28
AXIS_HEIGHT = 34
TICKS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Change rates marked on the axis; the scale is the square root, so small rates (where the
tolerances are) get room while the whole range 0..1 still fits."""

RESULT_MARK = {Stability.DETERMINISTIC: "●", Stability.STOCHASTIC: "✖", Stability.UNDECIDED: "◆"}
"""Result -> its mark: the plot and the tables say it with a shape and a word, not colour."""

STATUS_MARK = {Status.QUALIFIED: "✔", Status.REJECTED: "✖", Status.INCONCLUSIVE: "◆"}

STYLE = """
:root { color-scheme: light; --ink: #1b1f24; --muted: #57606a; --line: #d0d7de;
  --det: #1a7f37; --stoch: #cf222e; --und: #9a6700; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
  margin: 0 auto; padding: 16px; max-width: 980px; overflow-wrap: anywhere; }
h1 { font-size: 1.5rem; margin: 0 0 4px; } h2 { font-size: 1.15rem; margin: 28px 0 8px; }
.status { display: inline-block; padding: 2px 10px; border-radius: 12px; font-weight: 600;
  border: 2px solid currentColor; }
.qualified { color: var(--det); } .rejected { color: var(--stoch); }
.inconclusive { color: var(--und); }
.meta, .note { color: var(--muted); } .headline { font-size: 1.05rem; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; overflow-wrap: normal; }
td { min-width: 4ch; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
svg.forest { width: 100%; min-width: 560px; height: auto; display: block; }
.id { overflow-wrap: anywhere; }
svg text { font: 13px system-ui, sans-serif; fill: var(--ink); }
svg .axis line, svg .grid { stroke: var(--line); }
svg .interval { stroke: var(--ink); stroke-width: 3; }
svg .tolerance { stroke: var(--muted); stroke-width: 2; stroke-dasharray: 4 3; }
svg .deterministic .estimate { fill: var(--det); }
svg .stochastic .estimate { fill: var(--stoch); }
svg .undecided .estimate { fill: var(--und); }
code { font-size: 0.9em; }
"""


def render_html(assessment: Assessment, regression: Regression | None = None) -> str:
    """The assessment as a self-contained HTML page (bounded like every report); with
    `regression`, what changed against a baseline (`check`)."""
    a, omitted = bounded(assessment)
    title = f"verdictgate: {a.status.value} — {a.run.suite} / {a.run.point}"
    sections = [
        _header(a),
        _against_baseline(regression),
        _reasons(a),
        _next_steps(a),
        _stability(a),
        _flip_pairs(a),
        _coverage(a),
        _quality(a),
        _evidence(a),
        _checks(a),
        _omitted(omitted),
    ]
    return page(title, sections, REPORT_SCHEMA)


def page(title: str, sections: Iterable[str], schema: str) -> str:
    """A whole page: the sections (already escaped) with the inline style, and a policy that
    lets the browser load nothing and run nothing."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        + "".join(section for section in sections if section)
        + f'<p class="note">{escape(schema)} · rendered by verdictgate</p></body></html>\n'
    )


def _against_baseline(regression: Regression | None) -> str:
    if regression is None:
        return ""
    if not regression.regressed:
        return (
            "<h2>Against the baseline</h2><p>No case changed its stable verdict; no route "
            "became unstable.</p>"
        )
    rows = [
        [
            f'<span class="id">{escape(c.case)}</span>',
            escape(c.route or "—"),
            escape(c.before or "—"),
            escape(c.after or "no stable verdict"),
        ]
        for c in regression.changed_cases
    ]
    unstable = "".join(
        f"<li>route {escape(route)} became unstable</li>" for route in regression.unstable_routes
    )
    return (
        '<h2>Against the baseline: <span class="rejected">✖ regression</span></h2>'
        + (table(["case", "route", "before", "after"], rows) if rows else "")
        + (f"<ul>{unstable}</ul>" if unstable else "")
    )


def _header(a: Assessment) -> str:
    status = a.status.value
    return (
        f'<h1><span class="status {status}" data-status="{status}">'
        f"{STATUS_MARK[a.status]} {escape(status)}</span> "
        f"{escape(a.run.suite)} / {escape(a.run.point)}</h1>"
        f'<p class="meta">run <code>{escape(a.run.id)}</code> · tolerance '
        f"{percent(a.policy.tolerance)} · {escape(a.policy.method.value)} rule · claim about "
        f"{'new inputs' if a.policy.claim.value == 'population' else 'the tested cases'}</p>"
        f'<p class="headline">{escape(a.headline)}</p>'
        + (
            '<p class="inconclusive">◆ The run is still collecting trials: this is not its '
            "final answer.</p>"
            if a.in_progress
            else ""
        )
    )


def _reasons(a: Assessment) -> str:
    if not a.reasons:
        return ""
    items = "".join(
        f"<li><code>{escape(r.code)}</code>: {escape(r.message)}</li>" for r in a.reasons
    )
    return f"<h2>Reasons</h2><ul>{items}</ul>"


def _scale(rate: float) -> float:
    """x of a change rate in the plot."""
    return LABEL_WIDTH + math.sqrt(min(max(rate, 0.0), 1.0)) * PLOT_WIDTH


def _row(label: str, route: str, change: ChangeRate, y: float) -> str:
    """One row of the forest plot: the label with the result's mark and word (first, so a
    narrow screen shows it before the plot scrolls), the row's tolerance line, the interval
    and the estimate (none without pairs: nothing was measured); its numbers are on the group
    for whoever reads the SVG, and in its title for a screen reader."""
    result = change.result
    mark = RESULT_MARK[result]
    low, high, tolerance = _scale(change.ci_low), _scale(change.ci_high), _scale(change.tolerance)
    middle = y + ROW_HEIGHT / 2
    estimate = (
        f'<text class="estimate" x="{_scale(change.rate):.2f}" y="{middle + 5:.1f}" '
        f'text-anchor="middle">{mark}</text>'
        if change.pairs
        else f'<text class="estimate" x="{low + 6:.2f}" y="{middle - 4:.1f}">no pairs</text>'
    )
    return (
        f'<g class="row {result.value}" data-route="{escape(route)}" '
        f'data-result="{result.value}" data-low="{change.ci_low!r}" '
        f'data-high="{change.ci_high!r}" data-tolerance="{change.tolerance!r}">'
        f"<title>{escape(label)}: {escape(interval(change))}, tolerance "
        f"{percent(change.tolerance)}: {result.value}</title>"
        f'<text x="4" y="{middle + 4:.1f}">{escape(short(label))}</text>'
        f'<text class="result" x="{LABEL_TEXT_WIDTH}" y="{middle + 4:.1f}">{mark} '
        f"{result.value}</text>"
        f'<line class="tolerance" x1="{tolerance:.2f}" x2="{tolerance:.2f}" y1="{y + 3:.1f}" '
        f'y2="{y + ROW_HEIGHT - 3:.1f}"/>'
        f'<line class="interval" x1="{low:.2f}" x2="{high:.2f}" y1="{middle:.1f}" '
        f'y2="{middle:.1f}"/>{estimate}</g>'
    )


def short(label: str, most: int = 22) -> str:
    """A label cut to `most` characters, with an ellipsis when cut."""
    return label if len(label) <= most else label[: most - 1] + "…"


def _forest(rows: Sequence[tuple[str, str, ChangeRate]]) -> str:
    """The forest plot of `rows` (label, route, change rate)."""
    height = AXIS_HEIGHT + ROW_HEIGHT * len(rows)
    width = LABEL_WIDTH + PLOT_WIDTH + RIGHT_MARGIN
    ticks = "".join(
        f'<line class="grid" x1="{_scale(t):.2f}" x2="{_scale(t):.2f}" y1="0" '
        f'y2="{height - AXIS_HEIGHT:.0f}"/>'
        f'<text x="{_scale(t):.2f}" y="{height - AXIS_HEIGHT + 18:.0f}" text-anchor="middle">'
        f"{percent(t)}</text>"
        for t in TICKS
    )
    body = "".join(
        _row(label, route, change, i * ROW_HEIGHT) for i, (label, route, change) in enumerate(rows)
    )
    return (
        f'<svg class="forest" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(_summary(rows))}">'
        f'<g class="axis">{ticks}</g>{body}</svg>'
    )


def _summary(rows: Sequence[tuple[str, str, ChangeRate]]) -> str:
    """The plot in one sentence, for a screen reader (each row's title holds its numbers)."""
    counts = {result: sum(1 for *_, c in rows if c.result is result) for result in Stability}
    return "Change-rate intervals against each tolerance: " + ", ".join(
        f"{n} {result.value}" for result, n in counts.items() if n
    )


def _stability(a: Assessment) -> str:
    rows = [("(pooled)", "", a.pooled)] + [(r.route, r.route, r.change) for r in a.routes]
    ci = f"{ci_label(a.policy.confidence)} CI"
    unordered = bool(a.ambiguous_pairs)  # a column only when some pair could not be ordered
    head = [
        "route",
        "cases",
        "pairs",
        "flips",
        *(["unordered"] if unordered else []),
        ci,
        "tolerance",
        "stochastic at",
        "result",
    ]
    routes_table = table(
        head,
        [
            [
                escape(label),
                *(str(n) for n in (cases, change.pairs, change.flips)),
                *([str(ambiguous)] if unordered else []),
                f"[{percent(change.ci_low)}, {percent(change.ci_high)}]",
                percent(change.tolerance) + (" (target)" if targeted else ""),
                level_text(change.level),
                f"{RESULT_MARK[change.result]} {change.result.value}",
            ]
            for label, cases, change, targeted, ambiguous in [
                ("(pooled)", len(a.cases), a.pooled, False, a.ambiguous_pairs),
                *[(r.route, r.cases, r.change, r.targeted, r.ambiguous_pairs) for r in a.routes],
            ]
        ],
        numeric=(1, 2, 3, 4) if unordered else (1, 2, 3),
    )
    return (
        "<h2>Stability</h2>"
        f'<p class="note">Each line is a route\'s change rate between reruns with its '
        f"{ci_label(a.policy.confidence)} interval; the dashed line is its tolerance. ● below it "
        "(deterministic), ✖ above it (stochastic), ◆ not decided. The axis is a square-root "
        "scale.</p>"
        + _undecided_note(a)
        + f'<div class="scroll">{_forest(rows)}</div>'
        + routes_table
        + _population(a)
    )


def _undecided_note(a: Assessment) -> str:
    """Why routes that are not decided leave the run's status as it is, when they do."""
    undecided = [r for r in a.routes if r.change.result is Stability.UNDECIDED and not r.targeted]
    if not undecided or a.status is not Status.QUALIFIED:
        return ""
    many = len(undecided) != 1
    routes, are, their, intervals = (
        ("routes", "are", "their", "their intervals")
        if many
        else ("route", "is", "its", "its interval")
    )
    return (
        f'<p class="note">{len(undecided)} {routes} {are} not decided on {their} own: too few '
        f"rerun pairs for {intervals} to clear the "
        "tolerance line, which is why the lines reach past it. That does not block the run: "
        "a route without a target of its own blocks it only when shown stochastic, and the "
        "run's own test is decided.</p>"
    )


def _population(a: Assessment) -> str:
    p, stop = a.population, a.how_stopped
    parts = [
        f"New inputs: {escape(p.result.value)} over {p.cases} cases (e-values "
        f"{p.e_det:.3g} below, {p.e_stoch:.3g} above; a claim about new inputs needs "
        f"{p.cases_needed} cases that never change)."
    ]
    if (naming := a.case_names).judged is not None:
        parts.append(
            f"Judged on the cases named by {escape(naming.judged.describe())} alone: "
            f"{naming.set_aside} of {naming.cases} cases, named otherwise and linked by no "
            "trial, were set aside."
        )
    if stop is not None:
        parts.append(f"The run could stop early: {escape(stop)}.")
    return "".join(f'<p class="note">{part}</p>' for part in parts)


def _flip_pairs(a: Assessment) -> str:
    if not a.flip_pairs:
        return ""
    return "<h2>Flip pairs</h2>" + table(
        ["between", "pairs"],
        [[escape(" ⇄ ".join(p.routes)), str(p.count)] for p in a.flip_pairs],
        numeric=(1,),
    )


def _coverage(a: Assessment) -> str:
    c = a.coverage
    if not c.declared:
        return '<h2>Contract</h2><p class="note">No contract was declared.</p>'
    observed = set(c.observed)
    rows = [
        [
            escape(route) + (" (critical)" if route in c.critical_missing else ""),
            str(c.intended.get(route, 0)),
            "yes" if route in observed else "not known" if route in c.unordered else "no",
            "; ".join(
                word
                for word, applies in (
                    ("no case intends it", route in c.missing_intended),
                    ("no trial reached it", route in c.missing_observed),
                    ("fewer cases than required", route in c.under_cased),
                    ("only tied paths, of unknown order, may have", route in c.unordered),
                )
                if applies
            )
            or "—",
        ]
        for route in c.required
    ]
    unknown = (
        f'<p class="note">Decisions outside the contract: {escape(", ".join(c.unknown))}</p>'
        if c.unknown
        else ""
    )
    return (
        "<h2>Contract</h2>"
        + table(["required route", "cases intended", "observed", "missing"], rows, numeric=(1,))
        + unknown
    )


def _quality(a: Assessment) -> str:
    rates = [(a.policy.pass_when.rate_name, a.pass_rate)] if a.pass_rate is not None else []
    rates += [(f"pass rate of {route}", rate) for route, rate in a.passes.route_rates.items()]
    rows = [
        [
            escape(name),
            f"{r.passed} of {r.judged} passed, CI [{percent(r.ci_low)}, {percent(r.ci_high)}]",
            f"required {percent(r.required)}: {r.result.value}",
        ]
        for name, r in rates
    ]
    for name, stats, unit in (("latency", a.latency, "ms"), ("tools per trial", a.tool_calls, "")):
        if stats is not None:
            (p50, _, _), (p95, low, high) = stats.p50, stats.p95
            judged = (
                f"p95 under {stats.max_p95:g}{unit}: {stats.result.value}"
                if stats.max_p95 is not None and stats.result is not None
                else "no threshold"
            )
            rows.append(
                [
                    name,
                    f"p50 {p50:.4g}{unit}, p95 {p95:.4g}{unit} CI [{low:.4g}, {high:.4g}] of "
                    f"{stats.trials} trials",
                    judged,
                ]
            )
    if not rows:
        return ""
    return "<h2>Quality</h2>" + table(["measure", "estimate", "judged"], rows)


def _evidence(a: Assessment) -> str:
    t = a.trials
    outcomes = f"{t.decisions} decisions, {t.no_decisions} no-decisions, {t.errors} errors"
    if t.errors:
        outcomes += " (" + escape(", ".join(f"{k} x{n}" for k, n in t.error_types.items())) + ")"
    integrity = f"{t.conflicts} conflicts, {t.duplicates} harmless duplicates, {t.late} late"
    rows = [
        ["trials", f"{t.received} of {t.expected} planned received"],
        ["outcomes", outcomes],
        ["integrity", integrity],
        ["isolation", escape(a.run.isolation.value)],
        ["case ids", escape(a.run.fingerprints)],
        ["rule", f"{escape(a.policy.method.value)}, tolerance {percent(a.policy.tolerance)}"],
    ]
    return "<h2>Evidence</h2>" + table(["", ""], rows, header=False)


def _checks(a: Assessment) -> str:
    return "<h2>Checks</h2>" + table(
        ["check", "result", "detail"],
        [[escape(c.name), escape(c.result.value), escape(c.message)] for c in checks(a)],
    )


def _next_steps(a: Assessment) -> str:
    if not a.next_steps:
        return ""
    items = "".join(f"<li>{escape(step)}</li>" for step in a.next_steps)
    return f"<h2>What to do next</h2><ol>{items}</ol>"


def _omitted(omitted: Omitted) -> str:
    sentence = omitted.sentence()
    return f'<p class="note">{escape(sentence)}</p>' if sentence else ""


def table(
    head: Sequence[str],
    rows: Iterable[Sequence[str]],
    numeric: Sequence[int] = (),
    header: bool = True,
) -> str:
    """A table of cells already escaped, in a box that scrolls on a narrow screen."""

    def cell(tag: str, index: int, text: str) -> str:
        kind = ' class="num"' if index in numeric else ""
        return f"<{tag}{kind}>{text}</{tag}>"

    head_row = (
        "<thead><tr>"
        + "".join(cell("th", i, escape(h)) for i, h in enumerate(head))
        + "</tr></thead>"
        if header
        else ""
    )
    body = "".join(
        "<tr>" + "".join(cell("td", i, text) for i, text in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<div class="scroll"><table>{head_row}<tbody>{body}</tbody></table></div>'
