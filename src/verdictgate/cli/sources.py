"""`verdictgate assess` and `verdictgate convert`: evidence collected elsewhere, no model call."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from ..assessment import Assessment, Isolation, Stopping
from ..declaration import RunDeclaration
from ..engine import assess, assess_in_rounds
from ..evidence import Evidence
from ..policy import Policy
from ..reports.json_report import stopping_document
from ..sequential.rule import sequential_policy
from ..suite import Suite
from ..trials_file import TrialWriter, read_trials
from ..wire_types import JsonObject
from .options import (
    ISOLATIONS,
    AgentRun,
    OptionSpec,
    PolicyOf,
    emit,
    evidence_for,
    handles_errors,
    output_options,
    policy_options,
    suite_from,
    with_options,
)

if TYPE_CHECKING:  # the importers load only when a command reads another tool's file
    from ..importers import Imported

_F = TypeVar("_F", bound=Callable[..., object])
TRIALS = "trials"
"""The source kind of `--trials`, beside the importers' (`importers.SOURCES`)."""


_PATH = click.Path(dir_okay=False)
_IMPORT_OPTIONS = (
    OptionSpec.of(
        "--agentverity",
        type=_PATH,
        help="An AgentVerity evidence file (agentverity.evidence/v2).",
    ),
    OptionSpec.of(
        "--promptfoo",
        type=_PATH,
        help="A promptfoo export (`promptfoo eval -o results.json`, or JSON Lines).",
    ),
    OptionSpec.of("--deepeval", type=_PATH, help="A saved DeepEval test run (testCases)."),
    OptionSpec.of(
        "--jsonl",
        type=_PATH,
        help="JSON Lines from any harness (with --case-path and --decision-path).",
    ),
    OptionSpec.of(
        "--otlp-json",
        type=_PATH,
        help="A collector `file` exporter capture: one OTLP/JSON export per line.",
    ),
    OptionSpec.of("--provider", help="promptfoo: the provider id or label to assess."),
    OptionSpec.of("--prompt-id", help="promptfoo: the promptId to assess."),
    OptionSpec.of(
        "--decision-path",
        help="Dotted path to the decision (in a JSON output, or a JSONL row).",
    ),
    OptionSpec.of(
        "--case-by",
        type=click.Choice(["prompt", "vars"]),
        default="prompt",
        show_default=True,
        help="promptfoo: identify a case by its rendered prompt or by its vars.",
    ),
    OptionSpec.of(
        "--input-var", help="promptfoo, with --case-by vars: the var that holds the input."
    ),
    OptionSpec.of(
        "--expected-var",
        help="promptfoo, without --suite: the var holding the expected route.",
    ),
    OptionSpec.of(
        "--decision",
        "decision_kind",
        type=click.Choice(["output", "tools"]),
        default="output",
        show_default=True,
        help="DeepEval: the decision is the actual output, or the tools called.",
    ),
    OptionSpec.of(
        "--case-path",
        help="JSONL: dotted path to the case (an id, or the input to fingerprint).",
    ),
    OptionSpec.of(
        "--trial-path",
        help="JSONL: dotted path to the trial index (default: order of appearance).",
    ),
    OptionSpec.of("--expected-path", help="JSONL: dotted path to the expected route."),
    OptionSpec.of("--run-path", help="JSONL: dotted path to the run id."),
)
"""The options of `import_options`, in --help order."""


def import_options(command: _F) -> _F:
    """The evidence sources `assess` reads besides trial records, and how to read them."""
    return with_options(command, _IMPORT_OPTIONS)


@click.command("assess")
@click.option(
    "--trials",
    "trials_path",
    type=click.Path(dir_okay=False),
    help="verdictgate.trials/v1 JSON Lines.",
)
@import_options
@click.option(
    "--suite",
    "suite_path",
    type=click.Path(dir_okay=False),
    help="The suite to match cases to, with its contract (default: the file's own cases).",
)
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
    trials_path: str | None,
    suite_path: str | None,
    isolation: str | None,
    sequential: bool,
    policy_of: PolicyOf,
    fmt: str,
    output: str | None,
    **sources: str | None,
) -> None:
    """Assess evidence collected elsewhere; makes no calls."""
    kind, path = _source(sources, trials_path, trials_allowed=True)
    suite = suite_from(suite_path)
    policy = policy_of(suite)
    if sequential:
        try:
            policy = sequential_policy(policy, suite)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--sequential") from None
    if kind == TRIALS:
        assessment = evidence_for(path, suite, policy, AgentRun(isolation=isolation))
        evidence = read_trials(path)[0] if sequential else None
    else:
        imported = _read(kind, path, sources, suite)
        assessment = assess_imported(imported, path, suite, policy, isolation)
        evidence = imported.evidence if sequential else None
        suite = suite or Suite(name=Path(path).stem, cases=imported.cases)
    extra = None
    if evidence is not None:
        assessment, extra = _replayed(assessment, evidence, suite, policy)
    emit(assessment, fmt, output, extra)
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
@click.option(
    "--trials",
    "trials_path",
    type=click.Path(dir_okay=False),
    help="A trials file to write again, normalised (one record per kept trial).",
)
@import_options
@click.option(
    "--to",
    "target",
    type=click.Choice(["trials"]),
    default="trials",
    show_default=True,
    help="The format to write: verdictgate.trials/v1.",
)
@click.option(
    "--suite", "suite_path", type=click.Path(dir_okay=False), help="Match cases to a suite."
)
@click.option("--output", type=click.Path(dir_okay=False), help="Write here (default: stdout).")
@handles_errors
def convert_command(
    target: str,
    trials_path: str | None,
    suite_path: str | None,
    output: str | None,
    **sources: str | None,
) -> None:
    """Write evidence as verdictgate.trials/v1, losslessly: every kept trial with its decision,
    evaluator verdict, latency, tier results and the run's isolation."""
    kind, path = _source(sources, trials_path, trials_allowed=True)
    suite = suite_from(suite_path)
    if kind == TRIALS:
        evidence, summary = read_trials(path)
        name, point = summary.suite, summary.point
        isolation = evidence.declared_isolation()
    else:
        imported = _read(kind, path, sources, suite)
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


def _source(
    sources: Mapping[str, str | None], trials_path: str | None, *, trials_allowed: bool
) -> tuple[str, str]:
    """The one evidence source the flags name: its kind (an importer's, or TRIALS for --trials)
    and its path."""
    from ..importers import SOURCES

    named = [(TRIALS, trials_path), *((kind, sources.get(kind)) for kind in SOURCES)]
    given = [(kind, path) for kind, path in named if path is not None]
    if len(given) != 1:
        kinds = (TRIALS, *SOURCES) if trials_allowed else SOURCES
        flags = ", ".join(f"--{kind.replace('_', '-')}" for kind in kinds)
        raise click.UsageError(f"give exactly one of {flags}")
    return given[0]


def _read(kind: str, path: str, sources: Mapping[str, str | None], suite: Suite | None) -> Imported:
    """Read the chosen source with the import options given beside it (those not given keep
    their defaults)."""
    from ..importers import SOURCES, ImportOptions, read_source

    given = {k: v for k, v in sources.items() if k not in SOURCES and v is not None}
    return read_source(kind, path, ImportOptions(**given), suite)


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
