"""The `verdictgate` command: parse, call, render. Exit 0 qualified, 1 rejected, 3 inconclusive,
2 usage or input error."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import click

from .agent import from_callable, from_factory, load_factory
from .assessment import Assessment, Isolation, RunInfo
from .cli_receiver import serve_command, status_command
from .engine import assess
from .errors import USAGE_EXIT, InputError, VerdictgateError
from .fingerprints import fingerprint_mode
from .plan import plan_run, repeats_for
from .policy import PRECISION_PRESETS, Policy
from .reports import RENDERERS
from .reports.json_report import report_document
from .reports.text import render_text
from .snapshot import (
    SnapshotRefused,
    baseline_from_document,
    compare_to_baseline,
    make_snapshot,
    regression_document,
)
from .stats import pairs_needed, pairs_to_qualify
from .suite import Suite
from .suite_file import load_suite, read_json
from .trials_file import TrialWriter, read_trials

FORMATS = click.Choice(sorted(RENDERERS))
ISOLATIONS = click.Choice([isolation.value for isolation in Isolation])


def _fail(message: str) -> None:
    click.echo(f"verdictgate: error: {message}", err=True)
    sys.exit(USAGE_EXIT)


def handles_errors(command: Callable) -> Callable:
    """Turn every error a user can cause into one line on stderr and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except VerdictgateError as error:
            _fail(str(error))

    return wrapper


def _policy(suite: Suite | None, tolerance: float | None, precision: str | None) -> Policy:
    if tolerance is not None and precision is not None:
        raise click.UsageError("use --tolerance or --precision, not both")
    if precision is not None:
        return Policy.preset(precision)
    if tolerance is None and suite is not None:
        tolerance = suite.tolerance
    try:
        return Policy.with_tolerance(tolerance)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--tolerance") from None


def _emit(assessment: Assessment, fmt: str, output: str | None, extra: dict | None = None) -> None:
    """Write the report in `fmt` to the output file or stdout."""
    if fmt == "json" and extra:
        text = json.dumps({**report_document(assessment), **extra}, indent=2) + "\n"
    elif fmt == "text" and output is None:
        text = render_text(assessment, color=sys.stdout.isatty())
    else:
        text = RENDERERS[fmt](assessment)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write report ({error.strerror})", path=output) from None


def _run_options(command: Callable) -> Callable:
    """Options shared by every command that can call an agent."""
    for option in reversed(
        [
            click.option(
                "--agent",
                "agent_spec",
                metavar="FILE.py:FACTORY|module:FACTORY",
                help="FACTORY() returns the agent callable.",
            ),
            click.option(
                "--repeats", type=int, help="Trials per case (default: sized from the tolerance)."
            ),
            click.option(
                "--budget",
                type=int,
                help="Hard cap on calls; a plan above it is refused before any call.",
            ),
            click.option(
                "--concurrency",
                type=int,
                default=1,
                show_default=True,
                help="Calls in flight at once.",
            ),
            click.option(
                "--timeout", type=float, help="Seconds per call; an overrun is an error trial."
            ),
            click.option(
                "--isolation",
                type=ISOLATIONS,
                default="unknown",
                show_default=True,
                help="How reruns are isolated; fresh-instance calls FACTORY() for every trial.",
            ),
            click.option(
                "--trials-out",
                type=click.Path(dir_okay=False),
                help="Also write every trial to this verdictgate.trials/v1 file.",
            ),
            click.option("--run-id", help="Id of this run (default: a random one)."),
            click.option(
                "--otlp-endpoint",
                metavar="URL",
                help="Export decision, run and admission spans, metrics and the evaluation "
                "event over OTLP/gRPC (http://host:4317 for no TLS).",
            ),
        ]
    ):
        command = option(command)
    return command


def _policy_options(command: Callable) -> Callable:
    command = click.option(
        "--precision",
        type=click.Choice(list(PRECISION_PRESETS)),
        help="cheap 0.10, balanced 0.05, strict 0.01.",
    )(command)
    return click.option("--tolerance", type=float, help="Tolerated change rate between reruns.")(
        command
    )


def _output_options(command: Callable) -> Callable:
    command = click.option(
        "--output", type=click.Path(dir_okay=False), help="Write the report here."
    )(command)
    return click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)(command)


def _evidence(
    *,
    trials: str | None,
    agent_spec: str | None,
    suite: Suite | None,
    policy: Policy,
    isolation: str,
    repeats: int | None = None,
    budget: int | None = None,
    concurrency: int = 1,
    timeout: float | None = None,
    trials_out: str | None = None,
    otlp_endpoint: str | None = None,
    run_id: str | None = None,
) -> Assessment:
    """Assess a trials file, or run an agent on the suite, under one policy."""
    if (trials is None) == (agent_spec is None):
        raise click.UsageError("give exactly one of --trials or --agent")
    if trials is not None:
        evidence, summary = read_trials(trials)
        run_ids = sorted(summary.runs) or ["run"]
        info = RunInfo(
            id=run_ids[0] if len(run_ids) == 1 else ",".join(run_ids),
            suite=suite.name if suite else summary.suite or "suite",
            point=suite.point if suite else summary.point or "decision",
            isolation=Isolation(isolation),
            fingerprints=fingerprint_mode(case for _, case in evidence.cases),
        )
        return assess(evidence, suite, policy, run=info)
    if suite is None:
        raise click.UsageError("--agent needs --suite (the cases to call it with)")
    factory = load_factory(agent_spec)
    try:
        if isolation == Isolation.FRESH_INSTANCE.value:
            agent = from_factory(factory, fresh_instance=True)
        else:
            agent = from_callable(factory(), isolation=isolation)
    except Exception as error:
        raise InputError(
            f"FACTORY() failed: {type(error).__name__}: {error}", field="--agent"
        ) from None
    from .runner import run as run_agent  # the OpenTelemetry SDK loads only when an agent runs

    with _trials_writer(trials_out, suite) as sink, _telemetry(otlp_endpoint) as telemetry:
        return run_agent(
            agent,
            suite,
            policy,
            repeats=repeats,
            budget=budget,
            concurrency=concurrency,
            timeout=timeout,
            sink=sink,
            telemetry=telemetry,
            run_id=run_id,
        )


@contextmanager
def _telemetry(endpoint: str | None) -> Iterator[Any]:
    """An OTLP-exporting pipeline for `--otlp-endpoint`, flushed before the command exits."""
    if endpoint is None:
        yield None
        return
    if urlparse(endpoint).scheme not in ("http", "https") or not urlparse(endpoint).netloc:
        raise InputError(
            f"expected http://HOST:PORT or https://HOST:PORT, got {endpoint!r}",
            field="--otlp-endpoint",
        )
    from .telemetry import Telemetry

    telemetry = Telemetry.otlp(endpoint)
    try:
        yield telemetry
    finally:
        telemetry.shutdown()


@contextmanager
def _trials_writer(path: str | None, suite: Suite) -> Iterator[TrialWriter | None]:
    """A sink writing every trial to `path` as it arrives, or None without a path."""
    if path is None:
        yield None
        return
    try:
        stream = open(path, "wb")  # noqa: SIM115 - closed below, after the run
    except OSError as error:
        raise InputError(f"cannot write trials ({error.strerror})", path=path) from None
    with stream:
        yield TrialWriter(stream, suite.name, suite.point)


def _load_suite(path: str | None) -> Suite | None:
    return None if path is None else load_suite(path)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="verdictgate")
def main() -> None:
    """Admit or refuse an agent's test run as a regression baseline."""


@main.command("run")
@_run_options
@click.option("--suite", "suite_path", required=True, type=click.Path(dir_okay=False))
@_policy_options
@_output_options
@handles_errors
def run_command(agent_spec, suite_path, tolerance, precision, fmt, output, **run_options) -> None:
    """Call an agent on every suite case, repeatedly, and assess the trials."""
    if agent_spec is None:
        raise click.UsageError("--agent is required")
    suite = _load_suite(suite_path)
    policy = _policy(suite, tolerance, precision)
    assessment = _evidence(
        trials=None, agent_spec=agent_spec, suite=suite, policy=policy, **run_options
    )
    _emit(assessment, fmt, output)
    sys.exit(assessment.status.exit_code)


def _import_options(command: Callable) -> Callable:
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


@main.command("assess")
@click.option(
    "--trials",
    "trials_path",
    type=click.Path(dir_okay=False),
    help="verdictgate.trials/v1 JSON Lines.",
)
@_import_options
@click.option("--suite", "suite_path", type=click.Path(dir_okay=False))
@click.option(
    "--isolation",
    type=ISOLATIONS,
    default=None,
    help="How reruns were isolated (default: what the file records, else unknown).",
)
@_policy_options
@_output_options
@handles_errors
def assess_command(trials_path, suite_path, isolation, tolerance, precision, fmt, output,
                   **sources) -> None:  # fmt: skip
    """Assess evidence collected elsewhere; makes no calls."""
    from .importers import SOURCES, ImportOptions, read_source

    chosen = [kind for kind in SOURCES if sources.get(kind) is not None]
    if len(chosen) + (trials_path is not None) != 1:
        flags = ", ".join(f"--{kind.replace('_', '-')}" for kind in ("trials", *SOURCES))
        raise click.UsageError(f"give exactly one of {flags}")
    suite = _load_suite(suite_path)
    policy = _policy(suite, tolerance, precision)
    if trials_path is not None:
        assessment = _evidence(trials=trials_path, agent_spec=None, suite=suite, policy=policy,
                               isolation=isolation or "unknown")  # fmt: skip
    else:
        kind = chosen[0]
        options = ImportOptions(**{k: v for k, v in sources.items() if k not in SOURCES})
        imported = read_source(kind, sources[kind], options, suite)
        assessment = _assess_imported(imported, sources[kind], suite, policy, isolation)
    _emit(assessment, fmt, output)
    sys.exit(assessment.status.exit_code)


@main.command("convert")
@_import_options
@click.option("--to", "target", type=click.Choice(["trials"]), default="trials", show_default=True)
@click.option(
    "--suite", "suite_path", type=click.Path(dir_okay=False), help="Match cases to a suite."
)
@click.option("--output", type=click.Path(dir_okay=False), help="Write here (default: stdout).")
@handles_errors
def convert_command(target, suite_path, output, **sources) -> None:
    """Write evidence from another tool as verdictgate.trials/v1, to archive it in one format."""
    from .importers import SOURCES, ImportOptions, read_source

    chosen = [kind for kind in SOURCES if sources.get(kind) is not None]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one source: " + ", ".join(f"--{k.replace('_', '-')}" for k in SOURCES)
        )
    options = ImportOptions(**{k: v for k, v in sources.items() if k not in SOURCES})
    suite = _load_suite(suite_path)
    imported = read_source(chosen[0], sources[chosen[0]], options, suite)
    name, point = (suite.name, suite.point) if suite else (Path(sources[chosen[0]]).stem, None)
    stream = open(output, "wb") if output else sys.stdout.buffer  # noqa: SIM115 - closed below
    try:
        writer = TrialWriter(stream, name, point)
        for trial in imported.evidence.trials():
            writer.add(trial)
    finally:
        if output:
            stream.close()
    click.echo(f"verdictgate: wrote {writer.written} trials", err=True)


def _assess_imported(
    imported, path: str, suite: Suite | None, policy: Policy, isolation: str | None
) -> Assessment:
    """Assess what an importer read; the file's own cases stand in for a missing suite."""
    suite = suite or Suite(name=Path(path).stem, cases=imported.cases)
    info = RunInfo(
        id=imported.run_id,
        suite=suite.name,
        point=suite.point,
        isolation=Isolation(isolation) if isolation else imported.isolation,
        fingerprints=fingerprint_mode(case.id for case in imported.cases),
    )
    return assess(imported.evidence, suite, policy, run=info)


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
@click.option("--precision", type=click.Choice(list(PRECISION_PRESETS)))
@click.option(
    "--suite", "suite_path", type=click.Path(dir_okay=False), help="Size repeats for this suite."
)
@click.option("--observed", help="FLIPS/PAIRS seen so far: how many pairs it takes to qualify.")
@click.option("--repeats", type=int, help="With --suite: trials per case instead of sizing.")
@click.option("--budget", type=int, help="With --suite: refuse a plan above this many calls.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@handles_errors
def plan_command(tolerance, precision, suite_path, observed, repeats, budget, fmt) -> None:
    """Price a run without calling anything: pairs and calls needed."""
    suite = _load_suite(suite_path)
    policy = _policy(suite, tolerance, precision)
    t, confidence = policy.tolerance, policy.confidence
    needed = pairs_needed(t, confidence)
    document: dict[str, Any] = {
        "tolerance": t,
        "confidence": confidence,
        "pairs_needed": needed,
        "calls_needed": 2 * needed,
    }
    lines = [f"{needed} pairs at {t:g} ({2 * needed} calls when every pair agrees)"]
    if observed is not None:
        flips, pairs = _parse_observed(observed)
        total = pairs_to_qualify(flips, pairs, t, confidence)
        document["observed"] = {
            "flips": flips,
            "pairs": pairs,
            "total_pairs": total,
            "more_pairs": None if total is None else total - pairs,
        }
        if total is None:
            lines.append(f"{flips}/{pairs}: cannot qualify at {t:g} however many pairs agree")
        else:
            lines.append(
                f"{flips}/{pairs} -> {total} pairs in total: {total - pairs} more pairs "
                f"({2 * (total - pairs)} calls) if every one agrees"
            )
    if suite is not None:
        plan = plan_run(suite, policy, repeats=repeats, budget=budget)
        per_case = sorted(set(plan.repeats.values()))
        document["suite"] = {
            "cases": len(suite.cases),
            "calls": plan.calls,
            "repeats": dict(plan.repeats),
            "base_repeats": repeats_for(needed, len(suite.cases)),
        }
        lines.append(
            f"suite {suite.name}: {len(suite.cases)} cases x {'/'.join(map(str, per_case))} "
            f"trials = {plan.calls} calls"
        )
    click.echo(json.dumps(document, indent=2) if fmt == "json" else "\n".join(lines))


@main.command("snapshot")
@click.option("--trials", "trials_path", type=click.Path(dir_okay=False))
@_run_options
@click.option("--suite", "suite_path", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--accept-reference", is_flag=True, help="Approve this run as the regression baseline."
)
@click.option(
    "--output", required=True, type=click.Path(dir_okay=False), help="Baseline file to write."
)
@_policy_options
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
@handles_errors
def snapshot_command(
    trials_path, suite_path, accept_reference, output, tolerance, precision, fmt, **run_options
) -> None:
    """Freeze a qualified, approved run as a baseline (fingerprints only, never inputs)."""
    if not accept_reference:
        raise click.UsageError("a baseline must be approved: pass --accept-reference")
    suite = _load_suite(suite_path)
    policy = _policy(suite, tolerance, precision)
    assessment = _evidence(trials=trials_path, suite=suite, policy=policy, **run_options)
    try:
        document = make_snapshot(assessment, suite, approved=accept_reference)
    except SnapshotRefused as refusal:
        _emit(assessment, fmt, None)
        click.echo(f"verdictgate: snapshot refused: {refusal}", err=True)
        sys.exit(assessment.status.exit_code)
    Path(output).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    _emit(assessment, fmt, None)
    click.echo(f"verdictgate: baseline written to {output}", err=True)


@main.command("check")
@click.option("--snapshot", "snapshot_path", required=True, type=click.Path(dir_okay=False))
@click.option("--trials", "trials_path", type=click.Path(dir_okay=False))
@_run_options
@click.option(
    "--suite",
    "suite_path",
    type=click.Path(dir_okay=False),
    help="Needed with --agent (the inputs); the snapshot holds the contract and policy.",
)
@_output_options
@handles_errors
def check_command(snapshot_path, trials_path, suite_path, fmt, output, **run_options) -> None:
    """Re-apply the gate to new evidence, then list what changed against the baseline."""
    baseline = baseline_from_document(read_json(snapshot_path), snapshot_path)
    suite = baseline.suite
    if suite_path is not None:
        given = _load_suite(suite_path)
        suite = Suite(
            given.name, given.point, given.cases, baseline.suite.contract, given.tolerance
        )
    assessment = _evidence(trials=trials_path, suite=suite, policy=baseline.policy, **run_options)
    regression = compare_to_baseline(baseline, assessment)
    _emit(assessment, fmt, output, {"check": regression_document(regression)})
    if fmt == "text":
        _print_regression(regression)
    exit_code = assessment.status.exit_code
    sys.exit(1 if regression.regressed else exit_code)


def _print_regression(regression) -> None:
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


main.add_command(serve_command)
main.add_command(status_command)
