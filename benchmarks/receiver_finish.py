"""What the request that completes a large run costs, beside the requests before it.

One run of 100,000 trials (100 cases x 1,000 trials) declared by its run span, sent to a
receiver on an on-disk store in 50 OTLP/gRPC requests of 2,000 decision spans, one at a time
over loopback. The last request completes the plan: the receiver commits it, makes the run
final in the same commit and hands it to its finisher, which assesses it on its own thread.
Prints the median request, the completing one and their ratio, then how long after the
acknowledgement the admission was made.

    python benchmarks/receiver_finish.py [--trials 100000] [--requests 50] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from verdictgate import Contract, Isolation, Policy, Suite
from verdictgate.otel import conventions as names
from verdictgate.otel.spans import run_attributes
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.publishing.otlp_target import any_value
from verdictgate.receiver.server import Limits, Server
from verdictgate.receiver.store import Store

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
ROUTES = ["card_security", "cash_withdrawal", "duplicate_charge", "merchant_dispute"]
CASES = 100


def encoded(spans: list[Span]) -> bytes:
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )
    return request.SerializeToString()


def requests_of(run: str, trials: int, count: int) -> list[bytes]:
    """The run's decision spans in `count` requests, the run span in the first."""
    suite = Suite("bench", "payment_router", (), Contract(set(ROUTES)))
    declared = run_attributes(run, suite, Policy(), trials, Isolation.FRESH_SESSION)
    spans = []
    for n in range(trials):
        case, index = n % CASES, n // CASES
        route = ROUTES[case % len(ROUTES)]
        attributes = {
            names.RUN_ID: run, names.SUITE: "bench", names.POINT: "payment_router",
            names.CASE_ID: f"case-{case}", names.CASE_EXPECTED: route, names.TRIAL: index,
            names.OUTCOME: "decision", names.VERDICT: route,
        }  # fmt: skip
        spans.append(
            Span(
                name="decide payment_router",
                trace_id=n.to_bytes(16, "big"),
                span_id=n.to_bytes(8, "big"),
                attributes=[KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()],
            )
        )
    size = trials // count
    batches = [spans[n : n + size] for n in range(0, trials, size)]
    run_span = Span(
        name=names.RUN_SPAN,
        trace_id=b"\x09" * 16,
        span_id=b"\x09" * 8,
        attributes=[KeyValue(key=k, value=any_value(v)) for k, v in declared.items()],
    )
    batches[0] = [run_span, *batches[0]]
    return [encoded(batch) for batch in batches]


def one_run(folder: Path, number: int, trials: int, count: int) -> tuple[list[float], float]:
    """Request times of one run, and the seconds from the last acknowledgement to its
    admission."""
    receiver = Receiver(Store(folder / f"store-{number}.sqlite"), None, ReceiverConfig(idle=3600))
    server = Server(receiver, grpc_listen="127.0.0.1:0", http_listen=None, limits=Limits())
    server.start()
    run = f"big-{number}"
    bodies = requests_of(run, trials, count)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    export = channel.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)
    try:
        export(encoded([]), timeout=30)  # the channel is up
        times = []
        for body in bodies:
            start = time.perf_counter()
            export(body, timeout=120)
            times.append(time.perf_counter() - start)
        acknowledged = time.perf_counter()
        assert receiver.flush(300), "the finisher did not admit the run"
        admitted = time.perf_counter() - acknowledged
        stored = receiver.store.run(run)
        assert stored is not None and stored.status is not None and stored.received == trials
    finally:
        channel.close()
        server.stop()
    return times, admitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    ratios, medians, lasts, admissions = [], [], [], []
    with tempfile.TemporaryDirectory() as folder:
        for number in range(args.repeats):
            times, admitted = one_run(Path(folder), number, args.trials, args.requests)
            median = statistics.median(times[:-1])
            medians.append(median)
            lasts.append(times[-1])
            ratios.append(times[-1] / median)
            admissions.append(admitted)
    print(
        f"one run of {args.trials:,} trials in {args.requests} requests of "
        f"{args.trials // args.requests:,} decision spans, on-disk store, {args.repeats} repeats"
    )
    for n, (median, last, ratio) in enumerate(zip(medians, lasts, ratios, strict=True)):
        print(
            f"  repeat {n + 1}: median request {median * 1e3:7.1f} ms, completing request "
            f"{last * 1e3:7.1f} ms, ratio {ratio:.2f}"
        )
    print(
        f"  completing / median request: {statistics.median(ratios):.2f}x (target <= 1.5x); "
        f"admission made {statistics.median(admissions) * 1e3:.1f} ms after the last "
        "acknowledgement, on the finisher"
    )


if __name__ == "__main__":
    main()
