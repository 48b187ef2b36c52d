"""A store outage is two log lines per replica process, whatever it refuses meanwhile: one when
it begins (what is refused, and when senders are told to retry), one when it ends (how long it
lasted, how many exports were refused); never a line per request or per tick."""

from __future__ import annotations

import logging
import sqlite3
import urllib.error
import urllib.request

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from postgres_support import StoreMaker, refused, store_away
from receiver_support import request, running_server, stable_run, wait_until
from verdictgate.clock import ManualClock
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.store import LOCAL
from verdictgate.receiver.store_outage import QUIET, StoreOutage

BEGINS = "the store is unavailable"
ENDS = "the store answers again"


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_an_outage_is_one_line_when_it_begins_and_one_when_it_ends(caplog) -> None:
    clock = ManualClock(100.0)
    outage = StoreOutage(5, clock=clock)
    locked = sqlite3.OperationalError("database is locked")
    with caplog.at_level(logging.WARNING, "verdictgate"):
        for _ in range(50):
            outage.failed(locked, export=True)
            clock.advance(0.2)
            outage.failed(locked, export=False)  # a tick
            clock.advance(0.2)
        assert outage.away and outage.refused == 50
        outage.worked()  # back 20 s after it began: a quiet period must pass first
        clock.advance(QUIET)
        outage.worked()
    (began,) = lines(caplog, BEGINS)
    assert "database is locked" in began and "retry in 5 s" in began
    (ended,) = lines(caplog, ENDS)
    assert "after 20.0 s" in ended and "50 exports were refused" in ended
    assert not outage.away and len(caplog.records) == 2


def test_a_store_failing_now_and_then_is_one_outage_not_a_line_pair_per_failure(caplog) -> None:
    clock = ManualClock(0.0)
    outage = StoreOutage(5, clock=clock)
    conflict = sqlite3.OperationalError("database is locked")
    with caplog.at_level(logging.WARNING, "verdictgate"):
        for _ in range(20):  # one export in three refused, the others taken
            outage.failed(conflict, export=True)
            for _ in range(2):
                clock.advance(QUIET / 4)
                outage.worked()
        clock.advance(QUIET)
        outage.worked()
    assert len(lines(caplog, BEGINS)) == len(lines(caplog, ENDS)) == 1
    assert "20 exports were refused" in lines(caplog, ENDS)[0]


def export(receiver: Receiver, spans: list) -> None:
    receiver.ingest(extract_protobuf(request(spans).SerializeToString()))


def test_a_store_away_for_many_exports_and_ticks_is_logged_once(
    new_store: StoreMaker, caplog
) -> None:
    """The receiver's own count, on its clock: PostgreSQL closed to connections refuses at
    once, a locked SQLite file after 5 s for its lock (so fewer of them)."""
    exports, ticks = (40, 20) if new_store.kind == "postgresql" else (2, 1)
    clock = ManualClock(1_000.0)
    receiver = Receiver(new_store("store"), None, ReceiverConfig(replica=LOCAL), clock=clock)
    spans = stable_run("canary", cases=2, trials=exports + 1)
    export(receiver, spans[:2])
    with caplog.at_level(logging.WARNING, "verdictgate"):
        with store_away(new_store, "store"):
            for n in range(exports):
                assert refused(lambda n=n: export(receiver, spans[2 + 2 * n : 4 + 2 * n]))
                clock.advance(0.5)
            for _ in range(ticks):
                assert refused(receiver.tick)
                clock.advance(0.5)
        receiver.tick()  # it answers again
        clock.advance(QUIET)
        export(receiver, spans[2:4])  # a sender's retry
    assert len(lines(caplog, BEGINS)) == 1
    (ended,) = lines(caplog, ENDS)
    lasted = 0.5 * (exports + ticks)
    assert f"after {lasted:.1f} s" in ended and f"{exports} exports were refused" in ended
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_refused_requests_on_both_transports_log_no_line_each(
    postgres_server: str, tmp_path, caplog
) -> None:
    """Exports over gRPC and HTTP and queries refused while PostgreSQL is closed to
    connections: the two lines of the outage, no line per request."""
    maker = StoreMaker("postgresql", tmp_path, postgres_server)
    message = request(stable_run("wire", cases=2, trials=2))
    body = message.SerializeToString()
    with (
        caplog.at_level(logging.WARNING, "verdictgate"),
        running_server(maker.location("wire")) as server,
    ):
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = TraceServiceStub(channel)
        http = f"http://127.0.0.1:{server.http_port}"
        with store_away(maker, "wire"):
            for _ in range(10):
                with pytest.raises(grpc.RpcError) as failed:
                    stub.Export(message, timeout=10)
                assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
                assert post(f"{http}/v1/traces", body) == 503
                assert get(f"{http}/v1/runs/wire") == 503
        refusals = 20
        while post(f"{http}/v1/traces", body) == 503:  # until it answers again
            refusals += 1
            assert refusals < 1000
        wait_until(lambda: lines(caplog, ENDS))
        channel.close()
    assert len(lines(caplog, BEGINS)) == 1
    assert f"{refusals} exports were refused" in lines(caplog, ENDS)[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def post(url: str, body: bytes) -> int:
    headers = {"Content-Type": "application/x-protobuf"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as refusal:
        return refusal.code


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as refusal:
        return refusal.code
