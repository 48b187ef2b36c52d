"""The terminal report: rich tables for the headline, stability, contract and next steps."""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from ..admission import ci_label, family_caption, level_text, percent
from ..assessment import Assessment, Status
from ..policy import Claim
from ..stats import PassRate, Quantiles, Stability
from .bounds import bounded

_STATUS_STYLE = {
    Status.QUALIFIED: "bold green",
    Status.REJECTED: "bold red",
    Status.INCONCLUSIVE: "bold yellow",
}
_RESULT_STYLE = {
    Stability.DETERMINISTIC: "green",
    Stability.STOCHASTIC: "red",
    Stability.UNDECIDED: "yellow",
}


def _listing(values: Sequence[str]) -> str:
    return ", ".join(values) if values else "none"


def _stability_table(a: Assessment) -> Table:
    table = Table(
        title="Stability by route",
        title_justify="left",
        expand=False,
        caption=family_caption(a),
        caption_justify="left",
    )
    unordered = bool(a.ambiguous_pairs)  # a column only when some pair could not be ordered
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("route", "left"),
        ("cases", "right"),
        ("pairs", "right"),
        ("flips", "right"),
        *((("unordered", "right"),) if unordered else ()),
        (f"{ci_label(a.policy.confidence)} CI", "left"),
        ("tolerance", "right"),
        ("stochastic at", "right"),
        ("result", "left"),
    )
    for column, justify in columns:
        table.add_column(column, justify=justify)
    pooled = "(pooled)" if a.policy.claim is Claim.TESTED else "(pooled, not gating)"
    rows = [(pooled, len(a.cases), a.pooled, False, a.ambiguous_pairs)]
    rows += [(r.route, r.cases, r.change, r.targeted, r.ambiguous_pairs) for r in a.routes]
    for name, cases, change, targeted, ambiguous in rows:
        table.add_row(
            name,
            str(cases),
            str(change.pairs),
            str(change.flips),
            *((str(ambiguous),) if unordered else ()),
            f"[{change.ci_low:.3f}, {change.ci_high:.3f}]",
            percent(change.tolerance) + (" (target)" if targeted else ""),
            level_text(change.level),
            Text(change.result.value, style=_RESULT_STYLE[change.result]),
        )
    return table


def _facts_table(title: str, rows: list[tuple[str, str]]) -> Table:
    """A two-column table of labelled facts."""
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value")
    for label, value in rows:
        table.add_row(label, value)
    return table


def _contract_table(a: Assessment) -> Table:
    c = a.coverage
    intended = ", ".join(f"{route} {n}" for route, n in c.intended.items())
    rows = [
        ("required", _listing(c.required) + ("" if c.declared else " (no contract declared)")),
        ("intended (cases)", intended or "none"),
        ("observed", _listing(c.observed)),
        ("missing intended", _listing(c.missing_intended)),
        ("missing observed", _listing(c.missing_observed)),
        *([("reached only unordered", _listing(c.unordered))] if c.unordered else []),
        ("outside the contract", _listing(c.unknown)),
        ("under-cased", _listing(c.under_cased)),
        ("critical missing", _listing(c.critical_missing)),
        ("satisfied", "yes" if c.satisfied else "no"),
    ]
    return _facts_table("Contract", rows)


def _evidence_table(a: Assessment) -> Table:
    t = a.trials
    errors = f"{t.errors}" + (
        " (" + ", ".join(f"{k} x{n}" for k, n in t.error_types.items()) + ")" if t.errors else ""
    )
    dominance = a.dominance
    rows = [
        ("run", f"{a.run.id} · suite {a.run.suite} · point {a.run.point}"),
        ("isolation", a.run.isolation.value),
        ("case ids", a.run.fingerprints),
        (
            "trials",
            f"{t.received} of {t.expected} planned received"
            + (f" (sized for {a.stopping.sized_for})" if a.stopping is not None else ""),
        ),
        ("outcomes", f"{t.decisions} decisions, {t.no_decisions} no-decisions, errors {errors}"),
        ("integrity", f"{t.conflicts} conflicts, {t.duplicates} harmless duplicates"),
        (
            "first decisions",
            f"{dominance.verdict or 'none'} on {percent(dominance.share)} of {dominance.cases} cases"
            + (" — collapsed" if dominance.collapsed else ""),
        ),
        (
            "new inputs",
            f"{a.population.result.value} over {a.population.cases} cases (a claim about inputs "
            f"not tested needs {a.population.cases_needed} cases that never flip)"
            + _set_aside(a)
            + (" · the claim" if a.policy.claim is Claim.POPULATION else " · reported"),
        ),
        *([("stopped", a.how_stopped)] if a.how_stopped is not None else []),
    ]
    return _facts_table("Evidence", rows)


def _quantile_row(stats: Quantiles, unit: str) -> str:
    (p50, _, _), (p95, low, high) = stats.p50, stats.p95
    judged = (
        f" · p95 under {stats.max_p95:g}: {stats.result.value if stats.result else ''}"
        if stats.max_p95 is not None
        else ""
    )
    return f"p50 {p50:.4g}{unit}, p95 {p95:.4g}{unit} CI [{low:.4g}, {high:.4g}] of {stats.trials}{judged}"


def _pass_row(passed: int, judged: int, rate: PassRate | None) -> str:
    row = f"{passed} of {judged} passed"
    if rate is not None:
        row += (
            f", CI [{percent(rate.ci_low)}, {percent(rate.ci_high)}] vs "
            f"{percent(rate.required)}: {rate.result.value}"
        )
    return row


def _tiers_table(a: Assessment) -> Table | None:
    """Invariants, pass rates, relations, latency and tool calls: only what the run measured."""
    rows = []
    if a.invariants.failed or a.invariants.warned:
        counts = [f"{n} blocked x{c}" for n, c in a.invariants.failed.items()]
        counts += [f"{n} warned x{c}" for n, c in a.invariants.warned.items()]
        rows.append(("invariants", ", ".join(counts)))
    if a.passes.judged or a.pass_rate is not None:
        skipped = f"; {a.passes.skipped} skipped the expensive tiers" if a.passes.skipped else ""
        pooled = _pass_row(a.passes.passed, a.passes.judged, a.pass_rate)
        rows.append((a.policy.pass_when.rate_name, pooled + skipped))
        for route, (passed, judged) in a.passes.routes.items():
            rows.append((f"  {route}", _pass_row(passed, judged, a.passes.route_rates.get(route))))
    for relation in a.relations:
        status = relation.status.value
        if relation.errored:  # a check that could not be made: a fault, not a verdict
            status += " (could not be checked on " + ", ".join(relation.errored) + ")"
        rows.append((f"relation {relation.name}", status))
    if a.latency is not None:
        rows.append(("latency", _quantile_row(a.latency, " ms")))
    if a.tool_calls is not None:
        rows.append(("tools per trial", _quantile_row(a.tool_calls, "")))
    return _facts_table("Tiers", rows) if rows else None


def assessment_view(assessment: Assessment) -> Group:
    """The whole report as one rich renderable (bounded: what it leaves out is stated)."""
    a, omitted = bounded(assessment)
    parts: list[RenderableType] = [Text(a.headline, style=_STATUS_STYLE[a.status]), Text("")]
    if a.reasons:
        parts.append(Text("Reasons", style="bold"))
        parts += [Text(f"  {r.code}: {r.message}") for r in a.reasons]
        parts.append(Text(""))
    parts += [_stability_table(a)]
    if a.flip_pairs:
        parts.append(Text("Flip pairs", style="bold"))
        parts += [Text(f"  {p.routes[0]} <-> {p.routes[1]}  x{p.count}") for p in a.flip_pairs]
    parts += [Text(""), _contract_table(a), _evidence_table(a)]
    if (tiers := _tiers_table(a)) is not None:
        parts.append(tiers)
    if a.next_steps:
        parts += [Text(""), Text("What to do next", style="bold")]
        parts += [Text(f"  {number}. {step}") for number, step in enumerate(a.next_steps, 1)]
    if note := omitted.sentence():
        parts += [Text(""), Text(note)]
    return Group(*parts)


def render_text(assessment: Assessment, *, color: bool = False, width: int = 110) -> str:
    """The terminal report as text (ANSI colours only when asked)."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=color, no_color=not color, width=width)
    console.print(assessment_view(assessment))
    return buffer.getvalue()


def _set_aside(a: Assessment) -> str:
    """What the case-level verdict left out when the cases' names mix schemes no trial links."""
    naming = a.case_names
    if naming.judged is None:
        return ""
    return (
        f" · judged on {naming.judged.describe()} alone, {naming.set_aside} of {naming.cases} "
        "cases set aside (names mixed)"
    )
