"""Pieces shared by the CLI commands: options, one-line errors, output, and gathering evidence."""

from __future__ import annotations

import functools
import json
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar
from urllib.parse import urlparse

import click

from ..assessment import Assessment, Isolation
from ..decision_rules import DecisionRule
from ..engine import assess
from ..errors import USAGE_EXIT, InputError, VerdictgateError, cli_option
from ..policy import PRECISION_PRESETS, Claim, PassWhen, Policy
from ..reports import RENDERERS, render_html, render_text
from ..reports.json_report import report_document
from ..runner.agent import Agent, from_callable, from_factory
from ..runner.run_options import RunOptions
from ..stats import DEFAULT_METHOD, Method
from ..suite import Suite
from ..suite_file import load_suite
from ..tiers.invariants import Invariant
from ..trial_model import Trial
from ..trials_file import TrialWriter, path_field, read_trials
from ..wire_types import JsonObject
from .loading import load_attribute, load_factory

if TYPE_CHECKING:
    from ..baseline import Regression
    from ..otel.telemetry import Telemetry
    from ..tiers.cascade import Judge

FORMATS = click.Choice(sorted(RENDERERS))
ISOLATIONS = click.Choice([isolation.value for isolation in Isolation])

OptionValue = Any  # boundary: click, a value it parsed from the command line (as its option's
# type made it) or one it passes on to a command or to its own calls
PolicyOf = Callable[[Suite | None], Policy]
"""What a command of `policy_options` receives: the policy of its options for a suite."""
_P = ParamSpec("_P")
_R = TypeVar("_R")
_F = TypeVar("_F", bound=Callable[..., object])


def fail(message: str) -> NoReturn:
    click.echo(f"verdictgate: error: {message}", err=True)
    sys.exit(USAGE_EXIT)


def handles_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Turn every error a user can cause into one line on stderr and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except VerdictgateError as error:
            fail(error.render(cli_option))

    return wrapper


def policy_for(
    suite: Suite | None,
    tolerance: float | None,
    precision: str | None,
    pass_rate: float | None = None,
    pass_when: str | None = None,
    method: str | None = None,
    claim: str | None = None,
    **thresholds: float | None,
) -> Policy:
    """The policy from the command's options, falling back to the suite's tolerance, rate,
    what passes, method and claim; `thresholds` are the quantile thresholds (max_p95_ms,
    max_p95_tool_calls) given."""
    if tolerance is not None and precision is not None:
        raise click.UsageError("use --tolerance or --precision, not both")
    if precision is not None:
        tolerance = Policy.preset(precision).tolerance
    if tolerance is None and suite is not None:
        tolerance = suite.tolerance
    if pass_rate is None and suite is not None:
        pass_rate = suite.pass_rate
    if pass_when is not None and pass_rate is None:
        raise click.UsageError(
            "--pass-when says what a pass rate counts as passing: give --pass-rate too (or a"
            " suite's pass_rate)"
        )
    try:
        policy = Policy.with_tolerance(tolerance, pass_rate)
        given = {name: value for name, value in thresholds.items() if value is not None}
        passes = PassWhen(pass_when) if pass_when else (suite.pass_when if suite else None)
        judged_by = Method(method) if method else (suite.method if suite else None)
        claimed = Claim(claim) if claim else (suite.claim if suite else None)
        return replace(
            policy,
            **given,
            pass_when=passes or PassWhen.EVALUATOR,
            method=judged_by or DEFAULT_METHOD,
            claim=claimed or Claim.TESTED,
        )
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--tolerance") from None


def emit(
    assessment: Assessment,
    fmt: str,
    output: str | None,
    extra: JsonObject | None = None,
    regression: Regression | None = None,
) -> None:
    """Write the report in `fmt` to the output file or stdout; `extra` fields join the JSON
    report, and what changed against a baseline (`regression`) the HTML one."""
    if fmt == "json" and extra:
        text = json.dumps({**report_document(assessment), **extra}, indent=2) + "\n"
    elif fmt == "html":
        text = render_html(assessment, regression)
    elif fmt == "text" and output is None:
        text = render_text(assessment, color=sys.stdout.isatty())
    else:
        text = RENDERERS[fmt](assessment)
    deliver(text, output)


def deliver(report: str, output: str | None) -> None:
    """Write a rendered report to `output`, saying where on stderr, or to stdout without one."""
    if output is None:
        click.echo(report, nl=False)
        return
    try:
        Path(output).write_text(report, encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write report ({error.strerror})", path=output) from None
    click.echo(f"verdictgate: report written to {output}", err=True)


@dataclass
class Exports:
    """What became of a run's OTLP export (`--otlp-endpoint`): spans not acknowledged."""

    lost: int = 0


@dataclass(frozen=True)
class AgentRun:
    """What the flags of a command that can call an agent say, gathered once: the agent
    (`--agent`), how its run is made (`run_options` turns the rest into `RunOptions`), where
    its trials and spans go, and the isolation of its reruns."""

    agent_spec: str | None = None
    isolation: str | None = None
    repeats: int | None = None
    budget: int | None = None
    concurrency: int = 1
    timeout: float | None = None
    trials_out: str | None = None
    otlp_endpoint: str | None = None
    run_id: str | None = None
    quality_gate: bool = False
    relations: tuple[str, ...] = ()
    invariant_specs: tuple[str, ...] = ()
    semantic: bool = False
    judge_spec: str | None = None
    decision_rule: str | None = None
    sequential: bool = False
    max_pairs: int | None = None
    curtail: bool = False
    resume_path: str | None = None
    exports: Exports = field(default_factory=Exports, compare=False)
    """Filled in by the run: what its OTLP export lost."""

    def shapes_a_run(self) -> bool:
        """Whether it asks for what only an agent's run can do."""
        return (
            self.decision_rule is not None
            or self.sequential
            or self.max_pairs is not None
            or self.curtail
            or bool(self.resume_path)
        )

    def run_options(self, decision: DecisionRule | None, resume: list[Trial]) -> RunOptions:
        """The run's options, its invariants and judge loaded from where the flags name."""
        return RunOptions(
            repeats=self.repeats,
            budget=self.budget,
            concurrency=self.concurrency,
            timeout=self.timeout,
            run_id=self.run_id,
            quality_gate=self.quality_gate,
            relations=self.relations,
            invariants=[i for spec in self.invariant_specs for i in _invariants(spec)],
            semantic=self.semantic,
            judge=None if self.judge_spec is None else _judge(self.judge_spec),
            decision=decision,
            sequential=self.sequential,
            max_pairs=self.max_pairs,
            curtail=self.curtail,
            resume=resume,
        )


_AGENT_RUN_FIELDS = tuple(f.name for f in fields(AgentRun))


@dataclass(frozen=True)
class OptionSpec:
    """One click option as data: its declarations (the flag, then the parameter's name where
    it differs) and the settings `click.option` takes."""

    declarations: tuple[str, ...]
    settings: Mapping[str, OptionValue]

    @classmethod
    def of(cls, *declarations: str, **settings: OptionValue) -> OptionSpec:
        """A spec written as the `click.option` call it stands for."""
        return cls(declarations, settings)


def with_options(command: _F, specs: Sequence[OptionSpec]) -> _F:
    """`command` with the options `specs` declare, shown by --help in the order given."""
    for spec in reversed(specs):
        command = click.option(*spec.declarations, **spec.settings)(command)
    return command


def _agent_option(required: bool) -> OptionSpec:
    """`--agent`; where it is optional, its help points to `--trials` instead."""
    return OptionSpec.of(
        "--agent",
        "agent_spec",
        required=required,
        metavar="FILE.py:FACTORY|module:FACTORY",
        help="FACTORY() returns the agent callable" + ("." if required else "; or give --trials."),
    )


_AGENT_RUN_OPTIONS = (
    OptionSpec.of(
        "--repeats", type=int, help="Trials per case (default: sized from the tolerance)."
    ),
    OptionSpec.of(
        "--budget", type=int, help="Hard cap on calls; a plan above it is refused before any call."
    ),
    OptionSpec.of(
        "--concurrency", type=int, default=1, show_default=True, help="Calls in flight at once."
    ),
    OptionSpec.of("--timeout", type=float, help="Seconds per call; an overrun is an error trial."),
    OptionSpec.of(
        "--isolation",
        type=ISOLATIONS,
        default=None,
        help="How reruns are isolated; fresh-instance calls FACTORY() for every trial "
        "(default: unknown; with --trials, what the file records).",
    ),
    OptionSpec.of(
        "--trials-out",
        type=click.Path(dir_okay=False),
        help="Also write every trial to this verdictgate.trials/v1 file.",
    ),
    OptionSpec.of("--run-id", help="Id of this run (default: a random one)."),
    OptionSpec.of(
        "--relation",
        "relations",
        multiple=True,
        type=click.Choice(["whitespace", "case", "punctuation"]),
        help="A metamorphic relation to check (repeatable).",
    ),
    OptionSpec.of(
        "--quality-gate",
        is_flag=True,
        help="Call each case once first; stop before repeats if any misses its route.",
    ),
    OptionSpec.of(
        "--invariant",
        "invariant_specs",
        multiple=True,
        metavar="FILE.py:NAME|module:NAME",
        help="An Invariant, or a list of them, checked on every answer (repeatable).",
    ),
    OptionSpec.of(
        "--semantic",
        is_flag=True,
        help="Compare each answer with its case's reference at the suite's calibrated "
        "threshold (needs verdictgate[semantic]).",
    ),
    OptionSpec.of(
        "--judge",
        "judge_spec",
        metavar="FILE.py:NAME|module:NAME",
        help="judge(output, input) -> bool, run only where the cheaper tiers passed.",
    ),
    OptionSpec.of(
        "--sequential",
        is_flag=True,
        help="Collect round by round and stop as soon as the sequential rule decides "
        "the run (docs/statistics.md).",
    ),
    OptionSpec.of(
        "--max-pairs",
        type=int,
        help="With --sequential: the most rerun pairs a test collects (default 15/t).",
    ),
    OptionSpec.of(
        "--resume",
        "resume_path",
        type=click.Path(dir_okay=False),
        metavar="TRIALS.jsonl",
        help="With --sequential: continue the undecided run whose --trials-out file this "
        "is, from the round after its last (raise --max-pairs past its cap).",
    ),
    OptionSpec.of(
        "--curtail",
        is_flag=True,
        help="Collect the plan round by round and stop as soon as the pooled or a "
        "targeted route's change rate could no longer be shown below its tolerance "
        "(--sequential with --budget does this too). It saves calls, but a plan stopped "
        "at its first flips never rejects: use --sequential for a verdict.",
    ),
    OptionSpec.of(
        "--decision",
        "decision_rule",
        metavar="RULE",
        help="Derive each decision from the agent framework's spans: tools, toolset, "
        "agents, nodes or attribute:KEY (docs/frameworks.md).",
    ),
    OptionSpec.of(
        "--otlp-endpoint",
        metavar="URL",
        help="Export decision, run and admission spans, metrics and the evaluation "
        "event over OTLP/gRPC (http://host:4317 for no TLS).",
    ),
)
"""The options of a command that can call an agent, after `--agent`, in --help order."""


def run_options(command: Callable[..., _R], *, agent_required: bool = False) -> Callable[..., _R]:
    """Options shared by every command that can call an agent; the command receives them as
    one `agent_run` (an AgentRun) in their place."""
    specs = (_agent_option(agent_required), *_AGENT_RUN_OPTIONS)
    return with_options(_gathering_agent_run(command), specs)


def _gathering_agent_run(command: Callable[..., _R]) -> Callable[..., _R]:
    """`command`, given the agent options' values as one AgentRun (`agent_run`)."""

    @functools.wraps(command)
    def wrapper(*args: OptionValue, **kwargs: OptionValue) -> _R:
        given = {name: kwargs.pop(name) for name in _AGENT_RUN_FIELDS if name in kwargs}
        return command(*args, agent_run=AgentRun(**given), **kwargs)

    return wrapper


_POLICY_OPTIONS = (
    OptionSpec.of(
        "--claim",
        type=click.Choice([c.value for c in Claim]),
        help="What qualifying promises: tested (default: these cases would decide the same "
        "again) or population (new inputs would; the case is the unit, so it needs many "
        "cases; docs/statistics.md).",
    ),
    OptionSpec.of(
        "--method",
        type=click.Choice([m.value for m in Method]),
        help="How change rates are judged: exact (the default: both wrong answers within "
        "2.5% at every n), wilson (AgentVerity's interval, whose wrong answers exceed 2.5% "
        "at some n) or sequential (valid however often it is looked at); "
        "docs/statistics.md.",
    ),
    OptionSpec.of("--tolerance", type=float, help="Tolerated change rate between reruns."),
    OptionSpec.of(
        "--precision",
        type=click.Choice(list(PRECISION_PRESETS)),
        help="cheap 0.10, balanced 0.05, strict 0.01.",
    ),
    OptionSpec.of(
        "--pass-rate",
        type=float,
        help="Require the evaluator pass rate to be shown above this (e.g. 0.9).",
    ),
    OptionSpec.of(
        "--pass-when",
        type=click.Choice([p.value for p in PassWhen]),
        help="What makes a trial pass for --pass-rate: an evaluator's verdict (the default) "
        "or its decision equal to its case's expected one (a stable wrong route fails).",
    ),
    OptionSpec.of(
        "--max-p95-ms",
        type=float,
        help="Require the 95th-percentile latency to be shown under this many milliseconds.",
    ),
    OptionSpec.of(
        "--max-p95-tool-calls",
        type=float,
        help="Require the 95th-percentile of tools called per trial to be shown under this.",
    ),
)
"""The policy options, in --help order."""
_POLICY_NAMES = (
    "tolerance",
    "precision",
    "pass_rate",
    "pass_when",
    "method",
    "claim",
    "max_p95_ms",
    "max_p95_tool_calls",
)
"""The policy options' parameters, in the order `policy_for` takes them."""


def policy_options(command: Callable[..., _R]) -> Callable[..., _R]:
    """The policy options; the command receives `policy_of(suite) -> Policy` in their place."""

    @functools.wraps(command)
    def wrapper(*args: OptionValue, **kwargs: OptionValue) -> _R:
        given = {name: kwargs.pop(name) for name in _POLICY_NAMES}
        kwargs["policy_of"] = lambda suite: policy_for(suite, **given)
        return command(*args, **kwargs)

    return with_options(wrapper, _POLICY_OPTIONS)


_OUTPUT_OPTIONS = (
    OptionSpec.of(
        "--format",
        "fmt",
        type=FORMATS,
        default="text",
        show_default=True,
        help="Report format; all are rendered from the same assessment.",
    ),
    OptionSpec.of("--output", type=click.Path(dir_okay=False), help="Write the report here."),
)


def output_options(command: _F) -> _F:
    """`--format` and `--output`: how and where the report is written."""
    return with_options(command, _OUTPUT_OPTIONS)


def evidence_for(
    trials: str | None, suite: Suite | None, policy: Policy, agent_run: AgentRun
) -> Assessment:
    """Assess a trials file, or run an agent on the suite, under one policy."""
    isolation = agent_run.isolation
    if trials is not None and agent_run.agent_spec is None:
        if agent_run.shapes_a_run():
            raise click.UsageError(
                "--decision, --sequential, --max-pairs, --curtail and --resume shape an agent's "
                "run; not --trials "
                "(assess --sequential replays a trials file)"
            )
        evidence, summary = read_trials(trials)
        named = suite or Suite(name=summary.suite or Suite.name, point=summary.point or Suite.point)
        return assess(
            evidence, named, policy, isolation=Isolation(isolation) if isolation else None
        )
    if agent_run.agent_spec is None or trials is not None:
        raise click.UsageError("give exactly one of --trials or --agent")
    if suite is None:
        raise click.UsageError("--agent needs --suite (the cases to call it with)")
    rule = None if agent_run.decision_rule is None else DecisionRule.parse(agent_run.decision_rule)
    if rule is not None:  # before FACTORY runs, so the framework finds the provider set
        from ..otel.trial_capture import attach_capture

        attach_capture()
    agent = _agent(agent_run.agent_spec, isolation)
    from ..runner.suite_run import (
        run as run_agent,  # the OpenTelemetry SDK loads only when an agent runs
    )

    path = agent_run.resume_path
    resume = list(read_trials(path)[0].trials()) if path else []
    options = agent_run.run_options(rule, resume)
    effective = rule or agent.decision
    with (
        trials_writer(
            agent_run.trials_out,
            suite,
            agent.isolation,
            path_field(effective.name if effective else None),
        ) as sink,
        telemetry_for(agent_run.otlp_endpoint, agent_run.exports) as telemetry,
    ):
        return run_agent(agent, suite, policy, options, sink=sink, telemetry=telemetry)


def _agent(agent_spec: str, isolation: str | None) -> Agent:
    """The agent that `--agent FILE.py:FACTORY` makes, isolated as `--isolation` says."""
    factory = load_factory(agent_spec)
    try:
        made = factory()
        if isinstance(made, Agent):  # a framework adapter's: isolation and rule
            agent = made
        elif isolation == Isolation.FRESH_INSTANCE.value:
            agent = from_factory(factory, fresh_instance=True)
        else:
            agent = from_callable(made, isolation=isolation or Isolation.UNKNOWN.value)
    except Exception as error:
        raise InputError(
            f"FACTORY() failed: {type(error).__name__}: {error}", field="--agent"
        ) from None
    if isinstance(made, Agent) and isolation not in (None, agent.isolation.value):
        raise click.UsageError(
            f"--isolation {isolation}: the agent FACTORY returns isolates its trials as "
            f"{agent.isolation.value}, which is what the run declares"
        )
    return agent


def _invariants(spec: str) -> list[Invariant]:
    """The Invariant, or list of Invariants, that `--invariant SPEC` names."""
    found = load_attribute(spec, "--invariant")
    items = list(found) if isinstance(found, (list, tuple)) else [found]
    if not items or not all(isinstance(item, Invariant) for item in items):
        raise InputError("must name an Invariant or a list of Invariants", field="--invariant")
    return items


def _judge(spec: str) -> Judge:
    found = load_attribute(spec, "--judge")
    if not callable(found):
        raise InputError("must name a callable judge(output, input) -> bool", field="--judge")
    judge: Judge = found
    return judge


@contextmanager
def telemetry_for(
    endpoint: str | None, exports: Exports | None = None
) -> Iterator[Telemetry | None]:
    """An OTLP-exporting pipeline for `--otlp-endpoint`, flushed before the command exits;
    the spans it could not deliver are counted in `exports`."""
    if endpoint is None:
        yield None
        return
    address = urlparse(endpoint)
    if address.scheme not in ("http", "https") or not address.hostname:
        raise InputError(
            f"expected http://HOST:PORT or https://HOST:PORT, got {endpoint!r}",
            field="--otlp-endpoint",
        )
    _reachable(address.hostname, address.port or 4317)
    from ..otel.telemetry import Telemetry

    telemetry = Telemetry.otlp(endpoint)
    try:
        yield telemetry
    finally:
        telemetry.shutdown()
        if exports is not None:
            exports.lost = telemetry.spans_lost


def exit_after(assessment: Assessment, agent_run: AgentRun, code: int | None = None) -> NoReturn:
    """Exit with the run's code (or `code`), but 2 when the run meant to export its spans
    (`--otlp-endpoint`) and some were not acknowledged: its report is out, its telemetry not."""
    if agent_run.exports.lost:
        click.echo(
            f"verdictgate: error: --otlp-endpoint: {agent_run.exports.lost} of the run's spans "
            f"were not acknowledged by {agent_run.otlp_endpoint} (refused or not answered: the "
            "OpenTelemetry log line above says why, for instance UNAUTHENTICATED without the "
            "receiver's token in OTEL_EXPORTER_OTLP_HEADERS)",
            err=True,
        )
        sys.exit(USAGE_EXIT)
    sys.exit(assessment.status.exit_code if code is None else code)


def _reachable(host: str, port: int) -> None:
    """Refuse, before any agent call, an endpoint nothing listens on: its spans would be lost
    and the exporters' retries would hold the exit for half a minute."""
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise InputError(
            f"cannot connect to {host}:{port} ({reason})", field="--otlp-endpoint"
        ) from None


@contextmanager
def trials_writer(
    path: str | None, suite: Suite, isolation: Isolation, path_key: str = "tools"
) -> Iterator[TrialWriter | None]:
    """A sink writing every trial as it arrives, or None without a path. The trials go to a
    file beside `path` that replaces it when the run ends, once a trial was written: a run
    refused before any call leaves `path` as it was, and a run may continue the file it
    writes (`--resume`)."""
    if path is None:
        yield None
        return
    partial = Path(f"{path}.partial")
    try:
        stream = open(partial, "wb")  # noqa: SIM115 - closed below, after the run
    except OSError as error:
        raise InputError(f"cannot write trials ({error.strerror})", path=path) from None
    writer = TrialWriter(stream, suite.name, suite.point, isolation, path_key)
    try:
        with stream:
            yield writer
    finally:
        if writer.written:
            partial.replace(path)
        else:
            partial.unlink(missing_ok=True)


def suite_from(path: str | None) -> Suite | None:
    return None if path is None else load_suite(path)
