"""Cost of the EvidenceProcessor per decision, and its memory over a million decisions.

Two SDK pipelines, identical but for the EvidenceProcessor: a TracerProvider with a
BatchSpanProcessor feeding an exporter that discards (what any instrumented service already
pays), with and without the processor in front. Each decision is a decorated router call inside
a trial scope. The pipelines take turns in short blocks (ABBA) so that drift of the machine hits
both alike; the median of the paired ratios is printed with its distribution-free 90% interval,
on the caller's thread and for the whole process. Then 1,000,000 decisions over 1,000 cases go
through the pipeline with the processor, and the growth of resident memory is read from /proc. Then the
memory of 100,000 decisions queued behind a busy worker (held by a watcher), traced by
tracemalloc; with `--before REF` also that of the processor at a git revision (e.g. main
before the bounded intake), in the same run. Then what `on_end` costs the caller at trial
index 0 and at the largest index accepted. Last, the wall time of the instrumented thread's
run-span end, when the publisher's exporter answers at once and when it blocks for a second
(the admission is published on the processor's worker).

    python benchmarks/processor.py [--decisions 20000] [--rounds 31] [--memory-decisions 1000000]
        [--queued 100000] [--before REF]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from median_interval import median_interval
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from verdictgate import (
    Contract,
    EvidenceProcessor,
    Policy,
    Publisher,
    Suite,
    decision_point,
    evaluation_run,
    trial,
)
from verdictgate.otel import conventions as names
from verdictgate.otel.processor import MAX_QUEUE_SIZE

ROUTES = ["card_security", "cash_withdrawal", "duplicate_charge", "merchant_dispute"]


class DiscardingExporter(SpanExporter):
    """An exporter that accepts and drops every batch."""

    def export(self, spans):
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def pipeline(with_processor: bool) -> tuple[TracerProvider, EvidenceProcessor | None]:
    provider = TracerProvider()
    processor = EvidenceProcessor() if with_processor else None
    if processor is not None:
        provider.add_span_processor(processor)
    provider.add_span_processor(BatchSpanProcessor(DiscardingExporter(), max_queue_size=8192))
    return provider, processor


def decide(provider: TracerProvider, decisions: int, cases: int, run: str) -> tuple[float, float]:
    """Make `decisions` decorated calls, then flush; return CPU seconds per decision of the
    calling thread, and of the whole process (every worker thread included).

    Thread CPU time is what the instrumented code pays; process CPU time adds what the
    exporter's and the processor's workers spend. Both leave out other processes on the
    machine, which make wall time noisy here.
    """
    start, start_process = time.thread_time(), time.process_time()
    make_decisions(provider, decisions, cases, run)
    caller = (time.thread_time() - start) / decisions
    provider.force_flush()
    return caller, (time.process_time() - start_process) / decisions


def make_decisions(provider: TracerProvider, decisions: int, cases: int, run: str) -> None:
    """`decisions` decorated calls over `cases` cases, each in its trial scope (a new case id
    string per call, as an instrumented loop makes)."""

    @decision_point("payment_router", tracer_provider=provider)
    def router(message: str) -> str:
        return ROUTES[len(message) % len(ROUTES)]

    messages = [f"case number {n}" for n in range(cases)]
    for n in range(decisions):
        case = n % cases
        with trial(run=run, index=n // cases, case=f"case-{case}"):
            router(messages[case])


def queued_memory(make: Callable[[], EvidenceProcessor], decisions: int) -> tuple[float, int]:
    """MiB traced by tracemalloc after `decisions` decisions over 1,000 cases were queued
    behind the worker of the processor `make` builds, held busy by a watcher (the ended spans
    go nowhere else); then the worker is let go, and the trials it received are returned."""
    provider = TracerProvider()
    processor = make()
    provider.add_span_processor(processor)
    entered, release = threading.Event(), threading.Event()

    def hold(_: object) -> None:
        entered.set()
        release.wait()

    make_decisions(provider, 1_000, 1_000, "warm-up")  # what the first calls allocate once
    processor.watch("hold", hold)
    processor.force_flush()
    make_decisions(provider, 1, 1, "hold")
    entered.wait()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    make_decisions(provider, decisions, 1_000, "queued")
    gc.collect()
    queued = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    release.set()
    provider.shutdown()
    assessment = processor.assessment("queued")
    return queued / 2**20, assessment.trials.received if assessment is not None else 0


def processor_at(revision: str) -> type[EvidenceProcessor]:
    """The EvidenceProcessor class of `src/verdictgate/otel/processor.py` at a git revision,
    loaded beside today's modules of its package."""
    source = subprocess.run(
        ["git", "show", f"{revision}:src/verdictgate/otel/processor.py"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name = "verdictgate.otel.processor_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "verdictgate.otel"
    sys.modules[name] = module
    exec(compile(source, f"{revision}:processor.py", "exec"), module.__dict__)
    return module.EvidenceProcessor


def decide_without_sdk(decisions: int) -> float:
    """Seconds per decorated call when no SDK is configured (the global no-op provider)."""

    @decision_point("payment_router")
    def router(message: str) -> str:
        return ROUTES[len(message) % len(ROUTES)]

    start = time.thread_time()
    for n in range(decisions):
        with trial(run="bare", index=n, case="c"):
            router("message")
    return (time.thread_time() - start) / decisions


class SlowExporter(SpanExporter):
    """An exporter whose every export takes `seconds` (a collector that is slow to answer)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def export(self, spans):
        time.sleep(self.seconds)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def run_span_end(export_seconds: float, repeats: int) -> tuple[float, float]:
    """Median wall seconds of a run span's end on the instrumented thread, and of the wait
    for its admission to be published (`force_flush`), with a publisher whose exporter takes
    `export_seconds`."""
    publishing = TracerProvider()
    publishing.add_span_processor(SimpleSpanProcessor(SlowExporter(export_seconds)))
    provider = TracerProvider()
    processor = EvidenceProcessor(Publisher(tracer_provider=publishing))
    provider.add_span_processor(processor)
    suite = Suite("bench", "payment_router", (), Contract(set(ROUTES)))

    @decision_point("payment_router", tracer_provider=provider)
    def router(message: str) -> str:
        return ROUTES[len(message) % len(ROUTES)]

    ends, published = [], []
    for number in range(repeats):
        run = evaluation_run(
            run_id=f"end-{number}", suite=suite, policy=Policy(), planned_trials=8,
            tracer_provider=provider,
        )  # fmt: skip
        with run:
            for index in range(8):
                with trial(run=f"end-{number}", index=index // 4, case=f"c{index % 4}"):
                    router(f"message {index % 4}")
            start = time.perf_counter()
        ended = time.perf_counter()
        processor.force_flush()
        ends.append(ended - start)
        published.append(time.perf_counter() - start)
    provider.shutdown()
    return statistics.median(ends), statistics.median(published)


def decision_attributes(case: str, index: int) -> dict[str, object]:
    return {
        names.RUN_ID: "sparse", names.CASE_ID: case, names.TRIAL: index,
        names.OUTCOME: "decision", names.VERDICT: "approve",
    }  # fmt: skip


def on_end_cost(index: int, spans: int, rounds: int) -> float:
    """Median CPU seconds of the caller's thread per `on_end` of an ended decision span at
    trial `index` (each span of a new case, so none is a repeat), the worker drained between
    rounds."""
    processor = EvidenceProcessor()
    per_call = []
    for round_number in range(rounds):
        ended = [
            ReadableSpan(
                name="decide payment_router",
                attributes=decision_attributes(f"c{round_number}-{n}", index),
                start_time=1_000,
                end_time=2_000,
            )
            for n in range(spans)
        ]
        start = time.thread_time()
        for span in ended:
            processor.on_end(span)
        per_call.append((time.thread_time() - start) / spans)
        processor.force_flush()
    processor.shutdown()
    return statistics.median(per_call)


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--memory-decisions", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=MAX_QUEUE_SIZE)
    parser.add_argument("--before", metavar="REF", help="also measure the processor at REF")
    args = parser.parse_args()

    timings: dict[bool, list[float]] = {False: [], True: []}
    process: dict[bool, list[float]] = {False: [], True: []}
    for round_number in range(args.rounds):  # short blocks in ABBA order: drift hits both
        for with_processor in (False, True) if round_number % 2 == 0 else (True, False):
            provider, _ = pipeline(with_processor)
            decide(provider, 2_000, 100, "warm-up")
            gc.collect()
            caller, whole = decide(provider, args.decisions, 1_000, f"r{round_number}")
            timings[with_processor].append(caller)
            process[with_processor].append(whole)
            provider.shutdown()
    ratios = [b / a for a, b in zip(timings[False], timings[True], strict=True)]
    process_ratios = [b / a for a, b in zip(process[False], process[True], strict=True)]
    print(
        f"{args.rounds} paired blocks of {args.decisions:,} decisions, CPU time per decision"
        " (medians; 90% interval for the median ratio, distribution-free)"
    )
    for label, spent, paired in (
        ("on the caller's thread", timings, ratios),
        ("whole process, workers included", process, process_ratios),
    ):
        low, high = median_interval(paired)
        print(
            f"  {label + ':':34}{statistics.median(spent[False]) * 1e6:7.2f} us alone -> "
            f"{statistics.median(spent[True]) * 1e6:7.2f} us with the processor: "
            f"{(statistics.median(paired) - 1) * 100:+.1f}% ({(low - 1) * 100:+.1f}% to "
            f"{(high - 1) * 100:+.1f}%)"
        )
    print("  issue 38 asks: at most +10% on the caller's thread")
    bare = decide_without_sdk(args.decisions)
    print(f"  no SDK configured (API only):      {bare * 1e6:7.2f} us per decorated call")

    provider, processor = pipeline(True)
    decide(provider, 10_000, 1_000, "warm-up")
    gc.collect()
    before = rss_mib()
    decide(provider, args.memory_decisions, 1_000, "memory")
    gc.collect()
    after = rss_mib()
    provider.shutdown()
    assessment = processor.assessment("memory")
    print(
        f"{args.memory_decisions:,} decisions over 1,000 cases: RSS {before:.0f} -> {after:.0f} MiB, "
        f"+{after - before:.1f} MiB (target < 50 MiB); assessed {assessment.trials.received:,} trials"
    )

    size = max(args.queued, MAX_QUEUE_SIZE)  # the worker is held: no caller may wait for room
    queued, received = queued_memory(lambda: EvidenceProcessor(max_queue_size=size), args.queued)
    print(f"{args.queued:,} decisions queued behind a busy worker (tracemalloc)")
    print(f"  now:        {queued:7.1f} MiB (target <= 30 MiB); received {received:,} trials")
    if args.before:
        old, received = queued_memory(processor_at(args.before), args.queued)
        print(f"  at {args.before}: {old:7.1f} MiB; received {received:,} trials")

    low = on_end_cost(0, 20_000, 5)
    high = on_end_cost((1 << 20) - 1, 20_000, 5)
    print("on_end on the instrumented thread (median of 5 rounds of 20,000 new cases)")
    print(f"  trial index 0:          {low * 1e6:7.2f} us")
    print(f"  trial index 2**20 - 1:  {high * 1e6:7.2f} us")
    print(f"  ratio: {high / low:.2f} (target <= 3)")

    fast_end, fast_published = run_span_end(0.0, 5)
    slow_end, slow_published = run_span_end(1.0, 5)
    print("run span end on the instrumented thread (median of 5 runs), admission published after")
    print(f"  exporter answers at once:  {fast_end * 1e3:8.3f} ms   {fast_published * 1e3:8.1f} ms")
    print(f"  exporter blocks for 1 s:   {slow_end * 1e3:8.3f} ms   {slow_published * 1e3:8.1f} ms")
    print(f"  ratio of run span ends, blocked / at once: {slow_end / fast_end:.2f}")


if __name__ == "__main__":
    main()
