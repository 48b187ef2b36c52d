"""A command that can call an agent: its flags (`AgentRun`), and the evidence it gathers, by
running the agent on a suite or reading a trials file."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urlparse

import click

from ..assessment import Assessment, Isolation
from ..decision_rules import DecisionRule
from ..engine import assess
from ..errors import USAGE_EXIT, InputError
from ..flags import flag
from ..policy import Policy
from ..runner.agent import Agent, from_callable, from_factory
from ..runner.run_options import RunOptions
from ..suite import Suite
from ..tiers.invariants import Invariant
from ..trial_model import Trial
from ..trials_file import TrialWriter, path_field, read_trials
from .flag_options import group, with_flag
from .loading import load_attribute, load_factory

if TYPE_CHECKING:
    from ..otel.telemetry import Telemetry
    from ..tiers.cascade import Judge

ISOLATIONS = click.Choice([isolation.value for isolation in Isolation])
_SPEC = "FILE.py:NAME|module:NAME"


@dataclass
class Exports:
    """What became of a run's OTLP export (`--otlp-endpoint`): spans not acknowledged."""

    lost: int = 0


@dataclass(frozen=True)
class AgentRun:
    """The flags of a command that can call an agent, gathered once: the agent (`--agent`),
    how its run is made (`run`, whose flags are RunOptions' own; `run_options` completes it
    with what the other flags name), where its trials and spans go, and the isolation of its
    reruns. Their --help order is the fields'."""

    agent_spec: str | None = flag(
        None,
        "FACTORY() returns the agent callable; or give --trials.",
        "--agent",
        metavar="FILE.py:FACTORY|module:FACTORY",
    )
    run: RunOptions = group(RunOptions)
    isolation: str | None = flag(
        None,
        "How reruns are isolated; fresh-instance calls FACTORY() for every trial (default: "
        "unknown; with --trials, what the file records).",
        type=ISOLATIONS,
    )
    trials_out: str | None = flag(
        None,
        "Also write every trial to this verdictgate.trials/v1 file.",
        type=click.Path(dir_okay=False),
    )
    invariant_specs: tuple[str, ...] = flag(
        (),
        "An Invariant, or a list of them, checked on every answer (repeatable).",
        "--invariant",
        metavar=_SPEC,
    )
    judge_spec: str | None = flag(
        None,
        "judge(output, input) -> bool, run only where the cheaper tiers passed.",
        "--judge",
        metavar=_SPEC,
    )
    resume_path: str | None = flag(
        None,
        "With --sequential: continue the undecided run whose --trials-out file this is, from "
        "the round after its last (raise --max-pairs past its cap).",
        "--resume",
        type=click.Path(dir_okay=False),
        metavar="TRIALS.jsonl",
    )
    otlp_endpoint: str | None = flag(
        None,
        "Export decision, run and admission spans, metrics and the evaluation event over "
        "OTLP/gRPC (http://host:4317 for no TLS).",
        metavar="URL",
    )
    exports: Exports = field(default_factory=Exports, compare=False)
    """Filled in by the run: what its OTLP export lost."""

    def shapes_a_run(self) -> bool:
        """Whether it asks for what only an agent's run can do."""
        run = self.run
        return (
            run.decision is not None
            or run.sequential
            or run.max_pairs is not None
            or run.curtail
            or bool(self.resume_path)
        )

    def run_options(self, decision: DecisionRule | None, resume: list[Trial]) -> RunOptions:
        """The run's options, its invariants and judge loaded from where the flags name."""
        return replace(
            self.run,
            invariants=[i for spec in self.invariant_specs for i in _invariants(spec)],
            judge=None if self.judge_spec is None else _judge(self.judge_spec),
            decision=decision,
            resume=resume,
        )


AGENT_REQUIRED = with_flag(
    AgentRun, "agent_spec", required=True, help="FACTORY() returns the agent callable."
)
"""`--agent` where a command needs it (`verdictgate run`): no `--trials` instead."""


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
    rule = _rule(agent_run.run.decision)
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


def _rule(decision: str | DecisionRule | None) -> DecisionRule | None:
    """The decision rule `--decision` names, if any."""
    return DecisionRule.parse(decision) if isinstance(decision, str) else decision


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
