"""The `verdictgate` command: parse, call, render. Exit 0 qualified, 1 rejected, 3 inconclusive,
2 usage or input error."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from ..baseline import (
    Regression,
    baseline_from_document,
    check,
    regression_document,
    snapshot,
)
from ..errors import USAGE_EXIT, InputError, SnapshotRefused
from ..plan import plan_run, repeats_for, rounds_for, sequential_trials
from ..policy import PRECISION_PRESETS, Policy
from ..sequential.design import default_max_pairs, sequential_design
from ..sequential.rule import population_cases_needed, sequential_policy
from ..stats import (
    MAX_SEQUENTIAL_TOLERANCE,
    Method,
    pairs_needed,
    pairs_to_qualify,
    side_error,
)
from ..suite import Suite
from ..suite_file import load_suite, read_json
from ..wire_types import JsonObject
from .agent_run import AGENT_REQUIRED, AgentRun, evidence_for, exit_after
from .calibrate import calibrate_command
from .flag_options import OptionValue, suite_from, suite_option, takes, trials_option
from .policy_flags import PolicyFlags, policy_for
from .receiver import serve_command
from .reporting import FORMATS, Output, emit, fail, handles_errors
from .sources import assess_command, convert_command
from .status import status_command

if TYPE_CHECKING:  # compare loads only when a command compares
    from ..drift import Comparison, Difference, Summary


class _OneLineErrors(click.Group):
    """Click's usage errors as one line on stderr (`verdictgate: error: ...`), exit 2."""

    def main(self, *args: OptionValue, **kwargs: OptionValue) -> NoReturn:
        kwargs["standalone_mode"] = False
        try:
            code: object = super().main(*args, **kwargs)
        except click.ClickException as error:
            if isinstance(error, click.exceptions.NoArgsIsHelpError):  # bare `verdictgate`
                click.echo(error.format_message(), err=True)
                sys.exit(USAGE_EXIT)
            fail(error.format_message().replace("\n", " "))
        except click.Abort:
            click.echo("verdictgate: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="verdictgate")
def main() -> None:
    """Admit or refuse an agent's test run as a regression baseline.

    \b
    Where to start:
      verdictgate plan --suite SUITE.json           what a run needs, before any call
      verdictgate run --agent FILE.py:FACTORY --suite SUITE.json
                                                    call the agent and assess its answers
      verdictgate assess --promptfoo RESULTS.json   (or --deepeval, --trials, ...) assess
                                                    results you already have, no model call
    Exit codes: 0 qualified, 1 rejected, 3 inconclusive, 2 usage or input error.
    """


@main.command("run")
@takes(AgentRun, "agent_run", agent_spec=AGENT_REQUIRED)
@suite_option("The cases to call the agent with, and their contract.", required=True)
@takes(PolicyFlags, "policy")
@takes(Output, "output")
@handles_errors
def run_command(suite_path: str, policy: PolicyFlags, output: Output, agent_run: AgentRun) -> None:
    """Call an agent on every suite case, repeatedly, and assess the trials."""
    suite = suite_from(suite_path)
    assessment = evidence_for(None, suite, policy.policy(suite), agent_run)
    output.emit(assessment)
    exit_after(assessment, agent_run)


def _parse_observed(value: str) -> tuple[int, int]:
    flips, sep, pairs = value.partition("/")
    try:
        parsed = int(flips), int(pairs)
    except ValueError:
        parsed = None
    if not sep or parsed is None or not 0 <= parsed[0] <= parsed[1]:
        raise click.BadParameter(
            "expected FLIPS/PAIRS with 0 <= FLIPS <= PAIRS, e.g. 1/73", param_hint="--observed"
        )
    return parsed


@main.command("plan")
@click.option("--tolerance", type=float, help="Tolerated change rate (default 0.05).")
@click.option(
    "--precision",
    type=click.Choice(list(PRECISION_PRESETS)),
    help="A preset tolerance instead of --tolerance.",
)
@suite_option("Size repeats for this suite.")
@click.option("--observed", help="FLIPS/PAIRS seen so far: how many pairs it takes to qualify.")
@click.option(
    "--pass-rate", type=float, help="Also: judged trials needed to show a pass rate above this."
)
@click.option("--repeats", type=int, help="With --suite: trials per case instead of sizing.")
@click.option("--budget", type=int, help="With --suite: refuse a plan above this many calls.")
@click.option(
    "--method",
    type=click.Choice([m.value for m in Method]),
    help="Size by this rule: exact (default), wilson or sequential; all are shown.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@handles_errors
def plan_command(
    tolerance: float | None,
    precision: str | None,
    suite_path: str | None,
    observed: str | None,
    pass_rate: float | None,
    repeats: int | None,
    budget: int | None,
    method: str | None,
    fmt: str,
) -> None:
    """Price a run without calling anything: pairs and calls needed."""
    suite = suite_from(suite_path)
    policy = policy_for(suite, tolerance, precision, method=method)
    priced = _Pricing()
    needed = _price_pairs(priced, policy)
    _price_sequential_design(priced, policy.tolerance)
    cases = population_cases_needed(policy.tolerance, side_error(policy.confidence))
    priced.document["population_cases_needed"] = cases
    priced.lines.append(
        f"a claim about new inputs needs at least {cases} cases, none of which changes"
    )
    if observed is not None:
        _price_observed(priced, policy, *_parse_observed(observed))
    if pass_rate is not None:
        _price_pass_rate(priced, policy, pass_rate)
    if suite is not None:
        _price_suite(priced, suite, policy, needed, repeats, budget)
    text = "\n".join([*priced.answers, *priced.lines])
    click.echo(json.dumps(priced.document, indent=2) if fmt == "json" else text)


@dataclasses.dataclass
class _Pricing:
    """What `plan` prints, built a part at a time: the JSON document and the text lines, the
    answers to what `--observed` and `--pass-rate` asked first."""

    document: JsonObject = dataclasses.field(default_factory=dict)
    lines: list[str] = dataclasses.field(default_factory=list)
    answers: list[str] = dataclasses.field(default_factory=list)


def _price_pairs(priced: _Pricing, policy: Policy) -> int:
    """The pairs (and calls) the policy's rule needs, beside every other rule's; the pairs."""
    t, confidence = policy.tolerance, policy.confidence
    needed = pairs_needed(t, confidence, policy.method)
    by_method = {
        m.value: pairs_needed(t, confidence, m)
        for m in Method
        if m is not Method.SEQUENTIAL or t < MAX_SEQUENTIAL_TOLERANCE  # beyond its reach
    }
    priced.document.update(
        {
            "tolerance": t,
            "confidence": confidence,
            "method": policy.method.value,
            "pairs_needed": needed,
            "calls_needed": 2 * needed,
            "pairs_needed_by_method": by_method,
        }
    )
    others = ", ".join(f"{m}: {n}" for m, n in by_method.items() if m != policy.method.value)
    priced.lines.append(
        f"with no flip, {needed} pairs at {t:g} ({2 * needed} calls, by the "
        f"{policy.method.value} rule; {others})"
    )
    return needed


def _price_sequential_design(priced: _Pricing, t: float) -> None:
    """How one sequential test at tolerance `t` ends for agents that flip more or less often
    (nothing beyond the rule's reach or beyond what `plan` prices exactly)."""
    if not (t < MAX_SEQUENTIAL_TOLERANCE and default_max_pairs(t) <= MAX_PRICED_PAIRS):
        return
    designs = [sequential_design(t, p) for p in (0.0, t / 4, t, 2 * t, 4 * t)]
    priced.document["sequential_design"] = [dataclasses.asdict(d) for d in designs]
    priced.lines.append(
        f"sequential rule, one test looked at after every pair, at most "
        f"{default_max_pairs(t)} pairs (a run looks after each round of every case and "
        "waits for every targeted route: --suite prices it):\n"
        "  pairs flip  expected pairs  deterministic  stochastic  undecided"
    )
    priced.lines += [
        f"  {d.flip_chance:<10.4g}  {d.expected_pairs:<14.1f}  {d.deterministic:<13.2%}"
        f"  {d.stochastic:<10.2%}  {d.undecided:.2%}"
        for d in designs
    ]


def _price_observed(priced: _Pricing, policy: Policy, flips: int, pairs: int) -> None:
    """`--observed FLIPS/PAIRS`: the pairs it takes in total to qualify, if any can."""
    t = policy.tolerance
    total = pairs_to_qualify(flips, pairs, t, policy.confidence, policy.method)
    priced.document["observed"] = {
        "flips": flips,
        "pairs": pairs,
        "total_pairs": total,
        "more_pairs": None if total is None else total - pairs,
    }
    if total is None:
        priced.answers.append(f"{flips}/{pairs}: cannot qualify at {t:g} however many pairs agree")
    else:
        priced.answers.append(
            f"{flips}/{pairs} -> {total} pairs in total: {total - pairs} more pairs "
            f"({2 * (total - pairs)} calls) if every one agrees"
        )


def _price_pass_rate(priced: _Pricing, policy: Policy, pass_rate: float) -> None:
    """`--pass-rate`: the judged trials, all passing, that show the rate."""
    from ..stats import trials_needed_for_pass_rate

    try:
        judged = trials_needed_for_pass_rate(pass_rate, policy.confidence, policy.method)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--pass-rate") from None
    priced.document["pass_rate"] = {"required": pass_rate, "judged_trials_needed": judged}
    priced.answers.append(
        f"{judged} judged trials, all passing, show a pass rate above {pass_rate:g}"
    )


def _price_suite(
    priced: _Pricing,
    suite: Suite,
    policy: Policy,
    needed: int,
    repeats: int | None,
    budget: int | None,
) -> None:
    """`--suite`: the run's plan (refused above `budget`), its family of tests, and what a
    sequential run of it would call."""
    plan = plan_run(suite, policy, repeats=repeats, budget=budget)
    per_case = sorted(set(plan.repeats.values()))
    document: JsonObject = {
        "cases": len(suite.cases),
        "calls": plan.calls,
        "repeats": dict(plan.repeats),
        "base_repeats": repeats_for(needed, len(suite.cases)),
    }
    priced.document["suite"] = document
    priced.lines.append(
        f"suite {suite.name}: {len(suite.cases)} cases x {'/'.join(map(str, per_case))} "
        f"trials = {plan.calls} calls"
    )
    tests = 1 + len({case.expected for case in suite.cases if case.expected is not None})
    document["family_tests"] = tests
    if tests > 1:
        priced.lines.append(_family_note(tests, policy))
    if sequential := _sequential_suite_calls(suite, policy):
        certify, most = sequential
        document["sequential"] = {"calls_to_certify": certify, "most_calls": most}
        priced.lines.append(
            f"  sequentially (a look after each round of every case): {certify} calls to "
            f"qualify an agent that never flips, {most} at most"
        )


def _family_note(tests: int, policy: Policy) -> str:
    """Why a run of several tests is sized as one: the Holm correction touches only the
    stochastic side."""
    return (
        f"  a stochastic verdict is held to {side_error(policy.confidence):.1%} across the "
        f"run's {tests} tests together (Holm); qualifying needs the pooled test and "
        "every targeted route deterministic, which needs no correction, so the plan's "
        "size is unchanged"
        + (
            "; Wilson's rule does not hold a test to its level"
            if policy.method is Method.WILSON
            else ""
        )
    )


MAX_PRICED_PAIRS = 20_000
"""The longest sequential test `plan` prices exactly (t >= 0.00075); beyond, the forward pass
takes seconds."""


def _sequential_suite_calls(suite: Suite, policy: Policy) -> tuple[int, int] | None:
    """Calls a sequential run of the suite makes to qualify an agent that never flips, and at
    most; None when the suite is beyond the rule's reach."""
    try:
        judged = sequential_policy(policy, suite)
    except ValueError:
        return None
    per_round = 2 * len(suite.cases)
    certify = rounds_for(suite, judged, lambda t: pairs_needed(t, judged.confidence, judged.method))
    return certify * per_round, sum(sequential_trials(suite, judged, None).values())


@main.command("snapshot")
@trials_option("The trials file of the run to freeze; or give --agent.")
@takes(AgentRun, "agent_run")
@suite_option("The suite whose contract the baseline freezes.", required=True)
@click.option(
    "--accept-reference", is_flag=True, help="Approve this run as the regression baseline."
)
@click.option(
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Baseline file to write.",
)
@takes(PolicyFlags, "policy_flags")
@click.option(
    "--format",
    "fmt",
    type=FORMATS,
    default="text",
    show_default=True,
    help="Report format; every format is rendered from the same assessment.",
)
@handles_errors
def snapshot_command(
    trials_path: str | None,
    suite_path: str,
    accept_reference: bool,
    output: str,
    policy_flags: PolicyFlags,
    fmt: str,
    agent_run: AgentRun,
) -> None:
    """Freeze a qualified, approved run as a baseline (fingerprints only, never inputs)."""
    if not accept_reference:
        raise click.UsageError("a baseline must be approved: pass --accept-reference")
    suite = load_suite(suite_path)  # --suite is required
    policy = policy_flags.policy(suite)
    assessment = evidence_for(trials_path, suite, policy, agent_run)
    try:
        document = snapshot(assessment, suite, approved=accept_reference)
    except SnapshotRefused as refusal:
        emit(assessment, fmt, None)
        click.echo(f"verdictgate: snapshot refused: {refusal}", err=True)
        sys.exit(assessment.status.exit_code)
    Path(output).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    emit(assessment, fmt, None)
    click.echo(f"verdictgate: baseline written to {output}", err=True)


@main.command("check")
@click.option(
    "--snapshot",
    "snapshot_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The baseline `verdictgate snapshot` wrote.",
)
@trials_option("New trials to check against the baseline; or give --agent.")
@takes(AgentRun, "agent_run")
@suite_option("Needed with --agent (the inputs); the snapshot holds the contract and policy.")
@takes(Output, "output")
@handles_errors
def check_command(
    snapshot_path: str,
    trials_path: str | None,
    suite_path: str | None,
    output: Output,
    agent_run: AgentRun,
) -> None:
    """Re-apply the gate to new evidence, then list what changed against the baseline."""
    baseline = baseline_from_document(read_json(snapshot_path), snapshot_path)
    if agent_run.agent_spec is not None and suite_path is None:
        raise click.UsageError(
            "check --agent needs --suite: the snapshot keeps the cases' fingerprints, not their "
            "inputs"
        )
    suite = baseline.suite
    if suite_path is not None:
        # the given suite whole (cases, references, calibration, pass rate), under the
        # baseline's contract: the contract is what the baseline froze
        suite = replace(load_suite(suite_path), contract=baseline.suite.contract)
    policy = baseline.policy
    if policy.pass_rate is None and suite.pass_rate is not None:  # a rate the given suite requires
        policy = replace(policy, pass_rate=suite.pass_rate, pass_when=suite.policy().pass_when)
    assessment = evidence_for(trials_path, suite, policy, agent_run)
    regression = check(baseline, assessment)
    output.emit(assessment, {"check": regression_document(regression)}, regression)
    if output.fmt == "text":
        _print_regression(regression)
    exit_after(assessment, agent_run, 1 if regression.regressed else None)


def _print_regression(regression: Regression) -> None:
    if not regression.regressed:
        click.echo(
            "Against the baseline: no case changed its stable verdict; no route became unstable."
        )
        return
    click.echo("Against the baseline: REGRESSION")
    for change in regression.changed_cases:
        after = change.after or "no stable verdict"
        click.echo(
            f"  case {change.case} ({change.route or 'no route'}): {change.before} -> {after}"
        )
    for route in regression.unstable_routes:
        click.echo(f"  route {route} became unstable")


@main.command("compare")
@click.option(
    "--before",
    required=True,
    type=click.Path(dir_okay=False),
    help="Trials file or snapshot.",
)
@click.option(
    "--after",
    required=True,
    type=click.Path(dir_okay=False),
    help="Trials file or snapshot.",
)
@suite_option("Contract and targets.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "markdown", "html"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@handles_errors
def compare_command(before: str, after: str, suite_path: str | None, fmt: str) -> None:
    """Drift across builds: change and pass rates after minus before; exit 1 on a regression."""
    from ..drift import compare, comparison_document

    suite = suite_from(suite_path)
    before_summary, before_suite = _build_counts(before, suite)
    after_summary, after_suite = _build_counts(after, suite or before_suite)
    declared = suite or before_suite or after_suite
    targets = set(declared.contract.targets) if declared else set()
    comparison = compare(before_summary, after_summary, targets)
    if fmt == "json":
        click.echo(json.dumps(comparison_document(comparison), indent=2))
    elif fmt == "html":
        from ..reports.html_comparison import render_comparison_html

        click.echo(render_comparison_html(comparison), nl=False)
    else:
        click.echo(_comparison_text(comparison, markdown=fmt == "markdown"))
    sys.exit(1 if comparison.regression else 0)


def _build_counts(path: str, suite: Suite | None) -> tuple[Summary, Suite | None]:
    """A build's counts, from a snapshot or a trials file, and the suite a snapshot holds."""
    from ..baseline import SNAPSHOT_SCHEMA
    from ..drift import summary_of
    from ..engine import assess
    from ..trials_file import read_trials

    try:
        with open(path, "rb") as stream:
            head = stream.read(4096)
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=path) from None
    if f'"{SNAPSHOT_SCHEMA}"'.encode() in head:
        baseline = baseline_from_document(read_json(path), path)
        if baseline.counts is None:
            raise InputError(
                "the snapshot has no counts (made by an older version)",
                path=path,
                field="evidence.counts",
            )
        return baseline.counts, baseline.suite
    evidence, _ = read_trials(path)
    return summary_of(assess(evidence, suite)), None


def _comparison_text(comparison: Comparison, *, markdown: bool) -> str:
    def show(label: str, d: Difference, bad_if_positive: bool) -> str:
        (x1, n1), (x2, n2) = d.before, d.after
        if d.interval is None:
            return f"{label}: {x1}/{n1} -> {x2}/{n2}, not comparable (a side has nothing to count)"
        value, low, high = d.interval
        flag = "  REGRESSION" if d.shown(bad_if_positive) == "worse" else ""
        return f"{label}: {x1}/{n1} -> {x2}/{n2}, difference {value:+.3f} [{low:+.3f}, {high:+.3f}]{flag}"

    lines = [
        f"{'## ' if markdown else ''}Regression: {'yes' if comparison.regression else 'no'}",
        "",
    ]
    bullet = "- " if markdown else "  "
    lines.append(bullet + show("pooled change rate", comparison.change, True))
    lines.append(bullet + show("pooled pass rate", comparison.pass_rate, False))
    for route in comparison.routes:
        note = " (target)" if route.targeted else " (reported, not gated)"
        lines.append(bullet + show(f"route {route.route} change rate{note}", route.change, True))
        if route.pass_rate.comparable:
            lines.append(
                bullet + show(f"route {route.route} pass rate{note}", route.pass_rate, False)
            )
    return "\n".join(lines)


main.add_command(assess_command)
main.add_command(calibrate_command)
main.add_command(convert_command)
main.add_command(serve_command)
main.add_command(status_command)
