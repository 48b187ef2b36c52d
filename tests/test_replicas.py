"""`verdictgate serve` replicas on one real PostgreSQL (two connected to it directly, or three
through PgBouncer in session or transaction mode), behind a round-robin balancer: the official
OTLP exporter sprays one run's trials and framework traces across them, the replica that owns
the run is SIGKILLed mid-run, and a survivor takes the run over and finishes it. Every
acknowledged trial is counted once, one admission is published, and `status --wait` on a
survivor answers with it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from components import free_port
from otel_support import OtlpCollector, attributes
from pgbouncer_support import MODES, pgbouncer
from postgres_support import StoreMaker
from receiver_support import start_serve
from verdictgate import Contract, Policy, Suite, decision, evaluation_run, trial
from verdictgate.otel import conventions as names
from verdictgate.receiver.store import Store

RUN = "replicated-1"
SUITE = Suite("support", "support_gate", (), Contract({"approve", "deny", "refund,notify"}))
DECISION_CASES, FRAMEWORK_CASES, TRIALS = 3, 2, 8
TOOLS = ("refund", "notify")


def run_spans() -> list[ReadableSpan]:
    """The spans of one run through the SDK: decision trials of three cases, and two cases whose
    trials are decided by their framework spans (the tools called below a harness's trial)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agent")
    planned = (DECISION_CASES + FRAMEWORK_CASES) * TRIALS
    with evaluation_run(
        run_id=RUN, suite=SUITE, policy=Policy(), planned_trials=planned, tracer_provider=provider
    ):
        for index in range(TRIALS):
            for case in range(DECISION_CASES):
                route = ("approve", "deny")[case % 2]
                with (
                    trial(run=RUN, case=f"d{case}", index=index, expected=route, suite=SUITE.name),
                    decision(SUITE.point, tracer_provider=provider) as recorder,
                ):
                    recorder.record(route)
            for case in range(FRAMEWORK_CASES):
                with (
                    trial(
                        run=RUN,
                        case=f"f{case}",
                        index=index,
                        suite=SUITE.name,
                        decision="tools",
                        tracer_provider=provider,
                    ),
                    tracer.start_as_current_span("invoke_agent support"),
                ):
                    for tool in TOOLS:
                        with tracer.start_as_current_span(
                            f"execute_tool {tool}",
                            attributes={
                                "gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": tool,
                            },
                        ):
                            pass
    return list(memory.get_finished_spans())


def identity(span: ReadableSpan) -> tuple[str, int] | None:
    """The (case, trial) a decision span or harness trial span is of; None for others."""
    found = dict(span.attributes or {})
    if names.CASE_ID in found and names.TRIAL in found:
        return str(found[names.CASE_ID]), int(found[names.TRIAL])  # type: ignore[call-overload]
    return None


def below(spans: list[ReadableSpan], case: str, index: int) -> list[ReadableSpan]:
    """A trial's harness span and every span below it."""
    found = [s for s in spans if identity(s) == (case, index) and s.name == names.TRIAL_SPAN]
    ids = {s.context.span_id for s in found}
    grew = True
    while grew:
        children = [s for s in spans if s.parent and s.parent.span_id in ids and s not in found]
        found += children
        ids |= {s.context.span_id for s in children}
        grew = bool(children)
    return found


def owner_pid(url: str) -> int:
    """The process id in the name of the replica that owns the run."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with psycopg.connect(url) as connection:
            row = connection.execute("SELECT owner FROM runs WHERE run_id = %s", (RUN,)).fetchone()
        if row is not None and row[0]:
            return int(row[0].rsplit("-", 2)[1])
        time.sleep(0.1)
    raise AssertionError("no replica claimed the run")


@pytest.fixture(params=["direct", *MODES])
def replicated(
    request: pytest.FixtureRequest, postgres_server: str, tmp_path: Path
) -> Iterator[tuple[str, int]]:
    """A store's URL and how many replicas share it: two connected directly, or three through
    PgBouncer pooling in that mode."""
    url = StoreMaker("postgresql", tmp_path, postgres_server).location("replicas")
    if request.param == "direct":
        yield url, 2
        return
    with pgbouncer(postgres_server, request.param) as pooler:
        yield pooler.url(url), 3


def test_a_replica_killed_mid_run_loses_nothing_and_a_survivor_admits_it(
    replicated: tuple[str, int],
) -> None:
    url, count = replicated
    spans = run_spans()
    batches = [spans[n : n + 7] for n in range(0, len(spans), 7)]
    publish = free_port()
    ports = [free_port() for _ in range(count)]
    options = ("--idle", "4s", "--settle", "1s", "--lease", "3s")
    with OtlpCollector(publish) as collector:
        target = ("--publish-endpoint", f"http://127.0.0.1:{publish}")
        replicas = [start_serve(url, port, *options, *target) for port in ports]
        exporters = [
            OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=3)
            for port in ports
        ]
        acknowledged: list[ReadableSpan] = []
        try:
            killed = None
            taken = [0] * count  # batches each replica acknowledged
            for number, batch in enumerate(batches):
                if number == len(batches) // 2:  # mid-run: the owner dies
                    pid = owner_pid(url)
                    killed = next(i for i, p in enumerate(replicas) if p.pid == pid)
                    replicas[killed].kill()
                    replicas[killed].wait(10)
                    killed_at = time.monotonic()
                # round robin; a batch its replica did not take goes to the next, as a
                # balancer's retry does
                for choice in [(number + step) % count for step in range(count)]:
                    if choice == killed:
                        continue
                    if exporters[choice].export(batch) is SpanExportResult.SUCCESS:
                        acknowledged.extend(batch)
                        taken[choice] += 1
                        break
            assert killed is not None
            survivors = [index for index in range(count) if index != killed]
            survivor = ports[survivors[0]]
            status = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "verdictgate",
                    "status",
                    "--endpoint",
                    f"127.0.0.1:{survivor}",
                    "--run",
                    RUN,
                    "--wait",
                    "90",
                    "--format",
                    "json",
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            answered_after = time.monotonic() - killed_at
            deadline = time.monotonic() + 30
            admissions: list = []
            while time.monotonic() < deadline and not admissions:
                admissions = [s for s in collector.spans() if s.name == names.ADMISSION_SPAN]
                time.sleep(0.2)
            time.sleep(2)  # a second admission, were there one, would have come by now
            admissions = [s for s in collector.spans() if s.name == names.ADMISSION_SPAN]
            traces = list(collector.traces)
        finally:
            for exporter in exporters:
                exporter.shutdown()
            for replica in replicas:
                replica.kill()
                replica.wait(10)
            logs = [replica.stderr.read()[-2000:] if replica.stderr else "" for replica in replicas]

    assert status.stdout, f"status exited {status.returncode}: {status.stderr}; logs: {logs}"
    report = json.loads(status.stdout)
    store = Store(url)
    evidence = store.evidence(RUN)
    stored = {(t.case, t.index): t.decision for t in evidence.trials()}
    run = store.run(RUN)
    store.close()
    sent = {identity(span) for span in spans} - {None}
    acked = {identity(span) for span in acknowledged if identity(span)} - {None}
    decided = {key for key in acked if key[0].startswith("d")}
    assert decided <= stored.keys() <= sent  # every acknowledged decision trial is kept
    acked_ids = {span.context.span_id for span in acknowledged}
    for (case, index), route in stored.items():  # a trial decided once, from all its spans
        if case.startswith("d"):
            assert route == ("approve", "deny")[int(case[1:]) % 2]
            continue
        if all(s.context.span_id in acked_ids for s in below(spans, case, index)):
            assert route == TOOLS
    assert all(taken)  # every replica took part of the run
    assert run is not None and run.final and run.received == len(stored)
    assert run.owner is not None
    assert int(run.owner.rsplit("-", 2)[1]) in {replicas[index].pid for index in survivors}
    print(
        f"the survivor answered {answered_after:.1f} s after the kill; {len(acked)} of "
        f"{len(sent)} trials acknowledged, {len(stored)} stored"
    )
    assert len(admissions) == 1
    instances = {  # the SDK's resource names each process: its cumulative counter its own
        attributes(r.resource.attributes).get("service.instance.id")
        for request in traces
        for r in request.resource_spans
    }
    assert len(instances) == 1 and None not in instances
    published = attributes(admissions[0].attributes)
    assert published[names.RUN_ID] == RUN
    assert report["status"] == published[names.STATUS]
    assert report["trials"]["received"] == len(stored)
    assert status.returncode in (0, 1, 2), status.stderr
