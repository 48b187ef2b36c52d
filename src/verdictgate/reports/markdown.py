"""Markdown for CI job summaries (e.g. `$GITHUB_STEP_SUMMARY`)."""

from __future__ import annotations

from ..admission import ci_label, family_caption, level_text, percent
from ..assessment import Assessment, Status
from .bounds import bounded
from .checks import CheckResult, checks

_MARK = {
    Status.QUALIFIED: "✅",
    Status.REJECTED: "❌",
    Status.INCONCLUSIVE: "⚠️",
}
_CHECK_MARK = {
    CheckResult.PASSED: "✅ passed",
    CheckResult.FAILED: "❌ failed",
    CheckResult.UNDECIDED: "⚠️ undecided",
    CheckResult.NOT_JUDGED: "○ not judged",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(assessment: Assessment) -> str:
    """The assessment as a Markdown summary: headline, checks, routes, next steps (bounded)."""
    a, omitted = bounded(assessment)
    lines = [
        f"## {_MARK[a.status]} verdictgate: {a.status.value} — {_cell(a.run.suite)} / {_cell(a.run.point)}",
        "",
        _cell(a.headline),
        "",
        f"Run `{_cell(a.run.id)}` · isolation {a.run.isolation.value} · tolerance "
        f"{percent(a.policy.tolerance)} at {percent(a.policy.confidence)} confidence · trials "
        f"{a.trials.received}/{a.trials.expected} received, {a.trials.errors} errors, "
        f"{a.trials.conflicts} conflicts",
        "",
        "| check | result | detail |",
        "|---|---|---|",
    ]
    lines += [
        f"| {_cell(c.name)} | {_CHECK_MARK[c.result]} | {_cell(c.message)} |" for c in checks(a)
    ]
    if a.routes:
        unordered = bool(a.ambiguous_pairs)  # a column only when some pair could not be ordered
        lines += [
            "",
            f"| route | cases | pairs | flips |{' unordered |' if unordered else ''} "
            f"{ci_label(a.policy.confidence)} CI | tolerance | stochastic at | result |",
            f"|---|---:|---:|---:|{'---:|' if unordered else ''}---|---:|---:|---|",
        ]
        lines += [
            f"| {_cell(r.route)} | {r.cases} | {r.change.pairs} | {r.change.flips} | "
            + (f"{r.ambiguous_pairs} | " if unordered else "")
            + f"[{r.change.ci_low:.3f}, {r.change.ci_high:.3f}] | {percent(r.change.tolerance)} | "
            f"{level_text(r.change.level)} | {r.change.result.value} |"
            for r in a.routes
        ]
        if caption := family_caption(a):
            lines += ["", caption]
    if a.flip_pairs:
        lines += [
            "",
            "**Flip pairs:** "
            + ", ".join(
                f"`{_cell(p.routes[0])} <-> {_cell(p.routes[1])}` x{p.count}" for p in a.flip_pairs
            ),
        ]
    if a.next_steps:
        lines += ["", "### What to do next", ""] + [f"- {_cell(step)}" for step in a.next_steps]
    if note := omitted.sentence():
        lines += ["", f"_{_cell(note)}_"]
    return "\n".join(lines) + "\n"
