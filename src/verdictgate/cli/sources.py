"""`verdictgate assess` and `verdictgate convert`: evidence collected elsewhere, no model call."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import click

from ..assessment import Assessment, Isolation, Stopping
from ..declaration import RunDeclaration
from ..engine import assess, assess_in_rounds
from ..evidence import Evidence
from ..flags import flag
from ..importers import Imported, ImportOptions
from ..policy import Policy
from ..reports.json_report import stopping_document
from ..sequential.rule import sequential_policy
from ..suite import Suite
from ..trials_file import TrialWriter, read_trials
from ..wire_types import JsonObject
from .agent_run import ISOLATIONS, AgentRun, evidence_for
from .flag_options import group, suite_from, suite_option, takes, trials_option
from .policy_flags import PolicyFlags
from .reporting import Output, handles_errors

TRIALS = "trials"
"""The source kind of `--trials`, beside the importers' (`importers.SOURCES`)."""
_PATH = click.Path(dir_okay=False)


@dataclass(frozen=True)
class Sources:
    """The evidence files `assess` and `convert` read besides trial records (a field for each
    of `importers.SOURCES`), and how to read them (`reading`)."""

    agentverity: str | None = flag(
        None, "An AgentVerity evidence file (agentverity.evidence/v2).", type=_PATH
    )
    promptfoo: str | None = flag(
        None,
        "A promptfoo export (`promptfoo eval -o results.json`, or JSON Lines).",
        type=_PATH,
    )
    deepeval: str | None = flag(None, "A saved DeepEval test run (testCases).", type=_PATH)
    jsonl: str | None = flag(
        None,
        "JSON Lines from any harness (with --case-path and --decision-path).",
        type=_PATH,
    )
    otlp_json: str | None = flag(
        None, "A collector `file` exporter capture: one OTLP/JSON export per line.", type=_PATH
    )
    reading: ImportOptions = group(ImportOptions)

    def given(self, trials_path: str | None) -> tuple[str, str]:
        """The one evidence source the flags name: its kind (an importer's, or TRIALS for
        --trials) and its path."""
        from ..importers import SOURCES

        named = [(TRIALS, trials_path), *((kind, getattr(self, kind)) for kind in SOURCES)]
        given = [(kind, path) for kind, path in named if path is not None]
        if len(given) != 1:
            flags = ", ".join(f"--{kind.replace('_', '-')}" for kind in (TRIALS, *SOURCES))
            raise click.UsageError(f"give exactly one of {flags}")
        return given[0]

    def read(self, kind: str, path: str, suite: Suite | None) -> Imported:
        """Read the chosen source with the import options given beside it."""
        from ..importers import read_source

        return read_source(kind, path, self.reading, suite)


@click.command("assess")
@trials_option("verdictgate.trials/v1 JSON Lines.")
@takes(Sources, "sources")
@suite_option("The suite to match cases to, with its contract (default: the file's own cases).")
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
@takes(PolicyFlags, "policy_flags")
@takes(Output, "output")
@handles_errors
def assess_command(
    trials_path: str | None,
    sources: Sources,
    suite_path: str | None,
    isolation: str | None,
    sequential: bool,
    policy_flags: PolicyFlags,
    output: Output,
) -> None:
    """Assess evidence collected elsewhere; makes no calls."""
    kind, path = sources.given(trials_path)
    suite = suite_from(suite_path)
    policy = policy_flags.policy(suite)
    if sequential:
        try:
            policy = sequential_policy(policy, suite)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--sequential") from None
    if kind == TRIALS:
        assessment = evidence_for(path, suite, policy, AgentRun(isolation=isolation))
        evidence = read_trials(path)[0] if sequential else None
    else:
        imported = sources.read(kind, path, suite)
        assessment = assess_imported(imported, path, suite, policy, isolation)
        evidence = imported.evidence if sequential else None
        suite = suite or Suite(name=Path(path).stem, cases=imported.cases)
    extra = None
    if evidence is not None:
        assessment, extra = _replayed(assessment, evidence, suite, policy)
    output.emit(assessment, extra)
    sys.exit(assessment.status.exit_code)


def _replayed(
    assessment: Assessment, evidence: Evidence, suite: Suite | None, policy: Policy
) -> tuple[Assessment, JsonObject]:
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
@trials_option("A trials file to write again, normalised (one record per kept trial).")
@takes(Sources, "sources")
@click.option(
    "--to",
    "target",
    type=click.Choice(["trials"]),
    default="trials",
    show_default=True,
    help="The format to write: verdictgate.trials/v1.",
)
@suite_option("Match cases to a suite.")
@click.option("--output", type=click.Path(dir_okay=False), help="Write here (default: stdout).")
@handles_errors
def convert_command(
    trials_path: str | None,
    sources: Sources,
    target: str,
    suite_path: str | None,
    output: str | None,
) -> None:
    """Write evidence as verdictgate.trials/v1, losslessly: every kept trial with its decision,
    evaluator verdict, latency, tier results and the run's isolation."""
    kind, path = sources.given(trials_path)
    suite = suite_from(suite_path)
    if kind == TRIALS:
        evidence, summary = read_trials(path)
        name, point = summary.suite, summary.point
        isolation = evidence.declared_isolation()
    else:
        imported = sources.read(kind, path, suite)
        evidence, isolation = imported.evidence, imported.isolation
        name, point = (suite.name, suite.point) if suite else (Path(path).stem, None)
    stream = open(output, "wb") if output else sys.stdout.buffer  # noqa: SIM115 - closed below
    try:
        writer = TrialWriter(stream, name, point, isolation)
        for trial in evidence.trials():
            writer.add(trial)
    finally:
        if output:
            stream.close()
    click.echo(f"verdictgate: wrote {writer.written} trials", err=True)


def assess_imported(
    imported: Imported, path: str, suite: Suite | None, policy: Policy, isolation: str | None
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
