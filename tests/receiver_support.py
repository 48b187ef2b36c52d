"""Test support for the receiver: building OTLP export requests, running a server in process
or `verdictgate serve` in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from components import free_port
from verdictgate import Contract, Isolation, Policy, Suite, decision, evaluation_run, trial
from verdictgate.otel import conventions as names
from verdictgate.otel.spans import decision_attributes, run_attributes
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.publishing.otlp_target import any_value
from verdictgate.receiver.server import Limits, Server
from verdictgate.receiver.store import Store

SUITE = Suite("gate", "approval_gate", (), Contract({"approve", "deny"}))


def span(name: str, attributes: dict) -> Span:
    return Span(
        name=name,
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        attributes=[KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()],
    )


def decision_span(run: str, case: str, index: int, verdict, expected: str | None = None) -> Span:
    attributes = {
        names.RUN_ID: run,
        names.CASE_ID: case,
        names.TRIAL: index,
        names.POINT: "approval_gate",
        names.SUITE: "gate",
        **decision_attributes(verdict, "Boom"),
    }
    if expected:
        attributes[names.CASE_EXPECTED] = expected
    return span("decide approval_gate", attributes)


def run_span(run: str, planned: int, suite: Suite = SUITE) -> Span:
    attributes = run_attributes(run, suite, Policy(), planned, Isolation.FRESH_SESSION)
    return span(names.RUN_SPAN, attributes)


def request(spans: list[Span]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )


def stable_run(run: str, cases: int = 4, trials: int = 20) -> list[Span]:
    """Decision spans of a run whose cases alternate approve / deny and never flip."""
    routes = ["approve", "deny"]
    return [
        decision_span(run, f"c{c}", i, routes[c % 2], routes[c % 2])
        for c in range(cases)
        for i in range(trials)
    ]


@contextmanager
def running_server(
    store_path: Path | str = ":memory:",
    *,
    token: str | None = None,
    limits: Limits | None = None,
    idle: float = 30.0,
    clock: Callable[[], float] = time.time,
    config: ReceiverConfig | None = None,
    host: str = "127.0.0.1",
):
    """A Server on free ports of `host` (the loopback by default); yields it (ports in
    .grpc_port / .http_port). Its receiver reads `clock` (pass a ManualClock to drive idle
    periods and settling) and is set up by `config` (by default: `idle`, the rest as `serve`
    would)."""
    server = Server(
        Receiver(Store(store_path), None, config or ReceiverConfig(idle=idle), clock=clock),
        grpc_listen=f"{host}:0",
        http_listen=f"{host}:0",
        token=token,
        limits=limits or Limits(),
        tick_seconds=0.05,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def start_serve(
    store: Path | str, port: int, *options: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """`verdictgate serve` in a process of its own on gRPC `port`, with `options` (its log on
    `stderr`), once it acknowledges an export; `env` added to its environment."""
    command = [sys.executable, "-m", "verdictgate", "serve", "--store", str(store)]
    command += ["--grpc-listen", f"127.0.0.1:{port}", "--http-listen", f"127.0.0.1:{free_port()}"]
    process = subprocess.Popen(
        [*command, "--idle", "600s", *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=1)
        try:
            if exporter.export([]) is SpanExportResult.SUCCESS:
                return process
        finally:
            exporter.shutdown()
        time.sleep(0.05)
    process.kill()
    raise RuntimeError("the receiver did not start")


class Trace:
    """Spans of one trial in one trace, shaped as Strands emits them below a harness's span."""

    def __init__(self, number: int) -> None:
        self.trace_id = number.to_bytes(16, "big")
        self.spans: list[Span] = []
        self._next = number * 1000

    def add(self, name: str, parent: Span | None, start: int, error: bool = False, **attributes):
        self._next += 1
        span = Span(
            name=name,
            trace_id=self.trace_id,
            span_id=self._next.to_bytes(8, "big"),
            parent_span_id=parent.span_id if parent is not None else b"",
            start_time_unix_nano=start,
            end_time_unix_nano=start + 1_000_000,
            attributes=[KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()],
            status=Status(code=Status.STATUS_CODE_ERROR if error else Status.STATUS_CODE_OK),
        )
        self.spans.append(span)
        return span


def strands_trial(
    number: int,
    run: str,
    case: str,
    index: int,
    tools: list[str],
    rule: str = "tools",
    failing: str | None = None,
    agent_failed: bool = False,
    start: int | None = None,
) -> list[Span]:
    trace = Trace(number)
    harness = trace.add(
        names.TRIAL_SPAN,
        None,
        1,
        **{
            names.RUN_ID: run,
            names.CASE_ID: case,
            names.TRIAL: index,
            names.CASE_EXPECTED: "refund",
            names.DECISION_RULE: rule,
            names.SUITE: "support",
        },
    )
    agent = trace.add(
        "invoke_agent support",
        harness,
        2,
        error=agent_failed,
        **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"},
    )
    cycle = trace.add("execute_event_loop_cycle", agent, 3)
    trace.add(
        "chat",
        cycle,
        4,
        **{"gen_ai.operation.name": "chat", "gen_ai.input.messages": "secret words"},
    )
    for n, tool in enumerate(tools):
        trace.add(
            f"execute_tool {tool}",
            cycle,
            10 + n if start is None else start,
            error=tool == failing,
            **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool},
        )
    return trace.spans


def sdk_run_spans(
    run: str | None, cases: int, trials: int, run_id: str = "canary"
) -> list[ReadableSpan]:
    """A stable run's decision spans through the SDK: declared by a run span (its plan the
    trials) when `run` is named by `evaluation_run`, else a canary's (no run span), `run_id`."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    run_id = run or run_id

    def decide() -> None:
        for index in range(trials):
            for case in range(cases):
                route = ("approve", "deny")[case % 2]
                with (
                    trial(run=run_id, case=f"c{case}", index=index, expected=route, suite="gate"),
                    decision(SUITE.point, tracer_provider=provider) as recorder,
                ):
                    recorder.record(route)

    if run is None:
        decide()
    else:
        with evaluation_run(
            run_id=run,
            suite=SUITE,
            policy=Policy(),
            planned_trials=cases * trials,
            tracer_provider=provider,
        ):
            decide()
    return list(memory.get_finished_spans())


def wait_until(condition: Callable[[], object], within: float = 20.0) -> None:
    """Wait (polling) until `condition()` holds; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.02)
