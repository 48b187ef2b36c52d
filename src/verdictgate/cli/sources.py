"""`verdictgate assess` and `verdictgate convert`: evidence collected elsewhere, no model call."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click

from ..assessment import Assessment, Isolation, Stopping
from ..declaration import RunDeclaration
from ..engine import assess, assess_in_rounds
from ..evidence import Evidence
from ..policy import Policy
from ..reports.json_report import stopping_document
from ..sequential import sequential_policy
from ..suite import Suite
from ..trials_file import TrialWriter, read_trials
from .options import (
    ISOLATIONS,
    AgentRun,
    emit,
    evidence_for,
    handles_errors,
    output_options,
    policy_options,
    suite_from,
)


def import_options(command: Callable) -> Callable:
    """The evidence sources `assess` reads besides trial records, and how to read them."""
    path = click.Path(dir_okay=False)
    for option in reversed(
        [
            click.option("--agentverity", type=path, help="An AgentVerity evidence file (agentverity.evidence/v2)."),
            click.option("--promptfoo", type=path, help="A promptfoo export (`promptfoo eval -o results.json`, or JSON Lines)."),
            click.option("--deepeval", type=path, help="A saved DeepEval test run (testCases)."),
            click.option("--jsonl", type=path, help="JSON Lines from any harness (with --case-path and --decision-path)."),
            click.option("--otlp-json", type=path, help="A collector `file` exporter capture: one OTLP/JSON export per line."),
            click.option("--provider", help="promptfoo: the provider id or label to assess."),
            click.option("--prompt-id", help="promptfoo: the promptId to assess."),
            click.option("--decision-path", help="Dotted path to the decision (in a JSON output, or a JSONL row)."),
            click.option("--case-by", type=click.Choice(["prompt", "vars"]), default="prompt", show_default=True,
                         help="promptfoo: identify a case by its rendered prompt or by its vars."),
            click.option("--input-var", help="promptfoo, with --case-by vars: the var that holds the input."),
            click.option("--expected-var", help="promptfoo, without --suite: the var holding the expected route."),
            click.option("--decision", "decision_kind", type=click.Choice(["output", "tools"]), default="output",
                         show_default=True, help="DeepEval: the decision is the actual output, or the tools called."),
            click.option("--case-path", help="JSONL: dotted path to the case (an id, or the input to fingerprint)."),
            click.option("--trial-path", help="JSONL: dotted path to the trial index (default: order of appearance)."),
            click.option("--expected-path", help="JSONL: dotted path to the expected route."),
            click.option("--run-path", help="JSONL: dotted path to the run id."),
        ]
    ):  # fmt: skip
        command = option(command)
    return command


@click.command("assess")
@click.option(
    "--trials",
    "trials_path",
    type=click.Path(dir_okay=False),
    help="verdictgate.trials/v1 JSON Lines.",
)
@import_options
@click.option(
    "--suite", "suite_path", type=click.Path(dir_okay=False),
    help="The suite to match cases to, with its contract (default: the file's own cases).",
)  # fmt: skip
@click.option(
    "--isolation",
    type=ISOLATIONS,
    default=None,
    help="How reruns were isolated (default: what the file records, else unknown).",
)
@click.option(
    "--sequential",
    is_flag=True,
    help="Replay the trials round by round under the sequential rule (it replaces --method): "
    "where would a sequential run have stopped, and how many calls would it have saved?",
)
@policy_options
@output_options
@handles_errors
def assess_command(
    trials_path, suite_path, isolation, sequential, policy_of, fmt, output, **sources
) -> None:
    """Assess evidence collected elsewhere; makes no calls."""
    kind = _source_kind(sources, trials_path, trials_allowed=True)
    suite = suite_from(suite_path)
    policy = policy_of(suite)
    if sequential:
        try:
            policy = sequential_policy(policy, suite)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--sequential") from None
    if kind is None:  # --trials
        assessment = evidence_for(trials_path, suite, policy, AgentRun(isolation=isolation))
        evidence = read_trials(trials_path)[0] if sequential else None
    else:
        imported = _read(kind, sources, suite)
        assessment = assess_imported(imported, sources[kind], suite, policy, isolation)
        evidence = imported.evidence if sequential else None
        suite = suite or Suite(name=Path(sources[kind]).stem, cases=imported.cases)
    extra = None
    if evidence is not None:
        assessment, extra = _replayed(assessment, evidence, suite, policy)
    emit(assessment, fmt, output, extra)
    sys.exit(assessment.status.exit_code)


def _replayed(
    assessment: Assessment, evidence: Evidence, suite: Suite | None, policy: Policy
) -> tuple[Assessment, dict]:
    """`assess --sequential`: the trials replayed round by round, where the replay stopped
    (JSON `sequential`, with the rounds judged), and that said on stderr."""
    run = assessment.run
    declaration = RunDeclaration(
        run_id=run.id,
        suite=suite or Suite(name=run.suite, point=run.point),
        policy=policy,
        planned_cases=None,
        planned_trials=None,
        isolation=run.isolation,
    )
    assessment, rounds = assess_in_rounds(evidence, declaration)
    assessment = replace(assessment, stopping=Stopping(evidence.kept(), False))
    click.echo(
        f"verdictgate: sequential replay: {assessment.status.value} after round {rounds}; "
        f"{assessment.how_stopped}",
        err=True,
    )
    return assessment, {"sequential": {**stopping_document(assessment), "rounds": rounds}}


@click.command("convert")
@click.option(
    "--trials",
    "trials_path",
    type=click.Path(dir_okay=False),
    help="A trials file to write again, normalised (one record per kept trial).",
)
@import_options
@click.option(
    "--to", "target", type=click.Choice(["trials"]), default="trials", show_default=True,
    help="The format to write: verdictgate.trials/v1.",
)  # fmt: skip
@click.option(
    "--suite", "suite_path", type=click.Path(dir_okay=False), help="Match cases to a suite."
)
@click.option("--output", type=click.Path(dir_okay=False), help="Write here (default: stdout).")
@handles_errors
def convert_command(target, trials_path, suite_path, output, **sources) -> None:
    """Write evidence as verdictgate.trials/v1, losslessly: every kept trial with its decision,
    evaluator verdict, latency, tier results and the run's isolation."""
    kind = _source_kind(sources, trials_path, trials_allowed=True)
    suite = suite_from(suite_path)
    if kind is None:
        evidence, summary = read_trials(trials_path)
        name, point = summary.suite, summary.point
        isolation = evidence.declared_isolation()
    else:
        imported = _read(kind, sources, suite)
        evidence, isolation = imported.evidence, imported.isolation
        name, point = (suite.name, suite.point) if suite else (Path(sources[kind]).stem, None)
    stream = open(output, "wb") if output else sys.stdout.buffer  # noqa: SIM115 - closed below
    try:
        writer = TrialWriter(stream, name, point, isolation)
        for trial in evidence.trials():
            writer.add(trial)
    finally:
        if output:
            stream.close()
    click.echo(f"verdictgate: wrote {writer.written} trials", err=True)


def _source_kind(sources: dict, trials_path: str | None, *, trials_allowed: bool) -> str | None:
    """The one evidence source the flags name: an importer kind, or None for --trials."""
    from ..importers import SOURCES

    kinds = [kind for kind in SOURCES if sources.get(kind) is not None]
    if len(kinds) + (trials_path is not None) != 1:
        named = ("trials", *SOURCES) if trials_allowed else SOURCES
        flags = ", ".join(f"--{kind.replace('_', '-')}" for kind in named)
        raise click.UsageError(f"give exactly one of {flags}")
    return kinds[0] if kinds else None


def _read(kind: str, sources: dict, suite: Suite | None):
    """Read the chosen source with the import options given beside it."""
    from ..importers import SOURCES, ImportOptions, read_source

    options = ImportOptions(**{k: v for k, v in sources.items() if k not in SOURCES})
    return read_source(kind, sources[kind], options, suite)


def assess_imported(
    imported, path: str, suite: Suite | None, policy: Policy, isolation: str | None
) -> Assessment:
    """Assess what an importer read; the file's own cases stand in for a missing suite."""
    suite = suite or Suite(name=Path(path).stem, cases=imported.cases)
    return assess(
        imported.evidence,
        suite,
        policy,
        run_id=imported.run_id,
        isolation=Isolation(isolation) if isolation else imported.isolation,
    )
