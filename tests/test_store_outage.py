"""`verdictgate serve` whose store goes away for longer than exporters' retries take: PostgreSQL
stopped as a crash stops it (`pg_ctl stop -m immediate`) under the official OTLP exporter
streaming a 2,000-trial run, and either store away for longer than the idle period while
senders retry every second. Every trial is counted, none late: exports could not
arrive while the store was away, so the idle period starts again when it answers."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from components import free_port
from postgres_support import cluster
from receiver_support import sdk_run_spans, start_serve
from verdictgate.receiver.store import Store, StoredRun


def final_runs(location: str, runs: list[str], within: float) -> dict[str, StoredRun | None]:
    """The runs as the store holds them once all are admitted (or `within` seconds passed)."""
    deadline = time.monotonic() + within
    while True:
        store = Store(location)
        try:
            found = {run: store.run(run) for run in runs}
        finally:
            store.close()
        if time.monotonic() > deadline or all(
            run is not None and run.status is not None for run in found.values()
        ):
            return found
        time.sleep(0.5)


def test_a_store_stopped_as_a_crash_for_20_s_loses_none_of_2000_streamed_trials() -> None:
    with cluster() as server:
        port = free_port()
        replica = start_serve(server.url, port, "--idle", "30s")
        spans = sdk_run_spans("streamed", cases=100, trials=20)  # 2,000 trials, run span last
        batches = [spans[n : n + 50] for n in range(0, len(spans), 50)]
        exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=90)
        results: list[SpanExportResult] = []
        streaming = threading.Thread(
            target=lambda: results.extend(exporter.export(batch) for batch in batches)
        )
        try:
            streaming.start()
            while len(results) < 10:
                time.sleep(0.01)
            server.stop("immediate")  # mid-stream: every session cut, nothing flushed
            time.sleep(20.0)
            server.start()
            streaming.join(120)
            run = final_runs(server.url, ["streamed"], within=90)["streamed"]
        finally:
            exporter.shutdown()
            replica.terminate()
            replica.wait(10)
    assert results == [SpanExportResult.SUCCESS] * len(batches)
    assert run is not None and run.status is not None
    assert (run.received, run.late, run.planned_trials) == (2000, 0, 2000)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_store_away_for_longer_than_the_idle_period_loses_no_retried_trial(
    kind: str, tmp_path: Path
) -> None:
    """Three canaries, half their trials sent; the store goes away for 8 s with --idle 6s
    (PostgreSQL stopped as a crash stops it, or another process holding the SQLite file's write
    lock) while the rest are sent again every second until taken."""
    with ExitStack() as stack:
        if kind == "postgresql":
            server = stack.enter_context(cluster())
            location = server.url
        else:
            location = str(tmp_path / "store.sqlite")
        port = free_port()
        replica = start_serve(location, port, "--idle", "6s")
        canaries = [f"canary-{n}" for n in range(3)]
        spans = {run: sdk_run_spans(None, cases=4, trials=10, run_id=run) for run in canaries}
        exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=2)
        try:
            for run in canaries:
                assert exporter.export(spans[run][:20]) is SpanExportResult.SUCCESS
            if kind == "postgresql":
                server.stop("immediate")
            else:
                lock = sqlite3.connect(location, timeout=10, isolation_level=None)
                lock.execute("BEGIN EXCLUSIVE")
            away_since = time.monotonic()
            pending = [spans[run][20:] for run in canaries]
            while pending:  # a sender retrying every second
                pending = [s for s in pending if exporter.export(s) is not SpanExportResult.SUCCESS]
                if time.monotonic() - away_since >= 8.0:
                    if kind == "postgresql":
                        server.start()
                    else:
                        lock.execute("COMMIT")
                        lock.close()
                    away_since = float("inf")
                if pending:
                    time.sleep(1.0)
            found = final_runs(location, canaries, within=90)
        finally:
            exporter.shutdown()
            replica.terminate()
            replica.wait(10)
    for run in canaries:
        stored = found[run]
        assert stored is not None and stored.status is not None
        assert (stored.received, stored.late) == (40, 0), run
