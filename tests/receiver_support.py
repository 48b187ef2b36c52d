"""Test support for the receiver: building OTLP export requests, running a server in process
or `verdictgate serve` in a process of its own."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk.trace.export import SpanExportResult

from components import free_port
from verdictgate import Contract, Isolation, Policy, Suite
from verdictgate.otel import conventions as names
from verdictgate.otel.spans import decision_attributes, run_attributes
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.otlp_target import any_value
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
        names.RUN_ID: run, names.CASE_ID: case, names.TRIAL: index, names.POINT: "approval_gate",
        names.SUITE: "gate", **decision_attributes(verdict, "Boom"),
    }  # fmt: skip
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
):
    """A Server on free loopback ports; yields it (ports in .grpc_port / .http_port). Its
    receiver reads `clock` (pass a ManualClock to drive idle periods and settling) and is set
    up by `config` (by default: `idle`, the rest as `serve` would)."""
    server = Server(
        Receiver(Store(store_path), None, config or ReceiverConfig(idle=idle), clock=clock),
        grpc_listen="127.0.0.1:0",
        http_listen="127.0.0.1:0",
        token=token,
        limits=limits or Limits(),
        tick_seconds=0.05,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def start_serve(store: Path | str, port: int, *options: str) -> subprocess.Popen[str]:
    """`verdictgate serve` in a process of its own on gRPC `port`, with `options` (its log on
    `stderr`), once it acknowledges an export."""
    command = [sys.executable, "-m", "verdictgate", "serve", "--store", str(store)]
    command += ["--grpc-listen", f"127.0.0.1:{port}", "--http-listen", f"127.0.0.1:{free_port()}"]
    process = subprocess.Popen(
        [*command, "--idle", "600s", *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
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
