"""Replicas starting on a live PostgreSQL store: a store whose recorded schema version is
current is opened without DDL or a lock, so that starts beside replicas under write load never
deadlock, fail or wait for a writer; a store made by an earlier release (no version recorded)
is brought up to date, its missing indexes built concurrently, an invalid one rebuilt, and
serve's start-up line says what locked."""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from components import free_port
from pgbouncer_support import pgbouncer
from postgres_support import StoreMaker, cluster
from receiver_support import decision_span, request, start_serve, strands_trial
from verdictgate import Trial
from verdictgate.clock import ManualClock
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.store import Batch, Store, schema
from verdictgate.receiver.store.schema import SCHEMA_VERSION

STARTS = 10


def write_load(location: str, name: str, stop: threading.Event, errors: list[Exception]) -> None:
    """A replica writing until `stop`: each request a framework trial (its trace held, then
    settled by a tick) and decision trials, across a few runs."""
    store = Store(location)
    clock = ManualClock(1_000_000.0)
    receiver = Receiver(store, None, ReceiverConfig(replica=name, lease=10.0), clock=clock)
    number = 0
    try:
        while not stop.is_set():
            number += 1
            run = f"{name}-{number % 3}"
            spans = strands_trial(number + (10**6 if name == "b" else 0), run, "f", number, ["x"])
            spans += [decision_span(run, f"c{case}", number, "approve") for case in range(4)]
            try:
                receiver.ingest(extract_protobuf(request(spans).SerializeToString()))
                if number % 5 == 0:
                    clock.advance(2.0)
                    receiver.tick()
            except Exception as error:
                errors.append(error)
    finally:
        store.close()


def deadlocks(admin: psycopg.Connection, database: str) -> int:
    (count,) = admin.execute(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = %s", (database,)
    ).fetchone() or (0,)
    return int(count)


def test_ten_starts_beside_two_replicas_under_write_load_never_deadlock_or_fail(
    tmp_path: Path,
) -> None:
    with cluster() as server:
        location = StoreMaker("postgresql", tmp_path, server.url).location("live")
        database = location.rpartition("/")[2]
        Store(location).close()  # made by the first replica
        admin = psycopg.connect(server.url, autocommit=True)
        before = deadlocks(admin, database)
        stop, errors = threading.Event(), []
        writers = [
            threading.Thread(target=write_load, args=(location, name, stop, errors))
            for name in ("a", "b")
        ]
        for writer in writers:
            writer.start()
        failed = []
        try:
            time.sleep(1.0)  # the writers under way
            for _ in range(STARTS):
                try:
                    Store(location).close()
                except Exception as error:
                    failed.append(error)
                time.sleep(0.3)
        finally:
            stop.set()
            for writer in writers:
                writer.join(60)
        deadline = time.monotonic() + 30  # the sessions ended: their statistics are reported
        while time.monotonic() < deadline and admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchone() != (0,):
            time.sleep(0.1)
        admin.execute("SELECT pg_stat_clear_snapshot()")
        after = deadlocks(admin, database)
        admin.close()
        with psycopg.connect(location) as connection:  # the load was real
            (written,) = connection.execute("SELECT count(*) FROM trials").fetchone() or (0,)
        log = server.log()
    assert failed == [] and errors == []
    assert after == before
    assert "deadlock detected" not in log
    assert written > 100


def test_opening_a_current_store_waits_for_no_writer(postgres_server: str, tmp_path: Path) -> None:
    """A transaction holds a run's row and has inserted a trial (row locks, and its tables'
    ROW EXCLUSIVE locks) while a replica starts: the start neither waits for it nor blocks it."""
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("busy")
    first = Store(location)
    first.write(Batch([Trial("c", 0, "approve", "r", "approve")]))
    first.close()
    opened: list[Store] = []
    with psycopg.connect(location) as writer:  # a transaction, open until the block ends
        writer.execute("UPDATE runs SET last_seen = last_seen + 1 WHERE run_id = 'r'")
        writer.execute(
            "INSERT INTO trials (run_id, case_id, trial, decision, batch) VALUES ('r', 'c', 1, 'l:approve', 2)"
        )
        starting = threading.Thread(target=lambda: opened.append(Store(location)))
        starting.start()
        starting.join(60)
        assert opened, "the start waited for the writer"
        assert writer.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    assert opened[0].migrated == ()
    assert [t.index for t in opened[0].evidence("r").trials()] == [0, 1]
    opened[0].close()


OLD_STORE = """
CREATE TABLE runs (run_id TEXT PRIMARY KEY, suite TEXT, point TEXT, declaration TEXT,
    planned_trials BIGINT, declared_at DOUBLE PRECISION, first_seen DOUBLE PRECISION NOT NULL,
    last_seen DOUBLE PRECISION NOT NULL, status TEXT, final BIGINT NOT NULL DEFAULT 0,
    received BIGINT NOT NULL DEFAULT 0);
CREATE TABLE trials (run_id TEXT NOT NULL, case_id TEXT NOT NULL, trial BIGINT NOT NULL,
    decision TEXT, expected TEXT, error_type TEXT, duplicates BIGINT NOT NULL DEFAULT 0,
    conflict BIGINT NOT NULL DEFAULT 0, batch BIGINT NOT NULL,
    PRIMARY KEY (run_id, case_id, trial));
CREATE INDEX runs_open ON runs (first_seen) WHERE final = 0;
INSERT INTO runs (run_id, first_seen, last_seen, status, final, received)
    VALUES ('old', 1000, 1010, 'qualified', 1, 1);
INSERT INTO trials (run_id, case_id, trial, decision, batch) VALUES ('old', 'c', 0, 'l:approve', 1);
"""
"""A store as a release before the version table, the lease columns and most indexes made it;
its one index left invalid, as a concurrent build that was interrupted leaves it."""


def old_store(postgres_server: str, tmp_path: Path) -> str:
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("old")
    with psycopg.connect(location, autocommit=True) as connection:
        connection.execute(OLD_STORE)
        connection.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'runs_open'::regclass"
        )
    return location


@pytest.fixture(params=["direct", "transaction"])
def reach(request: pytest.FixtureRequest, postgres_server: str) -> Iterator[Callable[[str], str]]:
    """How a replica reaches a database: its URL as it is, or through PgBouncer in transaction
    mode."""
    if request.param == "direct":
        yield lambda url: url
        return
    with pgbouncer(postgres_server, "transaction") as pooler:
        yield pooler.url


def test_a_store_of_an_earlier_release_is_brought_up_to_date_and_then_left_alone(
    postgres_server: str, tmp_path: Path, reach: Callable[[str], str]
) -> None:
    location = old_store(postgres_server, tmp_path)
    store = Store(reach(location))
    assert any(step.startswith("runs gained") and "lease_until" in step for step in store.migrated)
    built = next(step for step in store.migrated if step.startswith("indexes"))
    assert "runs_open" in built  # invalid: dropped and built again
    assert "trials_relayed" in built and "runs_owned" in built
    assert any("replicas" in step and "created" in step for step in store.migrated)
    assert [(run.run_id, at) for run, at in store.finished_since(0.0)] == [("old", 1010.0)]
    assert [t.index for t in store.evidence("old").trials()] == [0]
    store.close()
    with psycopg.connect(location) as connection:
        invalid = connection.execute(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relname LIKE 'runs%%' AND NOT i.indisvalid"
        ).fetchone()
        (version,) = connection.execute("SELECT MAX(version) FROM schema_version").fetchone() or (
            0,
        )
    assert invalid == (0,) and version == SCHEMA_VERSION
    again = Store(reach(location))
    assert again.migrated == ()
    again.close()


def test_serve_says_what_its_start_locked_in_a_store_of_an_earlier_release(
    postgres_server: str, tmp_path: Path
) -> None:
    location = old_store(postgres_server, tmp_path)
    serving = start_serve(location, free_port(), "--lease", "3s")
    serving.send_signal(signal.SIGTERM)
    _, log = serving.communicate(timeout=30)
    assert "adding columns locks runs, trials until the migration commits" in log
    started = next(line for line in log.splitlines() if "receiving OTLP" in line)
    assert "(migrated: " in started and "runs gained late" in started and "runs_open" in started
    assert "Traceback" not in log


SCHEMA_FINGERPRINTS = {1: "f7de861e", 2: "e21f471a", 3: "ddc073f1", 4: "eb927744"}
"""The schema each SCHEMA_VERSION names (a digest of its tables, added columns and indexes)."""


def test_a_changed_schema_raises_its_version() -> None:
    """A store that records the current version is opened without DDL: a change to the schema
    under the same version would never reach a store made before it."""
    text = repr((schema.TABLES, schema.ADDED_COLUMNS, schema.INDEXES, schema.SHARED_INDEXES))
    fingerprint = hashlib.sha256(text.encode()).hexdigest()[:8]
    assert SCHEMA_FINGERPRINTS.get(SCHEMA_VERSION) == fingerprint, (
        f"the schema changed: raise SCHEMA_VERSION and record {fingerprint!r} for it here"
    )
