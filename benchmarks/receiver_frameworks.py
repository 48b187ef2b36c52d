"""Ingest of agent-framework spans into `verdictgate serve`, and what a trace in flight costs.

Pre-encodes Strands-shaped traces (a harness's `verdictgate.trial` span, `invoke_agent`, two
event-loop cycles with their `chat` spans, one `execute_tool`: 7 spans a trial, content
attributes included) in export requests of 512 spans, and sends them over OTLP/gRPC with several
in flight to `verdictgate serve` (store on disk, every request committed before it is
acknowledged). With `--settle 3600s` every trace stays in flight, so the store's growth and the
process's RSS per trace are what a trace waiting to settle costs. Then the settle time is let
pass in a second receiver on the same store, which derives every trial; the rate of that is
printed too.

    python benchmarks/receiver_frameworks.py [--trials 40000] [--in-flight 4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from receiver import attribute, send, serve
from receiver_idle import rss_mib

SPANS_PER_REQUEST = 512
TOOLS = ["block_card", "open_dispute", "refund", "track_order"]


def trial_spans(number: int) -> list[Span]:
    """The 7 spans of one trial (run of 1,000 trials, 100 cases), in one trace."""
    run, within = divmod(number, 1000)
    case, index = divmod(within, 10)
    trace_id = (number + 1).to_bytes(16, "big")
    spans: list[Span] = []

    def add(name: str, parent: Span | None, **attributes: str | int) -> Span:
        span = Span(
            name=name, trace_id=trace_id, span_id=(number * 8 + len(spans) + 1).to_bytes(8, "big"),
            parent_span_id=parent.span_id if parent is not None else b"",
            start_time_unix_nano=1_000 + len(spans), end_time_unix_nano=2_000_000,
            attributes=[attribute(k, v) for k, v in attributes.items()],
        )  # fmt: skip
        spans.append(span)
        return span

    harness = add("verdictgate.trial", None, **{
        "verdictgate.run.id": f"bench-{run}", "verdictgate.case.id": f"case-{case}",
        "verdictgate.trial": index, "verdictgate.case.expected": TOOLS[case % 4],
        "verdictgate.decision.rule": "tools", "verdictgate.suite": "support"})  # fmt: skip
    agent = add("invoke_agent support", harness, **{"gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "support", "gen_ai.system": "strands-agents"})  # fmt: skip
    first = add("execute_event_loop_cycle", agent, **{"gen_ai.operation.name":
                                                       "execute_event_loop_cycle"})  # fmt: skip
    add("chat", first, **{"gen_ai.operation.name": "chat",
                          "gen_ai.input.messages": "I do not recognise this purchase " * 4})  # fmt: skip
    add(f"execute_tool {TOOLS[case % 4]}", first, **{"gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": TOOLS[case % 4], "gen_ai.tool.call.arguments": '{"reason": "x"}'})  # fmt: skip
    second = add("execute_event_loop_cycle", agent, **{"gen_ai.operation.name":
                                                        "execute_event_loop_cycle"})  # fmt: skip
    add("chat", second, **{"gen_ai.operation.name": "chat"})
    return spans


def encoded_requests(trials: int) -> tuple[list[bytes], int]:
    spans = [span for number in range(trials) for span in trial_spans(number)]
    requests = []
    for start in range(0, len(spans), SPANS_PER_REQUEST):
        request = ExportTraceServiceRequest(
            resource_spans=[
                ResourceSpans(
                    scope_spans=[ScopeSpans(spans=spans[start : start + SPANS_PER_REQUEST])]
                )
            ]
        )
        requests.append(request.SerializeToString())
    return requests, len(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40_000)
    parser.add_argument("--in-flight", type=int, default=4)
    args = parser.parse_args()
    requests, spans = encoded_requests(args.trials)
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "store.sqlite"
        server, port = serve(str(store), "--grace", "3600s", "--settle", "3600s")
        try:
            results = context.Queue()
            warm = context.Process(target=send, args=(port, requests[:2], 1, results))
            warm.start()
            results.get()
            warm.join()
            rss_before = rss_mib(server.pid)
            size_before = sum(f.stat().st_size for f in Path(folder).iterdir())
            sender = context.Process(
                target=send, args=(port, requests[2:], args.in_flight, results)
            )
            sender.start()
            elapsed, *_ = results.get()
            sender.join()
            rss_after = rss_mib(server.pid)
        finally:
            server.terminate()
            server.wait(30)
        size_after = sum(f.stat().st_size for f in Path(folder).iterdir())
        sent = spans - sum(len(ExportTraceServiceRequest.FromString(r).resource_spans[0]
                               .scope_spans[0].spans) for r in requests[:2])  # fmt: skip
        from verdictgate.receiver.config import ReceiverConfig
        from verdictgate.receiver.core import Receiver
        from verdictgate.receiver.store import Store

        clock = [time.time() + 7200]
        receiver = Receiver(Store(store), None, ReceiverConfig(settle=5.0), clock=lambda: clock[0])
        begin = time.perf_counter()
        receiver.tick()
        while receiver.store.traces.quiet_traces(clock[0] - 5.0, clock[0] - 120.0, 1):
            receiver.tick()
        settled = time.perf_counter() - begin
        derived = sum(run.received for run in receiver.store.runs())
    traces = sent // 7
    print(f"{args.trials:,} trials as {spans:,} Strands-shaped spans in {len(requests)} requests "
          f"of {SPANS_PER_REQUEST}, {args.in_flight} in flight, store on disk")  # fmt: skip
    print(
        f"  ingest:   {sent / elapsed:10,.0f} framework spans/s ({traces / elapsed:,.0f} trials/s)"
    )
    print(f"  in flight: store +{(size_after - size_before) / traces:,.0f} bytes per trace, "
          f"RSS {rss_before:.0f} -> {rss_after:.0f} MiB for {traces:,} traces")  # fmt: skip
    print(f"  settle:   {derived:,} trials derived in {settled:.1f} s "
          f"({derived / settled:,.0f} trials/s)")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
