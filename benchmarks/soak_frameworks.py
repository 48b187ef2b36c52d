"""Framework traffic for `receiver_soak.py`, each kind in its own process.

- `framework_sender`: honest Strands-shaped trials through the official SDK and OTLP/gRPC
  exporter: a harness that nests each call's `verdictgate.trial` span under its run span (one
  trace a run, as docs/opentelemetry.md shows) with `invoke_agent` and `execute_tool` spans
  below, pausing between calls longer than the receiver's settle time now and then.
- `trial_less_flood`: plain application spans (`GET /api/items`, a new trace each), which
  gateway.yaml forwards, over OTLP/HTTP as fast as answers come back.
- `never_quiet`: trial spans whose traces never go quiet (one more span below each trial every
  second), which the receiver must settle at `--max-hold`.
- `scrape_loop`: Prometheus scrapers on `--prometheus-listen`, back to back.

Each puts what it saw on its results queue when told to stop (or at `end_by`).
"""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time
from collections import Counter
from typing import Any

FRAMEWORK_TOOLS = (("lookup", "refund"), ("lookup",))
"""The tool path of even and odd cases: what each honest framework trial decides."""
NEVER_QUIET_RUN = "never-quiet"


def _child() -> None:
    """In a child process: leave Ctrl-C to the soak, which stops every child itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def framework_sender(
    endpoint: str,
    token: str,
    runs: list[str],
    cases: int,
    trials: int,
    seconds: float,
    settle: float,
    events: Any,
) -> None:
    """Send `runs` of framework trials, each run one trace under its run span, paced over
    `seconds`; every tenth call is followed by a pause longer than `settle`."""
    _child()
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    import verdictgate

    class Timed(OTLPSpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            began = time.perf_counter()
            result = super().export(spans)
            events.put(
                ("fw-export", time.perf_counter() - began, result == SpanExportResult.SUCCESS)
            )
            return result

    provider = TracerProvider(resource=Resource.create({"service.name": "soak-framework-agent"}))
    provider.add_span_processor(
        BatchSpanProcessor(
            Timed(endpoint=endpoint, insecure=True, headers=_bearer(token)),
            schedule_delay_millis=250,
        )
    )
    tracer = provider.get_tracer("strands.telemetry.tracer")
    labels = [" > ".join(tools) for tools in FRAMEWORK_TOOLS]
    suite = verdictgate.Suite(
        name="soak-frameworks",
        point="support_router",
        cases=tuple(
            verdictgate.Case(f"fw-case-{c:02d}", f"call {c}", labels[c % 2]) for c in range(cases)
        ),
        contract=verdictgate.Contract(allowed=set(labels)),
    )
    step = seconds / (len(runs) + 1)
    started = time.monotonic()

    def one_run(number: int, run_id: str) -> None:
        begin = started + number * step
        time.sleep(max(0.0, begin - time.monotonic()))
        calls = [(c, index) for index in range(trials) for c in range(cases)]
        spacing = 2 * step / len(calls)
        with verdictgate.evaluation_run(
            run_id=run_id, suite=suite, policy=verdictgate.Policy(), planned_trials=len(calls),
            isolation=verdictgate.Isolation.FRESH_SESSION, tracer_provider=provider,
        ):  # fmt: skip
            for n, (c, index) in enumerate(calls):
                pause = settle + 1.0 if n % 10 == 9 else 0.0
                time.sleep(max(0.0, begin + n * spacing - time.monotonic()) + pause)
                with verdictgate.trial_span(
                    run=run_id, case=f"fw-case-{c:02d}", index=index, expected=labels[c % 2],
                    decision="tools", suite=suite.name, point=suite.point,
                    tracer_provider=provider,
                ):  # fmt: skip
                    agent = {
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": "support",
                    }
                    with tracer.start_as_current_span("invoke_agent support", attributes=agent):
                        for tool in FRAMEWORK_TOOLS[c % 2]:
                            with tracer.start_as_current_span(
                                f"execute_tool {tool}",
                                attributes={"gen_ai.operation.name": "execute_tool",
                                            "gen_ai.tool.name": tool},
                            ):  # fmt: skip
                                pass
                events.put(("fw-trial", run_id))

    threads = [threading.Thread(target=one_run, args=(n, run)) for n, run in enumerate(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    provider.force_flush(60_000)
    provider.shutdown()
    events.put(("fw-done",))


def _spans_request(spans: list[Any]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    ).SerializeToString()


def _post(connection: http.client.HTTPConnection, body: bytes, token: str) -> int:
    connection.request("POST", "/v1/traces", body, {
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}",
    })  # fmt: skip
    response = connection.getresponse()
    response.read()
    return response.status


def trial_less_flood(
    http_port: int, token: str, per_request: int, end_by: float, stop: Any, results: Any
) -> None:
    """Plain `GET /api/items` spans, each in a new trace, `per_request` a request, back to back
    over one keep-alive connection."""
    _child()
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    seen: Counter[str] = Counter()
    spans = [Span(name="GET /api/items", span_id=b"\x01" * 8, kind=Span.SPAN_KIND_SERVER,
                  start_time_unix_nano=1, end_time_unix_nano=2) for _ in range(per_request)]  # fmt: skip
    salt = os.getpid().to_bytes(4, "big")
    sent = 0
    connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
    began = time.monotonic()
    while not stop.is_set() and time.time() < end_by:
        for span in spans:
            sent += 1
            span.trace_id = salt + sent.to_bytes(12, "big")
        try:
            status = _post(connection, _spans_request(spans), token)
        except (OSError, http.client.HTTPException) as error:
            seen[f"failed {type(error).__name__}"] += 1
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
            continue
        seen[str(status)] += 1
        if status == 200:
            seen["spans accepted"] += per_request
    results.put({"seen": dict(seen), "seconds": time.monotonic() - began})


def never_quiet(
    http_port: int, token: str, traces: int, end_by: float, stop: Any, results: Any
) -> None:
    """`traces` trial spans of run NEVER_QUIET_RUN, then one more tool span below each every
    second until stopped: traces that never go quiet."""
    _child()
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from verdictgate.otel import conventions as names

    def attribute(key: str, value: Any) -> KeyValue:
        kind = "int_value" if isinstance(value, int) else "string_value"
        return KeyValue(key=key, value=AnyValue(**{kind: value}))

    salt = (os.getpid() | 1 << 31).to_bytes(4, "big")
    now = time.time_ns()
    trials = [
        Span(name=names.TRIAL_SPAN, trace_id=salt + n.to_bytes(12, "big"),
             span_id=(n + 1).to_bytes(8, "big"), start_time_unix_nano=now, end_time_unix_nano=now,
             attributes=[attribute(names.RUN_ID, NEVER_QUIET_RUN), attribute(names.CASE_ID, f"q{n}"),
                         attribute(names.TRIAL, 0), attribute(names.DECISION_RULE, "tools")])
        for n in range(traces)
    ]  # fmt: skip
    seen: Counter[str] = Counter()
    connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
    tick = 0
    while not stop.is_set() and time.time() < end_by:
        tick += 1
        spans = list(trials) if tick == 1 else []
        for n, trial in enumerate(trials):
            spans.append(Span(
                name="execute_tool poll", trace_id=trial.trace_id,
                span_id=((tick << 20) + n + 1).to_bytes(8, "big"), parent_span_id=trial.span_id,
                start_time_unix_nano=now + tick, end_time_unix_nano=now + tick,
                attributes=[attribute("gen_ai.operation.name", "execute_tool"),
                            attribute("gen_ai.tool.name", "poll")],
            ))  # fmt: skip
        try:
            seen[str(_post(connection, _spans_request(spans), token))] += 1
        except (OSError, http.client.HTTPException) as error:
            seen[f"failed {type(error).__name__}"] += 1
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
        stop.wait(1.0)
    results.put({"seen": dict(seen), "ticks": tick})


def scrape_loop(port: int, scrapers: int, end_by: float, stop: Any, results: Any) -> None:
    """`scrapers` threads scraping /metrics back to back (a new connection each time)."""
    _child()
    seen: Counter[str] = Counter()
    latencies: list[float] = []
    lock = threading.Lock()

    def scrape() -> None:
        while not stop.is_set() and time.time() < end_by:
            began = time.perf_counter()
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                connection.request("GET", "/metrics")
                response = connection.getresponse()
                response.read()
                connection.close()
                outcome = str(response.status)
            except (OSError, http.client.HTTPException) as error:
                outcome = f"failed {type(error).__name__}"
            with lock:
                seen[outcome] += 1
                latencies.append(time.perf_counter() - began)

    threads = [threading.Thread(target=scrape) for _ in range(scrapers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put({"seen": dict(seen), "latencies": latencies})
