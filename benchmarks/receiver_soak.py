"""Soak of `verdictgate serve` under attack: the official exporter's runs must all be acknowledged
and final while watchers wait, slow sockets stall and an authenticated flooder pushes.

Starts `verdictgate serve` (token file, on-disk store in a temporary folder, ports chosen by the
kernel, a short grace), then, all at once:

- **honest sender** (its own process): the official OpenTelemetry SDK, a `BatchSpanProcessor`
  and `opentelemetry-exporter-otlp-proto-grpc`'s `OTLPSpanExporter` with the bearer token,
  instrumented as the README's OpenTelemetry quickstart does (`@decision_point`, `trial`,
  an `EvidenceProcessor`), each run declared by `evaluation_run` with its plan. Every
  `export()` call is timed; the exporter's own retries and give-ups are counted from its log.
- **watchers**: `verdictgate status --run RUN --wait ... --format json` subprocesses spread over
  the honest runs, started before any run begins.
- **slow sockets**: TCP connections to the HTTP port (and some to the gRPC port) that send
  nothing, half a request head, or one byte of an endless head every second; each one closed
  by the server is counted (with how long it lived) and reconnected.
- **flooder** (its own process): valid, authenticated export requests of 512 decision spans of
  other runs, over gRPC (several in flight on one channel) and OTLP/HTTP, as fast as answers
  come back; accepted and refused requests are counted.

- **framework traffic** (`soak_frameworks.py`, each kind its own process): honest
  Strands-shaped trials through the official SDK, each run one trace with every trial span
  nested under its run span and pauses beyond `--settle`; a flood of trial-less traces (plain
  `GET /api/items` spans, a new trace each) over OTLP/HTTP; traces that never go quiet (one
  more span below each of their trials every second), which must settle at `--max-hold`; and
  Prometheus scrapers on `--prometheus-listen`, back to back.

At the end every honest run, decision-span and framework alike, is read back with
GetAdmission: it must be final and hold all its planned trials, and the never-quiet trials
must all be stored. Prints export p50/p99, the watchers' results, what the slow sockets and the
flooder saw, and the serve process's peak RSS (VmHWM) and CPU seconds. Exit 0 when every honest
run is final and complete, 1 when one is not, 2 when the harness could not run (or hit
--deadline, after which every child is killed).

    python benchmarks/receiver_soak.py [--duration 45] [--runs 6] [--watchers 20]
        [--slow-sockets 200] [--no-flooder] [--no-frameworks] [--deadline 90]
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import errno
import http.client
import json
import multiprocessing
import os
import queue
import random
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import soak_frameworks
from process_stats import children_of, cpu_seconds

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
ADMISSION = "/verdictgate.v1.AdmissionService/GetAdmission"
HONEST_ROUTES = ["approve", "deny", "review", "escalate"]
FLOOD_RUN_TEMPLATE = b"flood-00000000"
FLOOD_CASES = 100
FLOOD_REQUESTS_PER_RUN = 20
TEARDOWN_RESERVE = 20.0
"""Seconds kept before --deadline for final reads, stopping children and the report."""


# -- shared helpers -----------------------------------------------------------------------


def child_setup() -> None:
    """In a child process: leave Ctrl-C to the parent, which stops every child itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation between order statistics."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def proc_status(pid: int) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def kib(status: dict[str, str], key: str) -> int:
    value = status.get(key, "0 kB").split()
    return int(value[0]) if value else 0


def child_name(pid: int) -> str:
    """What a child of serve is: a decoder worker, multiprocessing's resource tracker, ..."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = b" ".join(argv).decode(errors="replace")
    if "resource_tracker" in text:
        return "resource tracker"
    if "forkserver" in text:
        return "forkserver"
    if "spawn_main" in text:
        return "worker"
    return Path(argv[0].decode(errors="replace")).name or "?"


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


# -- the honest sender (its own process) ----------------------------------------------------


def honest_sender(
    endpoint: str,
    token: str,
    runs: list[str],
    cases: int,
    trials: int,
    seconds: float,
    export_interval_ms: int,
    log_path: str,
    events: Any,
) -> None:
    """Send `runs` through the official SDK and OTLP/gRPC exporter, paced over `seconds`.

    Runs overlap: run i starts at i * step and lasts 2 * step (step = seconds / (runs + 1)).
    Everything measured is put on `events` as it happens, so a sender killed at the deadline
    still leaves its figures behind."""
    child_setup()
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    import logging

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    import verdictgate
    from verdictgate.otel import conventions as names

    logging.basicConfig(
        filename=log_path, level=logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )

    class CountRetries(logging.Filter):
        """Counts the exporter's retries and give-ups (placed before its duplicate filter)."""

        def filter(self, record: logging.LogRecord) -> bool:
            message = str(record.msg)
            values = record.args if isinstance(record.args, tuple) else ()
            if message.startswith("Transient error"):  # (code, what, endpoint, delay, details)
                code = str(values[0]) if values else "?"
                events.put(("retry", code.rpartition(".")[2]))
            elif message.startswith("Failed to export"):  # (what, endpoint, code, details)
                code = str(values[2]) if len(values) > 2 else "?"
                events.put(("gave_up", code.rpartition(".")[2]))
            return True

    exporter_logger = logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter")
    exporter_logger.filters.insert(0, CountRetries())

    def decisions_by_run(spans: Any) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for span in spans:
            attributes = span.attributes or {}
            if span.name.startswith(names.DECISION_SPAN_PREFIX):
                counts[str(attributes.get(names.RUN_ID))] += 1
            elif span.name == names.RUN_SPAN:
                counts["run-span:" + str(attributes.get(names.RUN_ID))] += 1
        return dict(counts)

    class TimedExporter(SpanExporter):
        """The official exporter, each export() timed (retries and backoff included)."""

        def __init__(self, inner: SpanExporter) -> None:
            self.inner = inner

        def export(self, spans: Any) -> SpanExportResult:
            events.put(("begin", time.time()))
            began = time.perf_counter()
            result = self.inner.export(spans)
            elapsed = time.perf_counter() - began
            events.put(
                (
                    "export",
                    time.time(),
                    elapsed,
                    len(spans),
                    decisions_by_run(spans),
                    result == SpanExportResult.SUCCESS,
                )
            )
            return result

        def shutdown(self) -> None:
            self.inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return self.inner.force_flush(timeout_millis)

    class CountEnded(SpanProcessor):
        """Counts decision spans ended per run (what the exporter should deliver)."""

        def on_end(self, span: ReadableSpan) -> None:
            if span.name.startswith(names.DECISION_SPAN_PREFIX):
                events.put(("ended", str((span.attributes or {}).get(names.RUN_ID))))

    provider = TracerProvider(resource=Resource.create({"service.name": "soak-honest-sender"}))
    local: list[Any] = []
    processor = verdictgate.EvidenceProcessor(
        verdictgate.Publisher(provider), idle=60, on_assessment=local.append
    )
    provider.add_span_processor(processor)  # as the README: before the exporting processor
    provider.add_span_processor(CountEnded())
    provider.add_span_processor(
        BatchSpanProcessor(
            TimedExporter(
                OTLPSpanExporter(
                    endpoint=endpoint, insecure=True, headers={"authorization": f"Bearer {token}"}
                )
            ),
            schedule_delay_millis=export_interval_ms,
        )
    )

    @verdictgate.decision_point("soak_router", tracer_provider=provider)
    def route(message: str) -> str:
        return message.rpartition(" ")[2]  # deterministic: the route the case names

    suite = verdictgate.Suite(
        name="soak",
        point="soak_router",
        cases=tuple(
            verdictgate.Case(
                f"case-{c:02d}", f"please route {HONEST_ROUTES[c % 4]}", HONEST_ROUTES[c % 4]
            )
            for c in range(cases)
        ),
        contract=verdictgate.Contract(allowed=set(HONEST_ROUTES[: min(cases, 4)])),
    )
    step = seconds / (len(runs) + 1)
    started = time.monotonic()

    def one_run(number: int, run_id: str) -> None:
        begin = started + number * step
        time.sleep(max(0.0, begin - time.monotonic()))
        calls = [(case, index) for index in range(trials) for case in suite.cases]
        spacing = 2 * step / len(calls)
        with verdictgate.evaluation_run(
            run_id=run_id,
            suite=suite,
            policy=verdictgate.Policy(),
            planned_trials=len(calls),
            isolation=verdictgate.Isolation.FRESH_SESSION,
            tracer_provider=provider,
        ):
            for n, (case, index) in enumerate(calls):
                time.sleep(max(0.0, begin + n * spacing - time.monotonic()))
                with verdictgate.trial(
                    run=run_id, case=case.id, index=index, expected=case.expected
                ):
                    route(case.input or "")

    threads = [threading.Thread(target=one_run, args=(n, run_id)) for n, run_id in enumerate(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    provider.force_flush(60_000)  # the EvidenceProcessor's assessments, then every export
    provider.shutdown()
    for assessment in local:
        events.put(
            ("local", assessment.run.id, assessment.status.value, assessment.trials.received)
        )
    events.put(("done", time.time()))


# -- the flooder (its own process) ------------------------------------------------------------


def flood_templates(spans_per_request: int) -> list[bytes]:
    """Requests of valid decision spans of run `flood-00000000` (rewritten per round)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def attribute(key: str, value: str | int) -> KeyValue:
        if isinstance(value, int):
            return KeyValue(key=key, value=AnyValue(int_value=value))
        return KeyValue(key=key, value=AnyValue(string_value=value))

    now = time.time_ns()
    templates = []
    for number in range(FLOOD_REQUESTS_PER_RUN):
        spans = []
        for n in range(number * spans_per_request, (number + 1) * spans_per_request):
            case, index = n % FLOOD_CASES, n // FLOOD_CASES
            route = HONEST_ROUTES[case % 4]
            spans.append(
                Span(
                    name="decide flood_router",
                    trace_id=(n + 1).to_bytes(16, "big"),
                    span_id=(n + 1).to_bytes(8, "big"),
                    start_time_unix_nano=now,
                    end_time_unix_nano=now + 5_000_000,
                    attributes=[
                        attribute("verdictgate.run.id", FLOOD_RUN_TEMPLATE.decode()),
                        attribute("verdictgate.suite", "flood"),
                        attribute("verdictgate.point", "flood_router"),
                        attribute("verdictgate.case.id", f"flood-case-{case:03d}"),
                        attribute("verdictgate.case.expected", route),
                        attribute("verdictgate.trial", index),
                        attribute("verdictgate.outcome", "decision"),
                        attribute("verdictgate.verdict", route),
                    ],
                )
            )
        resource = Resource(attributes=[attribute("service.name", "soak-flooder")])
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
        )
        templates.append(request.SerializeToString())
    return templates


def flooder(
    grpc_port: int,
    http_port: int,
    token: str,
    grpc_in_flight: int,
    http_in_flight: int,
    spans_per_request: int,
    end_by: float,
    stop: Any,
    results: Any,
) -> None:
    """Push valid, authenticated export requests as fast as answers come back, until `stop`."""
    child_setup()
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    import grpc
    from google.rpc import status_pb2
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    def status_message(data: bytes) -> str:
        try:
            return status_pb2.Status.FromString(data).message[:80]
        except Exception:
            return data[:80].decode("latin-1").strip()

    templates = flood_templates(spans_per_request)
    counter = iter(range(10**12))
    lock = threading.Lock()

    def next_body() -> tuple[bytes, str]:
        with lock:
            n = next(counter)
        run = b"flood-%08d" % (n // FLOOD_REQUESTS_PER_RUN)
        return templates[n % FLOOD_REQUESTS_PER_RUN].replace(FLOOD_RUN_TEMPLATE, run), run.decode()

    def finished() -> bool:
        return stop.is_set() or time.time() > end_by

    stats: dict[str, Counter[str]] = defaultdict(Counter)
    why: Counter[str] = Counter()
    latencies: dict[str, list[float]] = defaultdict(list)
    runs_sent: set[str] = set()
    metadata = (("authorization", f"Bearer {token}"),)
    channel = grpc.insecure_channel(
        f"127.0.0.1:{grpc_port}", options=[("grpc.primary_user_agent", "verdictgate-soak-flooder")]
    )
    export: Any = channel.unary_unary(
        TRACE_EXPORT, request_serializer=None, response_deserializer=None
    )

    def grpc_worker() -> None:
        mine: Counter[str] = Counter()
        answers: Counter[str] = Counter()
        times: list[float] = []
        while not finished():
            body, run = next_body()
            began = time.perf_counter()
            try:
                reply = export(body, metadata=metadata, timeout=5)
            except grpc.RpcError as error:
                code = error.code().name
                kind = "refused" if code in ("RESOURCE_EXHAUSTED", "UNAVAILABLE") else "failed"
                mine[f"{kind} {code}"] += 1
                answers[f"grpc {code}: {(error.details() or '')[:80]}"] += 1
                continue
            times.append(time.perf_counter() - began)
            rejected = ExportTraceServiceResponse.FromString(reply).partial_success.rejected_spans
            mine["accepted"] += 1
            mine["spans accepted"] += spans_per_request - rejected
            mine["spans rejected (partial success)"] += rejected
            runs_sent.add(run)
        with lock:
            stats["grpc"].update(mine)
            why.update(answers)
            latencies["grpc"].extend(times)

    def http_worker() -> None:
        mine: Counter[str] = Counter()
        answers: Counter[str] = Counter()
        times: list[float] = []
        headers = {
            "Content-Type": "application/x-protobuf",
            "Authorization": f"Bearer {token}",
            "User-Agent": "verdictgate-soak-flooder-http",
        }
        connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
        while not finished():
            body, run = next_body()
            began = time.perf_counter()
            try:
                connection.request("POST", "/v1/traces", body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                closing = response.will_close
            except (OSError, http.client.HTTPException) as error:
                mine[f"failed {type(error).__name__}"] += 1
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
                continue
            if response.status == 200:
                times.append(time.perf_counter() - began)
                rejected = ExportTraceServiceResponse.FromString(
                    data
                ).partial_success.rejected_spans
                mine["accepted"] += 1
                mine["spans accepted"] += spans_per_request - rejected
                mine["spans rejected (partial success)"] += rejected
                runs_sent.add(run)
            else:
                kind = "refused" if response.status in (429, 503) else "failed"
                mine[f"{kind} {response.status}"] += 1
                answers[f"http {response.status}: {status_message(data)}"] += 1
            if closing:
                mine["connections closed by the server"] += 1
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
        connection.close()
        with lock:
            stats["http"].update(mine)
            why.update(answers)
            latencies["http"].extend(times)

    workers = [threading.Thread(target=grpc_worker, daemon=True) for _ in range(grpc_in_flight)]
    workers += [threading.Thread(target=http_worker, daemon=True) for _ in range(http_in_flight)]
    began = time.monotonic()
    for worker in workers:
        worker.start()
    while not finished() and any(worker.is_alive() for worker in workers):
        time.sleep(0.2)
    stopping = time.monotonic() + 6  # a call in flight ends within its 5 s timeout
    for worker in workers:
        worker.join(max(0.0, stopping - time.monotonic()))
    elapsed = time.monotonic() - began
    channel.close()
    with lock:
        results.put(
            {
                "stats": {k: dict(v) for k, v in stats.items()},
                "latencies": dict(latencies),
                "runs": len(runs_sent),
                "why": dict(why.most_common(6)),
                "seconds": elapsed,
                "unfinished_workers": sum(worker.is_alive() for worker in workers),
            }
        )


# -- slow sockets (their own process) ---------------------------------------------------------

_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _endless_head() -> bytes:
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
    )
    return head + b"".join(b"X-Slow-%d: %s\r\n" % (n, b"y" * 20) for n in range(2000))


def _slow_h2() -> bytes:
    settings = bytes([0, 2, 88, 4, 0, 0, 0, 0, 0])  # a SETTINGS frame announcing 600 bytes
    return _H2_PREFACE + settings + bytes(600)


SLOW_KINDS = {
    # kind: (port key, bytes sent at once, bytes dribbled one at a time)
    "http silent": ("http", b"", b""),
    "http half head": ("http", b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz", b""),
    "http dribble": ("http", b"", _endless_head()),
    "grpc silent": ("grpc", b"", b""),
    "grpc dribble": ("grpc", b"", _slow_h2()),
}


class _Slow:
    __slots__ = ("kind", "next_send", "opened", "reply", "sent", "sock", "state")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sock: socket.socket | None = None
        self.state = "down"
        self.opened = 0.0
        self.sent = 0
        self.next_send = 0.0
        self.reply = b""


def slow_sockets(
    http_port: int,
    grpc_port: int,
    count: int,
    grpc_share: float,
    dribble_seconds: float,
    end_by: float,
    stop: Any,
    results: Any,
) -> None:
    """Hold `count` stalled connections open until `stop`; reconnect those the server closes."""
    child_setup()
    ports = {"http": http_port, "grpc": grpc_port}
    grpc_count = round(count * grpc_share)
    http_kinds = ["http silent", "http half head", "http dribble"]
    grpc_kinds = ["grpc silent", "grpc dribble"]
    slots = [_Slow(http_kinds[n % 3]) for n in range(count - grpc_count)]
    slots += [_Slow(grpc_kinds[n % 2]) for n in range(grpc_count)]
    selector = selectors.DefaultSelector()
    closed: Counter[str] = Counter()
    opened: Counter[str] = Counter()
    connect_failed: Counter[str] = Counter()
    replies: Counter[str] = Counter()
    lifetimes: dict[str, list[float]] = defaultdict(list)
    reconnect_at: dict[int, float] = {}
    fewest_open = count
    steady_after = time.monotonic() + 5
    open_seconds = steady_seconds = 0.0
    last = time.monotonic()

    def open_slot(slot: _Slow) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex(("127.0.0.1", ports[SLOW_KINDS[slot.kind][0]]))
        slot.sock, slot.sent, slot.reply = sock, 0, b""
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            connect_failed[slot.kind] += 1
            slot.state = "down"
            reconnect_at[id(slot)] = time.monotonic() + 0.25
            return
        slot.state = "connecting"
        selector.register(sock, selectors.EVENT_WRITE, slot)

    def established(slot: _Slow) -> None:
        assert slot.sock is not None
        slot.state = "open"
        slot.opened = time.monotonic()
        slot.next_send = slot.opened + random.uniform(0, dribble_seconds)
        opened[slot.kind] += 1
        selector.modify(slot.sock, selectors.EVENT_READ, slot)
        first = SLOW_KINDS[slot.kind][1]
        if first:
            try:
                slot.sock.send(first)
            except OSError:
                lost(slot)

    def lost(slot: _Slow, by_server: bool = True) -> None:
        if slot.sock is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(slot.sock)
        slot.sock.close()
        slot.sock = None
        if slot.state == "open" and by_server:
            closed[slot.kind] += 1
            lifetimes[slot.kind].append(time.monotonic() - slot.opened)
            if slot.reply:
                replies[
                    slot.kind + ": " + slot.reply.split(b"\r\n", 1)[0][:40].decode("latin-1")
                ] += 1
        elif slot.state == "connecting":
            connect_failed[slot.kind] += 1
        slot.state = "down"
        reconnect_at[id(slot)] = time.monotonic() + 0.25

    first = time.monotonic()
    for slot in slots:  # the first connections spread over two seconds, as arrivals would be
        reconnect_at[id(slot)] = first + random.uniform(0, 2.0)
    while not stop.is_set() and time.time() < end_by:
        now = time.monotonic()
        for slot in slots:
            if slot.state == "down" and reconnect_at.get(id(slot), 0) <= now:
                open_slot(slot)
        for key, _ in selector.select(0.1):
            slot = key.data
            if slot.state == "connecting":
                assert slot.sock is not None
                if slot.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    lost(slot)
                else:
                    established(slot)
                continue
            try:
                data = slot.sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                lost(slot)
            elif slot.kind.startswith("http") and not slot.reply:
                slot.reply = data
        now = time.monotonic()
        for slot in slots:
            dribble = SLOW_KINDS[slot.kind][2]
            if slot.state == "open" and dribble and slot.next_send <= now:
                slot.next_send = now + dribble_seconds
                try:
                    slot.sock.send(dribble[slot.sent % len(dribble) : slot.sent % len(dribble) + 1])  # type: ignore[union-attr]
                    slot.sent += 1
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    lost(slot)
        if now > steady_after:
            holding = sum(slot.state == "open" for slot in slots)
            fewest_open = min(fewest_open, holding)
            open_seconds += holding * (now - last)
            steady_seconds += now - last
        last = now
    still_open = Counter(slot.kind for slot in slots if slot.state == "open")
    for slot in slots:
        lost(slot, by_server=False)
    results.put(
        {
            "opened": dict(opened),
            "closed": dict(closed),
            "connect_failed": dict(connect_failed),
            "replies": dict(replies),
            "lifetimes": {kind: sorted(times) for kind, times in lifetimes.items()},
            "open_at_end": dict(still_open),
            "fewest_open": fewest_open,
            "mean_open": open_seconds / steady_seconds if steady_seconds else float("nan"),
        }
    )


# -- the receiver's process: resources and probes -------------------------------------------


class ServeMonitor(threading.Thread):
    """Samples the serve process (and its decoder children) every 0.25 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.stop = threading.Event()
        self.peak_total_rss = 0
        self.peak_threads = 0
        self.peak_fds = 0
        self.children: dict[int, dict[str, Any]] = {}

    def sample(self) -> None:
        status = proc_status(self.pid)
        if not status:
            return
        total = kib(status, "VmRSS")
        self.peak_threads = max(self.peak_threads, int(status.get("Threads", "0")))
        self.peak_fds = max(self.peak_fds, fd_count(self.pid))
        for child in children_of(self.pid):
            child_status = proc_status(child)
            if child_status:
                total += kib(child_status, "VmRSS")
                self.children[child] = {
                    "hwm": kib(child_status, "VmHWM"),
                    "cpu": cpu_seconds(child),
                    "name": child_name(child),
                }
        self.peak_total_rss = max(self.peak_total_rss, total)

    def run(self) -> None:
        while not self.stop.wait(0.25):
            self.sample()


class Probe(threading.Thread):
    """Asks the query API once a second over both transports (HTTP GET /v1/runs, gRPC
    GetAdmission of the first honest run): is the receiver still answering?"""

    def __init__(self, http_port: int, get_admission: Any, token: str, run_id: str) -> None:
        super().__init__(daemon=True)
        self.http_port = http_port
        self.get_admission = get_admission
        self.token = token
        self.run_id = run_id
        self.stop = threading.Event()
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.failures: dict[str, Counter[str]] = defaultdict(Counter)

    def run(self) -> None:
        import grpc

        from verdictgate.v1 import verdictgate_pb2 as pb

        while not self.stop.wait(1.0):
            began = time.perf_counter()
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=5)
                connection.request(
                    "GET", "/v1/runs?page_size=1", headers={"Authorization": f"Bearer {self.token}"}
                )
                response = connection.getresponse()
                response.read()
                connection.close()
                if response.status == 200:
                    self.latencies["http"].append(time.perf_counter() - began)
                else:
                    self.failures["http"][str(response.status)] += 1
            except (OSError, http.client.HTTPException) as error:
                self.failures["http"][type(error).__name__] += 1
            began = time.perf_counter()
            try:
                self.get_admission(
                    pb.GetAdmissionRequest(run_id=self.run_id, format="json"),
                    metadata=(("authorization", f"Bearer {self.token}"),),
                    timeout=5,
                )
                self.latencies["grpc"].append(time.perf_counter() - began)
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:  # answered: the run is not there yet
                    self.latencies["grpc"].append(time.perf_counter() - began)
                else:
                    self.failures["grpc"][error.code().name] += 1


class StoreSampler(threading.Thread):
    """Samples the store's size on disk (the database, its WAL and shared memory) every 0.5 s."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.files = [folder / f"store.sqlite{suffix}" for suffix in ("", "-wal", "-shm")]
        self.stop = threading.Event()
        self.peak = self.last = 0

    def sample(self) -> None:
        size = 0
        for path in self.files:
            with contextlib.suppress(OSError):
                size += path.stat().st_size
        self.last = size
        self.peak = max(self.peak, size)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.sample()

    def contents(self) -> tuple[int, int] | None:
        """(framework spans held, trials stored) now, read from the store without writing
        (None when it cannot be read)."""
        import sqlite3

        try:
            with contextlib.closing(
                sqlite3.connect(f"file:{self.files[0]}?mode=ro", uri=True, timeout=5)
            ) as connection:
                held = connection.execute("SELECT COALESCE(SUM(spans), 0) FROM traces").fetchone()
                trials = connection.execute("SELECT COUNT(*) FROM trials").fetchone()
        except sqlite3.Error:
            return None
        return int(held[0]), int(trials[0])


def _seconds(duration: str) -> float:
    """A `serve` duration (`15s`, `2m`, `500ms`) in seconds."""
    from verdictgate.cli.receiver import parse_duration

    return parse_duration(duration)


def planned_framework(args: Any) -> int:
    return args.framework_cases * args.framework_trials


def drain_framework(process: Any, events: Any, limit: float) -> dict[str, Any]:
    """What the framework sender saw: its exports (seconds, ok) and trials sent per run."""
    seen: dict[str, Any] = {"exports": [], "trials": Counter(), "done": False}
    while process is not None and time.monotonic() < limit:
        try:
            event = events.get(timeout=0.5)
        except queue.Empty:
            if not process.is_alive():
                break
            continue
        if event[0] == "fw-export":
            seen["exports"].append((event[1], event[2]))
        elif event[0] == "fw-trial":
            seen["trials"][event[1]] += 1
        elif event[0] == "fw-done":
            seen["done"] = True
            break
    return seen


def all_final(get_admission: Any, token: str, runs: list[str], planned: int) -> bool:
    import grpc

    from verdictgate.v1 import verdictgate_pb2 as pb

    for run_id in runs:
        try:
            admission = get_admission(pb.GetAdmissionRequest(run_id=run_id),
                                      metadata=(("authorization", f"Bearer {token}"),), timeout=5)  # fmt: skip
        except grpc.RpcError:
            return False
        if not admission.final or admission.trials_received < planned:
            return False
    return True


# -- orchestration ----------------------------------------------------------------------------


def start_serve(
    folder: Path, token_file: Path, grace: str, extra: list[str], deadline: float
) -> tuple[Any, int, int, int | None]:
    """`verdictgate serve` on kernel-chosen ports; (process, grpc port, http port, scrape port
    when `--prometheus-listen` is among `extra`)."""
    with open(folder / "serve.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "verdictgate", "serve", "--store", str(folder / "store.sqlite"),
             "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
             "--token-file", str(token_file), "--grace", grace, *extra],
            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
        )  # fmt: skip
    limit = min(deadline, time.monotonic() + 30)
    while time.monotonic() < limit:
        text = (folder / "serve.log").read_text(errors="replace")
        for line in text.splitlines():
            if "receiving OTLP on grpc" in line:
                grpc_part, _, http_part = line.partition(", http ")
                grpc_port = int(grpc_part.rpartition(":")[2])
                http_port = int(http_part.partition(";")[0].rpartition(":")[2])
                _, metrics, scrape = line.partition("Prometheus metrics on ")
                scrape_port = int(scrape.partition("/")[0].rpartition(":")[2]) if metrics else None
                return server, grpc_port, http_port, scrape_port
        if server.poll() is not None:
            raise RuntimeError(f"verdictgate serve exited with {server.returncode}:\n{text}")
        time.sleep(0.05)
    raise RuntimeError("verdictgate serve did not start within 30 s")


def _alive(process: Any) -> bool:
    return process.poll() is None if isinstance(process, subprocess.Popen) else process.is_alive()


def stop_all(processes: list[Any], seconds: float = 3.0) -> None:
    """Terminate every child we started, all at once; kill those still there after `seconds`."""
    for process in processes:
        with contextlib.suppress(OSError):
            if _alive(process):
                process.terminate()
    limit = time.monotonic() + seconds
    while time.monotonic() < limit and any(_alive(process) for process in processes):
        time.sleep(0.05)
    for process in processes:
        with contextlib.suppress(OSError):
            if _alive(process):
                process.kill()
    for process in processes:
        with contextlib.suppress(Exception):
            process.wait(2) if isinstance(process, subprocess.Popen) else process.join(2)


def watcher_result(process: subprocess.Popen, output: Path, planned: int) -> tuple[str, bool]:
    """(what the watcher ended with, whether it saw the final admission with every trial)."""
    code = process.returncode
    if code is None:
        return "still waiting (killed)", False
    try:
        report = json.loads(output.read_text())
    except (OSError, ValueError):
        return f"exit {code}, no report", False
    trials = report.get("trials", {})
    final = not report.get("run", {}).get("in_progress", True)
    whole = trials.get("received") == trials.get("expected") == planned
    state = "final" if final else "in progress"
    return f"exit {code} {report.get('status')} {state}", code in (0, 1, 3) and final and whole


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=45.0,
        help="seconds over which the honest runs are sent (default 45)",
    )
    parser.add_argument("--runs", type=int, default=6, help="honest runs (default 6)")
    parser.add_argument("--cases", type=int, default=10, help="cases per honest run (default 10)")
    parser.add_argument("--trials", type=int, default=20, help="trials per case (default 20)")
    parser.add_argument(
        "--export-interval-ms",
        type=int,
        default=250,
        help="BatchSpanProcessor schedule delay (default 250)",
    )
    parser.add_argument("--watchers", type=int, default=20, help="status --wait clients (20)")
    parser.add_argument("--slow-sockets", type=int, default=200, help="stalled sockets (200)")
    parser.add_argument(
        "--slow-grpc-share",
        type=float,
        default=0.2,
        help="share of the slow sockets on the gRPC port (default 0.2)",
    )
    parser.add_argument(
        "--dribble-seconds",
        type=float,
        default=1.0,
        help="seconds between two bytes of a dribbling socket (default 1)",
    )
    parser.add_argument("--no-flooder", action="store_true", help="no authenticated flooder")
    parser.add_argument(
        "--flood-grpc",
        type=int,
        default=12,
        help="gRPC requests in flight, one channel (default 12)",
    )
    parser.add_argument(
        "--flood-http",
        type=int,
        default=4,
        help="HTTP requests in flight, one connection each (default 4)",
    )
    parser.add_argument("--flood-spans", type=int, default=512, help="spans per flood request")
    parser.add_argument(
        "--no-frameworks", action="store_true", help="no framework traffic (soak_frameworks.py)"
    )
    parser.add_argument("--framework-runs", type=int, default=2, help="framework runs (2)")
    parser.add_argument(
        "--framework-cases", type=int, default=6, help="cases per framework run (6)"
    )
    parser.add_argument(
        "--framework-trials", type=int, default=10, help="trials per framework case (10)"
    )
    parser.add_argument(
        "--trial-less", type=int, default=2000,
        help="trial-less traces per flood request, 0 for none (2000)",
    )  # fmt: skip
    parser.add_argument("--never-quiet", type=int, default=20, help="never-quiet trials (20)")
    parser.add_argument("--scrapers", type=int, default=8, help="Prometheus scrape loops (8)")
    parser.add_argument(
        "--settle", default="2s", help="serve --settle, with framework traffic (default 2s)"
    )
    parser.add_argument(
        "--max-hold", default="15s", help="serve --max-hold, with framework traffic (15s)"
    )
    parser.add_argument(
        "--grace", default="5s",
        help="serve --grace (default 5s: longer than the framework runs' pauses)",
    )  # fmt: skip
    parser.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for `verdictgate serve` (repeatable), e.g. "
        "--serve-arg=--decoders=0",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=4.0,
        help="seconds the attack runs before the first honest run (default 4)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=90.0,
        help="hard limit on the whole benchmark, seconds (default 90)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    if args.duration + args.warmup + TEARDOWN_RESERVE + 5 > args.deadline:
        parser.error(
            f"--duration + --warmup + {TEARDOWN_RESERVE + 5:g} s must fit within --deadline"
        )
    if args.runs < 1 or args.cases < 1 or args.trials < 1:
        parser.error("--runs, --cases and --trials must be positive")

    began = time.monotonic()
    load_before = os.getloadavg()[0]
    deadline = began + args.deadline
    hard_stop = threading.Timer(args.deadline, _thread.interrupt_main)
    hard_stop.daemon = True
    hard_stop.start()
    signal.signal(signal.SIGTERM, lambda *_: _thread.interrupt_main())

    folder = Path(tempfile.mkdtemp(prefix="verdictgate-soak-"))
    token = os.urandom(16).hex()
    token_file = folder / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    runs = [f"honest-{n}" for n in range(args.runs)]
    planned = args.cases * args.trials
    context = multiprocessing.get_context("spawn")
    children: list[Any] = []
    watchers: list[tuple[subprocess.Popen, Path, str]] = []
    server = None
    monitor = probe = store_sampler = None
    try:
        serve_args = list(args.serve_arg)
        if not args.no_frameworks:
            serve_args += ["--settle", args.settle, "--max-hold", args.max_hold,
                           "--prometheus-listen", "127.0.0.1:0"]  # fmt: skip
        try:
            server, grpc_port, http_port, scrape_port = start_serve(
                folder, token_file, args.grace, serve_args, deadline
            )
        except RuntimeError as error:
            print(f"receiver_soak: {error}", file=sys.stderr)
            return 2
        children.append(server)
        monitor = ServeMonitor(server.pid)
        monitor.start()
        print(
            f"serve pid {server.pid}: grpc 127.0.0.1:{grpc_port}, http 127.0.0.1:{http_port}, "
            f"store and logs in {folder}",
            flush=True,
        )

        # watchers first: they wait for runs that have not appeared yet
        wait = max(10.0, deadline - time.monotonic() - TEARDOWN_RESERVE + 4)
        for n in range(args.watchers):
            run_id = runs[n % len(runs)]
            output = folder / f"watcher-{n}.json"
            with open(output, "wb") as out, open(folder / f"watcher-{n}.err", "wb") as err:
                process = subprocess.Popen(
                    [sys.executable, "-m", "verdictgate", "status", "--endpoint",
                     f"127.0.0.1:{grpc_port}", "--run", run_id, "--wait", f"{wait:.0f}",
                     "--format", "json", "--token-file", str(token_file)],
                    stdout=out, stderr=err,
                )  # fmt: skip
            watchers.append((process, output, run_id))
            children.append(process)

        stop = context.Event()
        end_by = time.time() + (deadline - time.monotonic()) - 11  # they stop themselves then
        slow_results = context.Queue()
        slow = None
        if args.slow_sockets > 0:
            slow = context.Process(
                target=slow_sockets,
                args=(http_port, grpc_port, args.slow_sockets, args.slow_grpc_share,
                      args.dribble_seconds, end_by, stop, slow_results),
                daemon=True,
            )  # fmt: skip
            slow.start()
            children.append(slow)
        flood_results = context.Queue()
        flood = None
        if not args.no_flooder:
            flood = context.Process(
                target=flooder,
                args=(grpc_port, http_port, token, args.flood_grpc, args.flood_http,
                      args.flood_spans, end_by, stop, flood_results),
                daemon=True,
            )  # fmt: skip
            flood.start()
            children.append(flood)
        framework_results: dict[str, Any] = {}
        framework_attack: list[tuple[str, Any]] = []
        if not args.no_frameworks:
            attacks = [
                ("trial_less", soak_frameworks.trial_less_flood,
                 (http_port, token, args.trial_less)),
                ("never_quiet", soak_frameworks.never_quiet, (http_port, token, args.never_quiet)),
                ("scrapes", soak_frameworks.scrape_loop, (scrape_port, args.scrapers)),
            ]  # fmt: skip
            for name, target, extra in attacks:
                if extra[-1] and (name != "scrapes" or scrape_port is not None):
                    results = context.Queue()
                    process = context.Process(
                        target=target, args=(*extra, end_by, stop, results), daemon=True
                    )
                    process.start()
                    children.append(process)
                    framework_attack.append((name, results))
        store_sampler = StoreSampler(folder)
        store_sampler.start()

        import grpc

        from verdictgate.v1 import verdictgate_pb2 as pb

        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        get_admission = channel.unary_unary(
            ADMISSION,
            request_serializer=pb.GetAdmissionRequest.SerializeToString,
            response_deserializer=pb.Admission.FromString,
        )
        probe = Probe(http_port, get_admission, token, runs[0])
        probe.start()
        time.sleep(args.warmup)
        cpu_before_honest = cpu_seconds(server.pid)

        # the honest sender
        events = context.Queue()
        honest_began = time.monotonic()
        honest = context.Process(
            target=honest_sender,
            args=(f"http://127.0.0.1:{grpc_port}", token, runs, args.cases, args.trials,
                  args.duration, args.export_interval_ms, str(folder / "honest.log"), events),
            daemon=True,
        )  # fmt: skip
        honest.start()
        children.append(honest)
        framework_runs = [f"framework-{n}" for n in range(args.framework_runs)]
        framework_events = context.Queue()
        framework = None
        if not args.no_frameworks and framework_runs:
            framework = context.Process(
                target=soak_frameworks.framework_sender,
                args=(f"http://127.0.0.1:{grpc_port}", token, framework_runs,
                      args.framework_cases, args.framework_trials, args.duration,
                      _seconds(args.settle), framework_events),
                daemon=True,
            )  # fmt: skip
            framework.start()
            children.append(framework)
        exports: list[tuple] = []
        retries: Counter[str] = Counter()
        gave_up: Counter[str] = Counter()
        ended: Counter[str] = Counter()
        local: dict[str, tuple[str, int]] = {}
        honest_done = False
        begun = 0
        honest_limit = deadline - TEARDOWN_RESERVE
        while time.monotonic() < honest_limit and not honest_done:
            try:
                event = events.get(timeout=0.5)
            except queue.Empty:
                if not honest.is_alive():
                    break
                continue
            kind = event[0]
            if kind == "begin":
                begun += 1
            elif kind == "export":
                exports.append(event)
            elif kind == "retry":
                retries[event[1]] += 1
            elif kind == "gave_up":
                gave_up[event[1]] += 1
            elif kind == "ended":
                ended[event[1]] += 1
            elif kind == "local":
                local[event[1]] = (event[2], event[3])
            elif kind == "done":
                honest_done = True
        honest_seconds = time.monotonic() - honest_began
        framework_seen = drain_framework(framework, framework_events, honest_limit)

        # watchers: each should end once its run is final (the plan completes at once)
        watch_limit = min(deadline - TEARDOWN_RESERVE + 4, time.monotonic() + 15)
        while time.monotonic() < watch_limit and any(p.poll() is None for p, _, _ in watchers):
            time.sleep(0.1)

        # final reads, under the attack still running
        admissions: dict[str, Any] = {}
        read_errors: dict[str, str] = {}
        reads_limit = deadline - 11
        if framework is not None or framework_attack:  # settling and max-hold take their time
            settled_by = min(reads_limit - 3, time.monotonic() + _seconds(args.max_hold) + 5)
            while time.monotonic() < settled_by and not all_final(
                get_admission, token, framework_runs, planned_framework(args)
            ):
                time.sleep(0.5)
        read_ids = runs if args.no_frameworks else [*runs, *framework_runs]
        if not args.no_frameworks and args.never_quiet:
            read_ids.append(soak_frameworks.NEVER_QUIET_RUN)
        for run_id in read_ids:
            for _ in range(3):
                remaining = reads_limit - time.monotonic()
                if remaining <= 0.2:
                    read_errors.setdefault(run_id, "not read: out of time")
                    break
                try:
                    admissions[run_id] = get_admission(
                        pb.GetAdmissionRequest(run_id=run_id, format="json"),
                        metadata=(("authorization", f"Bearer {token}"),),
                        timeout=min(5.0, remaining),
                    )
                    read_errors.pop(run_id, None)
                    break
                except grpc.RpcError as error:
                    read_errors[run_id] = f"{error.code().name}: {error.details()}"
                    time.sleep(0.2)

        # stop the attack, collect what it saw
        probe.stop.set()
        stop.set()
        slow_seen = flood_seen = None
        with contextlib.suppress(queue.Empty):
            if slow is not None:
                slow_seen = slow_results.get(
                    timeout=max(0.5, min(3.0, deadline - 8 - time.monotonic()))
                )
        with contextlib.suppress(queue.Empty):
            if flood is not None:
                flood_seen = flood_results.get(
                    timeout=max(0.5, min(8.0, deadline - 5 - time.monotonic()))
                )
        for name, results in framework_attack:
            with contextlib.suppress(queue.Empty):
                framework_results[name] = results.get(
                    timeout=max(0.5, min(5.0, deadline - 4 - time.monotonic()))
                )
        store_sampler.stop.set()
        store_sampler.sample()
        monitor.sample()
        serve_status = proc_status(server.pid)
        serve_cpu = cpu_seconds(server.pid)
        child_cpu = sum(cpu_seconds(child) for child in children_of(server.pid))
        monitor.sample()
        for child, seen in monitor.children.items():
            seen["cpu"] = max(seen["cpu"], cpu_seconds(child))
        child_cpu = max(child_cpu, sum(seen["cpu"] for seen in monitor.children.values()))
        channel.close()
        elapsed = time.monotonic() - began

        report(
            args=args,
            runs=runs,
            planned=planned,
            exports=exports,
            retries=retries,
            gave_up=gave_up,
            ended=ended,
            begun=begun,
            local=local,
            honest_done=honest_done,
            honest_seconds=honest_seconds,
            watchers=watchers,
            admissions=admissions,
            read_errors=read_errors,
            slow_seen=slow_seen,
            flood_seen=flood_seen,
            monitor=monitor,
            serve_status=serve_status,
            serve_cpu=serve_cpu,
            child_cpu=child_cpu,
            cpu_before_honest=cpu_before_honest,
            probe=probe,
            elapsed=elapsed,
            folder=folder,
            load=(load_before, os.getloadavg()[0]),
            framework_runs=framework_runs,
            framework_seen=framework_seen,
            framework_results=framework_results,
            store_sampler=store_sampler,
        )
        framework_good = args.no_frameworks or (
            all(
                run_id in admissions
                and admissions[run_id].final
                and admissions[run_id].trials_received == planned_framework(args)
                for run_id in framework_runs
            )
            and (
                not args.never_quiet
                or (
                    soak_frameworks.NEVER_QUIET_RUN in admissions
                    and admissions[soak_frameworks.NEVER_QUIET_RUN].trials_received
                    == args.never_quiet
                )
            )
        )
        good = framework_good and all(
            run_id in admissions
            and admissions[run_id].final
            and admissions[run_id].trials_received == planned
            and admissions[run_id].trials_expected == planned
            and "incomplete" not in admissions[run_id].reasons
            for run_id in runs
        )
        return 0 if good else 1
    except KeyboardInterrupt:
        reached = time.monotonic() - began >= args.deadline - 0.5
        why = f"hard deadline of {args.deadline:g} s reached" if reached else "interrupted"
        print(f"receiver_soak: {why}; every child killed, no verdict", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # nothing interrupts the cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        hard_stop.cancel()
        for thread in (monitor, probe, store_sampler):
            if thread is not None:
                thread.stop.set()
        stop_all(children)
        if server is not None:  # its decoder workers too: the session we gave it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(server.pid, signal.SIGKILL)
        if not args.keep:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


def framework_rows(k: dict[str, Any]) -> list[tuple[str, str]]:
    """The report's rows on framework traffic (none without it)."""
    args, admissions = k["args"], k["admissions"]
    if args.no_frameworks:
        return []
    rows: list[tuple[str, str]] = []
    planned = planned_framework(args)
    complete = sum(
        1 for run_id in k["framework_runs"]
        if run_id in admissions and admissions[run_id].final
        and admissions[run_id].trials_received == planned
    )  # fmt: skip
    seen = k["framework_seen"]
    rows.append((
        "framework runs final and complete",
        f"{complete}/{len(k['framework_runs'])} ({sum(seen['trials'].values())} trials sent, "
        f"{planned} a run, nested under the run span, pauses beyond --settle)",
    ))  # fmt: skip
    for run_id in k["framework_runs"]:
        admission = admissions.get(run_id)
        if admission is not None:
            rows.append((f"  {run_id}", f"final {admission.final}, received "
                         f"{admission.trials_received}/{planned}, {admission.status}"))  # fmt: skip
    latencies = [seconds * 1000 for seconds, _ in seen["exports"]]
    if latencies:
        failed = sum(1 for _, ok in seen["exports"] if not ok)
        rows.append(("framework export latency", f"p50 {quantile(latencies, 0.5):.1f} ms, "
                     f"p99 {quantile(latencies, 0.99):.1f} ms over {len(latencies)} exports, "
                     f"{failed} failed"))  # fmt: skip
    results = k["framework_results"]
    flood = results.get("trial_less")
    if flood is not None:
        accepted = flood["seen"].get("spans accepted", 0)
        codes = {key: v for key, v in flood["seen"].items() if key != "spans accepted"}
        rows.append(("trial-less traces flood", f"{accepted:,} traces accepted "
                     f"({accepted / max(flood['seconds'], 1e-9):,.0f}/s), answers {codes}"))  # fmt: skip
    quiet = admissions.get(soak_frameworks.NEVER_QUIET_RUN)
    if quiet is not None or "never_quiet" in results:
        told = results.get("never_quiet", {})
        rows.append(("never-quiet trials stored", (
            f"{quiet.trials_received if quiet else 0}/{args.never_quiet} (settled at --max-hold "
            f"{args.max_hold}), final {quiet.final if quiet else '?'}; "
            f"{told.get('ticks', '?')} seconds of spans, answers {told.get('seen')}"
        )))  # fmt: skip
    scrapes = results.get("scrapes")
    if scrapes is not None:
        lat = [x * 1000 for x in scrapes["latencies"]]
        rows.append(("scrapes", f"{len(lat):,} by {args.scrapers} loops, p50 "
                     f"{quantile(lat, 0.5):.1f} ms, p99 {quantile(lat, 0.99):.1f} ms, "
                     f"answers {scrapes['seen']}"))  # fmt: skip
    sampler = k["store_sampler"]
    contents = sampler.contents()
    held = (
        f"; it holds {contents[0]:,} framework spans (cap 500,000, about 100 MiB) and "
        f"{contents[1]:,} trials (about 100 bytes each)"
        if contents is not None
        else ""
    )
    rows.append(("store on disk (db + WAL)", f"peak {sampler.peak / 2**20:.0f} MiB, at the end "
                 f"{sampler.last / 2**20:.0f} MiB{held}"))  # fmt: skip
    return rows


def _codes(counts: dict[str, int]) -> str:
    return f" {dict(counts)}" if counts else ""


def report(**k: Any) -> None:
    args, runs, planned = k["args"], k["runs"], k["planned"]
    exports = k["exports"]
    ok_exports = [e for e in exports if e[5]]
    latencies_ms = [e[2] * 1000 for e in exports]
    acknowledged: Counter[str] = Counter()
    run_spans_acknowledged = 0
    for export in ok_exports:
        for key, count in export[4].items():
            if key.startswith("run-span:"):
                run_spans_acknowledged += count
            else:
                acknowledged[key] += count
    admissions, read_errors = k["admissions"], k["read_errors"]
    print()
    print(
        f"soak of {k['elapsed']:.0f} s: {len(runs)} honest runs x {args.cases} cases x "
        f"{args.trials} trials over {args.duration:g} s (official OTLP/gRPC exporter, batch "
        f"every {args.export_interval_ms} ms), {args.watchers} watchers, {args.slow_sockets} slow "
        f"sockets, flooder {'off' if args.no_flooder else 'on'}; serve --grace {args.grace}"
    )
    print()
    print(
        f"  {'run':<10} {'final':<6} {'received':>9} {'expected':>9} {'acked':>6} "
        f"{'ended':>6}  receiver status (reasons) / in-process status"
    )
    finals = 0
    for run_id in runs:
        admission = admissions.get(run_id)
        if admission is None:
            print(f"  {run_id:<10} ?      read failed: {read_errors.get(run_id)}")
            continue
        complete = (
            admission.final
            and admission.trials_received == admission.trials_expected == planned
            and "incomplete" not in admission.reasons
        )
        finals += complete
        local = k["local"].get(run_id)
        local_text = f"{local[0]} ({local[1]} trials)" if local else "none"
        print(
            f"  {run_id:<10} {'yes' if admission.final else 'NO':<6} "
            f"{admission.trials_received:>9} {admission.trials_expected:>9} "
            f"{acknowledged[run_id]:>6} {k['ended'][run_id]:>6}  "
            f"{admission.status} ({', '.join(admission.reasons) or '-'}) / {local_text}"
        )
    print(
        "  (received/expected: the receiver's GetAdmission; acked: decision spans in export() "
        "calls that\n   returned SUCCESS, which the SDK's exporter reports even when the receiver "
        "rejected spans\n   through OTLP partial success; ended: decision spans the SDK ended)"
    )
    print()
    rows: list[tuple[str, str]] = []
    rows.append(("honest runs final and complete", f"{finals}/{len(runs)}"))
    rows.append(
        (
            "honest trials acknowledged",
            f"{sum(acknowledged.values()):,} of {planned * len(runs):,} planned "
            f"(+ {run_spans_acknowledged} run spans); ended in the SDK {sum(k['ended'].values()):,}",
        )
    )
    if latencies_ms:
        rows.append(
            (
                "export latency (each export() call)",
                f"p50 {quantile(latencies_ms, 0.5):.1f} ms, p99 {quantile(latencies_ms, 0.99):.1f} ms, "
                f"max {max(latencies_ms):.1f} ms over {len(latencies_ms)} exports "
                f"(mean {statistics.fmean(e[3] for e in exports):.0f} spans)",
            )
        )
    failed = len(exports) - len(ok_exports)
    rows.append(
        (
            "export failures / retries",
            f"{failed} export() calls returned FAILURE; exporter gave up {sum(k['gave_up'].values())}"
            f" times{_codes(k['gave_up'])}; retried {sum(k['retries'].values())} times"
            f"{_codes(k['retries'])}",
        )
    )
    blocked = k["begun"] - len(exports)
    rows.append(
        (
            "honest sender",
            f"{'finished' if k['honest_done'] else 'DID NOT FINISH'} in {k['honest_seconds']:.1f} s"
            + (
                f"; {blocked} export() call(s) still blocked when it was stopped (not in the "
                "latency figures)"
                if blocked
                else ""
            ),
        )
    )
    outcomes: Counter[str] = Counter()
    ok_watchers = 0
    for process, output, _ in k["watchers"]:
        state, ok = watcher_result(process, output, planned)
        outcomes[state] += 1
        ok_watchers += ok
    rows.append(
        (
            "watchers finished ok (saw final + all trials)",
            f"{ok_watchers}/{len(k['watchers'])}  {dict(outcomes)}",
        )
    )
    slow = k["slow_seen"]
    if slow is not None:
        closed = sum(slow["closed"].values())
        rows.append(
            (
                "slow sockets closed by the server",
                f"{closed} closes over {sum(slow['opened'].values())} connections opened; "
                f"held open: mean {slow['mean_open']:.0f}, fewest {slow['fewest_open']} of "
                f"{args.slow_sockets}; "
                f"open at the end {sum(slow['open_at_end'].values())}; "
                f"connects failed {sum(slow['connect_failed'].values())}",
            )
        )
        for kind in SLOW_KINDS:
            lifetimes = slow["lifetimes"].get(kind, [])
            if kind not in slow["opened"]:
                continue
            held = (
                f"lived median {statistics.median(lifetimes):.1f} s (min {lifetimes[0]:.1f}, "
                f"max {lifetimes[-1]:.1f})"
                if lifetimes
                else "never closed by the server"
            )
            rows.append(
                (
                    f"  {kind}",
                    f"opened {slow['opened'].get(kind, 0)}, closed {slow['closed'].get(kind, 0)}, "
                    f"{held}",
                )
            )
        if slow["replies"]:
            rows.append(("  answers before a close", str(slow["replies"])))
    elif args.slow_sockets:
        rows.append(("slow sockets", "NO RESULT (process did not report)"))
    flood = k["flood_seen"]
    if flood is not None:
        for transport, stats in sorted(flood["stats"].items()):
            refused = {key[8:]: v for key, v in stats.items() if key.startswith("refused ")}
            failures = {key[7:]: v for key, v in stats.items() if key.startswith("failed ")}
            lat = [x * 1000 for x in flood["latencies"].get(transport, [])]
            rate = stats.get("spans accepted", 0) / max(flood["seconds"], 1e-9)
            rows.append(
                (
                    f"flooder {transport}",
                    f"accepted {stats.get('accepted', 0):,} requests ({stats.get('spans accepted', 0):,}"
                    f" spans, {rate:,.0f}/s; rejected spans {stats.get('spans rejected (partial success)', 0)})"
                    f", refused {sum(refused.values()):,}{_codes(refused)}"
                    + (f", failed {sum(failures.values()):,}{_codes(failures)}" if failures else "")
                    + (
                        f"; accepted p50 {quantile(lat, 0.5):.0f} ms p99 {quantile(lat, 0.99):.0f} ms"
                        if lat
                        else ""
                    )
                    + (
                        f"; server closed {stats['connections closed by the server']} connections"
                        if stats.get("connections closed by the server")
                        else ""
                    ),
                )
            )
        for message, count in flood["why"].items():
            rows.append(("  refusal/failure answer", f"{count:,} x {message}"))
        rows.append(
            (
                "flooder",
                f"{flood['runs']} flood runs touched over {flood['seconds']:.0f} s"
                + (
                    f"; {flood['unfinished_workers']} workers stuck at the end"
                    if flood["unfinished_workers"]
                    else ""
                ),
            )
        )
    elif not args.no_flooder:
        rows.append(("flooder", "NO RESULT (process did not report)"))
    probe = k["probe"]
    for transport in ("http", "grpc"):
        lat = [x * 1000 for x in probe.latencies.get(transport, [])]
        fails = probe.failures.get(transport, Counter())
        rows.append(
            (
                f"query probe {transport} (1/s)",
                (
                    f"p50 {quantile(lat, 0.5):.0f} ms, max {max(lat):.0f} ms over {len(lat)}"
                    if lat
                    else "no answer"
                )
                + (f"; failed {sum(fails.values())} {dict(fails)}" if fails else ""),
            )
        )
    rows += framework_rows(k)
    status, monitor = k["serve_status"], k["monitor"]
    children = ", ".join(
        f"{c['name']} {c['hwm'] / 1024:.0f} MiB" for c in monitor.children.values()
    )
    rows.append(
        (
            "serve peak RSS (VmHWM)",
            f"{kib(status, 'VmHWM') / 1024:.0f} MiB serve process"
            + (f"; its children: {children}" if children else "")
            + f"; peak sampled sum of all {monitor.peak_total_rss / 1024:.0f} MiB",
        )
    )
    rows.append(
        (
            "serve CPU seconds",
            f"{k['serve_cpu']:.1f} s serve process ({k['serve_cpu'] - k['cpu_before_honest']:.1f} s "
            f"since the honest sender began) + {k['child_cpu']:.1f} s its children",
        )
    )
    rows.append(("serve peak threads / open fds", f"{monitor.peak_threads} / {monitor.peak_fds}"))
    rows.append(
        (
            "host load average (1 min)",
            f"{k['load'][0]:.1f} before, {k['load'][1]:.1f} at the end, on {os.cpu_count()} cores",
        )
    )
    log = (k["folder"] / "serve.log").read_text(errors="replace").splitlines()
    problems = [line for line in log if " WARNING " in line or " ERROR " in line]
    rows.append(("serve log warnings/errors", str(len(problems))))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    for line in problems[:8]:
        print(f"    serve: {line[:200]}")
    if finals < len(runs):
        print(f"\nFAIL: {len(runs) - finals} honest run(s) not final with every planned trial")
    else:
        print("\nOK: every honest run is final and holds every planned trial")


if __name__ == "__main__":
    sys.exit(main())
