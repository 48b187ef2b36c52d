"""`/healthz` answers within a second whatever the store does: 200 when the store answered a
round trip within the probe's deadline, 503 when it did not (a PostgreSQL server frozen, a
socket that accepts and answers nothing); never behind the store's connection, busy or hung."""

from __future__ import annotations

import sqlite3
import threading
import time
import urllib.error
import urllib.request
from contextlib import suppress

from postgres_support import cluster
from receiver_support import request, running_server, stable_run, wait_until
from verdictgate.clock import ManualClock
from verdictgate.otel.otlp_reading import ExportContents, extract_protobuf
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.store.probe import DEADLINE, FRESH, StoreProbe

OK = (200, b'{"status":"ok"}')
UNAVAILABLE = (503, b'{"status":"store unavailable"}')


class RoundTrips:
    """A store's round trips as a test drives them: counted; `hang` holds each until released,
    `slow` moves the clock on by that many seconds inside each."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.count = 0
        self.hang = threading.Event()
        self.released = threading.Event()
        self.slow = 0.0

    def __call__(self) -> None:
        self.count += 1
        if self.hang.is_set():
            self.released.wait(30)
        self.clock.advance(self.slow)


def test_a_flood_of_probes_costs_one_round_trip_a_second() -> None:
    clock = ManualClock(0.0)
    trips = RoundTrips(clock)
    probe = StoreProbe(trips, clock=clock)
    assert all(probe.answers() for _ in range(100))
    assert trips.count == 1
    clock.advance(FRESH)
    assert probe.answers() and trips.count == 2


def test_a_round_trip_that_hangs_is_no_answer_and_is_never_doubled() -> None:
    clock = ManualClock(0.0)
    trips = RoundTrips(clock)
    probe = StoreProbe(trips, clock=clock)
    trips.hang.set()
    assert not probe.answers()  # waited for it until the deadline
    clock.advance(FRESH * 10)
    assert not any(probe.answers() for _ in range(100))  # at once: it is still under way
    assert trips.count == 1
    trips.hang.clear()
    trips.released.set()

    def answers_later() -> bool:
        clock.advance(FRESH)
        return probe.answers()

    wait_until(answers_later)  # the hung one ends; the next answers
    assert trips.count == 2


def test_a_round_trip_slower_than_the_deadline_is_no_answer() -> None:
    clock = ManualClock(0.0)
    trips = RoundTrips(clock)
    probe = StoreProbe(trips, clock=clock)
    trips.slow = DEADLINE * 2
    assert not probe.answers()
    trips.slow = 0.0
    clock.advance(FRESH)
    assert probe.answers()


def health(port: int) -> tuple[int, bytes]:
    """GET /healthz; a timeout (5 s, far beyond the probe's deadline) fails the test."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_healthz_answers_503_while_postgresql_is_frozen() -> None:
    """The postmaster and every backend stopped (SIGSTOP), the store's own connection among
    them: every probe answers 503 in time, the first and the later ones, and 200 once the server
    is thawed."""
    with cluster() as server, running_server(server.url) as receiver:
        assert health(receiver.http_port) == OK
        with server.frozen():
            answers = [health(receiver.http_port) for _ in range(5)]
            wait_until(lambda: health(receiver.http_port) == UNAVAILABLE)  # past the fresh one
            later = [health(receiver.http_port) for _ in range(5)]
        wait_until(lambda: health(receiver.http_port) == OK)
    assert set(answers) <= {OK, UNAVAILABLE} and set(later) == {UNAVAILABLE}


def test_healthz_never_waits_behind_a_write(tmp_path) -> None:
    """The store's connection waits for another process's lock inside a write (up to 5 s): the
    probe reads the file on a connection of its own and answers 200 meanwhile, round trip after
    round trip."""
    location = tmp_path / "store.sqlite"
    with running_server(location) as receiver:
        other = sqlite3.connect(location, timeout=0, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        export = extract_protobuf(request(stable_run("busy", 2, 2)).SerializeToString())
        writing = threading.Thread(target=write_or_wait, args=(receiver.receiver, export))
        writing.start()
        try:
            answers = []
            until = time.monotonic() + 2.5 * FRESH  # a few of the probe's round trips
            while time.monotonic() < until:
                answers.append(health(receiver.http_port))
            assert writing.is_alive()  # the write waited all along
        finally:
            other.execute("COMMIT")
            other.close()
            writing.join()
    assert set(answers) == {OK}


def write_or_wait(receiver: Receiver, export: ExportContents) -> None:
    """Ingest an export, the store's refusal (its lock not had in time) being as good."""
    with suppress(sqlite3.OperationalError):
        receiver.ingest(export)
