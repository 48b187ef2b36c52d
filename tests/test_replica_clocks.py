"""`verdictgate serve` replicas whose wall clocks are minutes apart (libfaketime on each process,
its wall clock only) count what arrived, as replicas in step do: a declared run and a canary
sprayed across them by the official OTLP exporter are admitted with every trial and none late.
Each replica reads leases, last news and idle deadlines on the database's clock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from components import free_port, unavailable
from postgres_support import StoreMaker
from receiver_support import sdk_run_spans, start_serve
from verdictgate.receiver.store import Store

SKEWS = ("+300s", "-300s", "+0s")
"""Each replica's wall clock against the machine's."""


def faketime(skew: str) -> dict[str, str]:
    """The environment that runs a process with its wall clock `skew` off (libfaketime, its
    monotonic clock as it is)."""
    library = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
    if not library.exists():
        unavailable("libfaketime is not installed (the Debian package faketime: see .ci/run)")
    return {"LD_PRELOAD": str(library), "FAKETIME": skew, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_replicas_minutes_apart_count_every_trial_of_a_run_and_a_canary(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    server = request.getfixturevalue("postgres_server") if kind == "postgresql" else None
    location = StoreMaker(kind, tmp_path, server).location("replicas")
    skews = SKEWS if kind == "postgresql" else SKEWS[:1]  # one process owns a SQLite file
    declared = sdk_run_spans("declared", cases=4, trials=5)  # 20 trials and its run span
    canary = sdk_run_spans(None, cases=4, trials=4)  # 16 trials, final when idle
    ports = [free_port() for _ in skews]
    options = ("--idle", "3s", "--lease", "3s", "--settle", "1s")
    replicas = [
        start_serve(location, port, *options, env=faketime(skew))
        for port, skew in zip(ports, skews, strict=True)
    ]
    exporters = [
        OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=5) for port in ports
    ]
    try:
        batches = [canary[n : n + 2] for n in range(0, len(canary), 2)]
        batches += [declared[n : n + 3] for n in range(0, len(declared), 3)]
        for number, batch in enumerate(batches):  # round robin, a tick or so apart
            assert exporters[number % len(exporters)].export(batch) is SpanExportResult.SUCCESS
            time.sleep(0.4)
        store = Store(location)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = {run_id: store.run(run_id) for run_id in ("declared", "canary")}
            if all(run is not None and run.status is not None for run in runs.values()):
                break
            time.sleep(0.2)
        store.close()
    finally:
        for exporter in exporters:
            exporter.shutdown()
        for replica in replicas:
            replica.terminate()
            replica.wait(10)
    logs = "".join(replica.stderr.read() for replica in replicas if replica.stderr)
    declared_run, canary_run = runs["declared"], runs["canary"]
    assert declared_run is not None and canary_run is not None, logs
    assert (declared_run.received, declared_run.late) == (20, 0), logs
    assert declared_run.status == "inconclusive"  # 5 trials a case: too few pairs to qualify
    assert (canary_run.received, canary_run.late) == (16, 0), logs
    if kind == "postgresql":
        assert "wall clock is 300.0 s ahead of the database's" in logs
        assert "wall clock is 300.0 s behind the database's" in logs
