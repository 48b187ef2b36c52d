"""What a publish target that is down costs senders and shutdown: `verdictgate serve
--publish-endpoint` pointing at a port where nothing listens.

Each repeat starts `verdictgate serve` (store on disk), sends three runs (2 cases x 6 trials,
each declared by its run span, so each completes and is admitted) with the official
`OTLPSpanExporter` (2 s timeout), then sends SIGTERM. Prints the wall time of each export and
of SIGTERM to exit. `tests/test_publish_outage.py` checks what happens meanwhile: every export
succeeds, and the admissions wait in the outbox and reach the collector once it appears.

    python benchmarks/publish_outage.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' serve helper

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from receiver_support import start_serve
from verdictgate import Contract, Policy, Suite, decision, evaluation_run, trial

SUITE = Suite("refunds", "refund_gate", (), Contract({"approve", "deny"}))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_spans(run_id: str) -> list:
    """The finished spans of one run: 2 cases x 6 trials, declared by its run span."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with evaluation_run(
        run_id=run_id, suite=SUITE, policy=Policy(tolerance=0.15), planned_trials=12,
        tracer_provider=provider,
    ):  # fmt: skip
        for case, route in (("c1", "approve"), ("c2", "deny")):
            for index in range(6):
                with (
                    trial(run=run_id, case=case, index=index, expected=route, suite=SUITE.name),
                    decision(SUITE.point, tracer_provider=provider) as recorder,
                ):
                    recorder.record(route)
    return list(memory.get_finished_spans())


def one_outage(folder: Path, repeat: int) -> tuple[list[float], float, str]:
    """Seconds of each of three exports and of SIGTERM to exit, with the target down; and
    what the receiver logged."""
    grpc_port = free_port()
    process = start_serve(
        folder / f"outage-{repeat}.sqlite",
        grpc_port,
        "--publish-endpoint",
        f"http://127.0.0.1:{free_port()}",
    )
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True, timeout=2)
    exports = []
    try:
        for run in range(3):
            spans = run_spans(f"outage-{repeat}-{run}")
            began = time.perf_counter()
            result = exporter.export(spans)
            exports.append(time.perf_counter() - began)
            if result is not SpanExportResult.SUCCESS:
                raise RuntimeError(f"export {run} failed: {result}")
    finally:
        exporter.shutdown()
    began = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    _, log = process.communicate(timeout=60)
    return exports, time.perf_counter() - began, log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("opentelemetry.exporter.otlp").setLevel(logging.CRITICAL)  # start-up probes
    exports: list[float] = []
    exits: list[float] = []
    waiting: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            times, exit_seconds, log = one_outage(Path(folder), repeat)
            exports += times
            exits.append(exit_seconds)
            found = re.search(r"(\d+) admissions? waits? in the outbox", log)
            waiting.append(found.group(1) if found else "?")
    print(f"publish target down, {args.repeats} repeats of 3 runs (OTLP/gRPC, 2 s timeout):")
    print(
        f"  each export of a run: {min(exports) * 1e3:.1f} to {max(exports) * 1e3:.1f} ms "
        f"(median {statistics.median(exports) * 1e3:.1f} ms)"
    )
    print(
        f"  SIGTERM to exit:      {min(exits):.2f} to {max(exits):.2f} s "
        f"(median {statistics.median(exits):.2f} s)"
    )
    print(f"  admissions left waiting in the outbox at exit: {', '.join(waiting)}")


if __name__ == "__main__":
    main()
