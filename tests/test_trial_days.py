"""A PostgreSQL store's trials partitioned by the day their run was first seen (a real server):
retention drops a whole day once every run first seen in it was admitted before the cutoff,
and a run still open keeps its day; trials written across midnight land in their run's day and
are read back, the next day's partition made before a write needs it; a version-2 store is
partitioned in place, every trial kept, while a version-2 writer goes on writing."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from postgres_support import StoreMaker
from receiver_support import decision_span, request, run_span, stable_run
from verdictgate.clock import ManualClock
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.store import Batch, Store
from verdictgate.receiver.store.schema import SCHEMA_VERSION
from verdictgate.receiver.store.trial_days import SECONDS_A_DAY, day_of
from verdictgate.trial_model import Trial

HOUR = 3600.0


@pytest.fixture
def location(postgres_server: str, tmp_path: Path) -> str:
    """A fresh PostgreSQL database's URL."""
    return StoreMaker("postgresql", tmp_path, postgres_server).location("days")


def partitions(location: str) -> dict[str, int]:
    """The partitions of `trials`, each with the trials it holds."""
    with psycopg.connect(location) as connection:
        names = [
            name
            for (name,) in connection.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'trials'::regclass"
            ).fetchall()
        ]
        return {
            name: connection.execute(f"SELECT count(*) FROM {name}").fetchone()[0]  # type: ignore[index]
            for name in names
        }


def send(receiver: Receiver, spans: list) -> None:
    receiver.ingest(extract_protobuf(request(spans).SerializeToString()))


def test_retention_drops_a_day_whose_runs_all_finished_and_keeps_one_with_an_open_run(
    location: str,
) -> None:
    store = Store(location)
    first = day_of(store.now()) + 1
    clock = ManualClock(first * SECONDS_A_DAY + HOUR)
    config = ReceiverConfig(idle=5 * SECONDS_A_DAY, retain=SECONDS_A_DAY)
    receiver = Receiver(store, None, config, clock=clock)
    send(
        receiver, [run_span("a-done", 8), *stable_run("a-done", 2, 4), *stable_run("a-open", 2, 2)]
    )
    clock.advance(SECONDS_A_DAY)
    send(receiver, [run_span("b-done", 8), *stable_run("b-done", 2, 4)])
    assert receiver.flush()  # the runs with a complete plan admitted; a-open waits its idle period
    clock.advance(2 * SECONDS_A_DAY)  # both days ended, and were admitted, a day ago and more
    receiver.tick()
    assert {run.run_id for run in store.runs()} == {"a-done", "a-open"}
    assert store.evidence("b-done").cases == {}
    assert receiver.assessment("a-done").trials.received == 8  # its day kept whole
    held = partitions(location)
    assert f"trials_d{first + 1}" not in held and held[f"trials_d{first}"] == 12
    clock.advance(5 * SECONDS_A_DAY)  # a-open idle: admitted now, and kept a day after
    receiver.tick()
    assert receiver.flush() and store.run("a-open").status is not None  # type: ignore[union-attr]
    assert f"trials_d{first}" in partitions(location)
    clock.advance(SECONDS_A_DAY + 60)
    receiver.tick()
    assert store.runs() == [] and f"trials_d{first}" not in partitions(location)
    receiver.close()


def test_one_replica_at_a_time_drops_a_day(location: str) -> None:
    stores = [Store(location), Store(location)]
    day = day_of(stores[0].now()) + 1
    stores[0].write(Batch([Trial("c", 0, "approve", "r")]), now=day * SECONDS_A_DAY)
    stores[0].finish("r", "qualified", None, now=day * SECONDS_A_DAY)
    later = (day + 3) * SECONDS_A_DAY
    dropped = []
    threads = [
        threading.Thread(target=lambda s=store: dropped.append(s.forget_finished(later)))
        for store in stores
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(dropped) == [0, 1] and f"trials_d{day}" not in partitions(location)
    for store in stores:
        store.close()


def test_trials_written_across_midnight_land_in_their_runs_day_and_are_read_back(
    location: str,
) -> None:
    store = Store(location)
    day = day_of(store.now()) + 1
    clock = ManualClock((day + 1) * SECONDS_A_DAY - 10)  # ten seconds to midnight
    receiver = Receiver(store, None, ReceiverConfig(idle=HOUR), clock=clock)
    send(receiver, [decision_span("night", "c", index, "approve") for index in range(3)])
    assert partitions(location)[f"trials_d{day + 1}"] == 0  # made before a write needs it
    clock.advance(20)
    send(receiver, [decision_span("night", "c", index, "approve") for index in range(3, 6)])
    send(receiver, [decision_span("morning", "c", index, "deny") for index in range(4)])
    send(receiver, [decision_span("night", "c", 0, "deny")])  # a conflict across midnight
    held = partitions(location)
    assert held[f"trials_d{day}"] == 6 and held[f"trials_d{day + 1}"] == 4
    assert [t.index for t in store.evidence("night").trials()] == list(range(6))
    assert [t.decision for t in store.evidence("morning").trials()] == ["deny"] * 4
    assert store.run("night").received == 6  # type: ignore[union-attr]
    receiver.close()


VERSION_2 = """
CREATE TABLE schema_version (version BIGINT NOT NULL);
INSERT INTO schema_version VALUES (2);
CREATE TABLE runs (run_id TEXT PRIMARY KEY, suite TEXT, point TEXT, declaration TEXT,
    planned_trials BIGINT, declared_at DOUBLE PRECISION, first_seen DOUBLE PRECISION NOT NULL,
    last_seen DOUBLE PRECISION NOT NULL, status TEXT, final BIGINT NOT NULL DEFAULT 0,
    received BIGINT NOT NULL DEFAULT 0, late BIGINT NOT NULL DEFAULT 0,
    declaration_conflict BIGINT NOT NULL DEFAULT 0, finished_at DOUBLE PRECISION, owner TEXT,
    lease_until DOUBLE PRECISION, version BIGINT NOT NULL DEFAULT 0,
    framework BIGINT NOT NULL DEFAULT 0);
CREATE TABLE trials (run_id TEXT NOT NULL, case_id TEXT NOT NULL, trial BIGINT NOT NULL,
    decision TEXT, expected TEXT, error_type TEXT, duplicates BIGINT NOT NULL DEFAULT 0,
    conflict BIGINT NOT NULL DEFAULT 0, batch BIGINT NOT NULL, latency_ms DOUBLE PRECISION,
    passed BIGINT, tiers TEXT, PRIMARY KEY (run_id, case_id, trial));
CREATE INDEX trials_by_write ON trials (run_id, batch);
INSERT INTO runs (run_id, first_seen, last_seen, status, final, received, finished_at, version)
    SELECT 'old-' || n, 1000, 1010, 'qualified', 1, 100, 1010, 1 FROM generate_series(1, 20) n;
INSERT INTO runs (run_id, first_seen, last_seen, received, version) VALUES ('open', 1000, 1010, 2, 1);
INSERT INTO trials (run_id, case_id, trial, decision, batch)
    SELECT 'old-' || (n % 20 + 1), 'c' || (n / 20), 0, 'l:approve', 1
    FROM generate_series(0, 1999) n;
INSERT INTO trials (run_id, case_id, trial, decision, batch) VALUES
    ('open', 'c', 0, 'l:approve', 1), ('open', 'c', 1, 'l:approve', 1);
"""
"""A version-2 store: the trials of 20 runs admitted and of one open run, unpartitioned."""


def test_a_version_2_store_is_partitioned_in_place_keeping_every_trial(location: str) -> None:
    with psycopg.connect(location, autocommit=True) as connection:
        connection.execute(VERSION_2)
    stop, written = threading.Event(), []

    def version_2_writer() -> None:  # a replica of the release before, writing meanwhile
        with psycopg.connect(location, autocommit=True) as connection:
            while not stop.is_set():
                case = f"w{len(written)}"
                connection.execute(
                    "INSERT INTO trials (run_id, case_id, trial, decision, batch)"
                    " VALUES ('open', %s, 0, 'l:approve', 2)",
                    (case,),
                )
                written.append(case)

    writer = threading.Thread(target=version_2_writer)
    writer.start()
    try:
        store = Store(location)
    finally:
        stop.set()
        writer.join()
    assert any("trials partitioned by day" in step for step in store.migrated)
    assert written, "the writer of the release before went on while the store was partitioned"
    assert partitions(location) == {"trials_before": 2000 + 2 + len(written)}
    assert sum(len(list(store.evidence(f"old-{n}").trials())) for n in range(1, 21)) == 2000
    store.write(
        Batch([Trial("c", 1, "deny", "open"), Trial("c", 2, "approve", "open")]), now=2000.0
    )
    assert [t.decision for t in store.evidence("open").trials() if t.case == "c"] == [
        "approve",
        "approve",  # first record wins, across the partitioning
        "approve",
    ]
    with psycopg.connect(location) as connection:
        (version,) = connection.execute("SELECT MAX(version) FROM schema_version").fetchone() or (
            0,
        )
    again = Store(location)
    assert version == SCHEMA_VERSION and again.migrated == ()
    again.close()
    today = day_of(store.now())
    store.finish("open", "qualified", None, now=2000.0)
    assert store.forget_finished((today + 1) * SECONDS_A_DAY) == 21  # the days before, whole
    assert store.runs() == [] and "trials_before" not in partitions(location)
    store.close()


VERSION_3 = """
DROP INDEX trials_relayed;
CREATE INDEX trials_by_write ON trials (run_id, batch);
ALTER TABLE trials DROP COLUMN relayed;
DELETE FROM schema_version;
INSERT INTO schema_version VALUES (3);
"""
"""A version-4 store taken back to version 3: every trial indexed by write, none relayed."""


def relayed_index(location: str) -> tuple[bool, dict[str, str]]:
    """Whether `trials_relayed` is valid, and each partition's index attached to it."""
    with psycopg.connect(location) as connection:
        row = connection.execute(
            "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = 'trials_relayed'::regclass"
        ).fetchone()
        attached = connection.execute(
            "SELECT t.relname, c.relname FROM pg_inherits p JOIN pg_class c ON c.oid = p.inhrelid"
            " JOIN pg_index x ON x.indexrelid = c.oid JOIN pg_class t ON t.oid = x.indrelid"
            " WHERE p.inhparent = 'trials_relayed'::regclass"
        ).fetchall()
    return bool(row and row[0]), dict(attached)


def test_a_version_3_store_indexes_only_relayed_trials_while_its_writers_go_on(
    location: str,
) -> None:
    store = Store(location)
    today = day_of(store.now())
    store.write(
        Batch([Trial("c", 0, "approve", "open")]), now=today * SECONDS_A_DAY, claim=("a", 1e12)
    )
    store.close()
    with psycopg.connect(location, autocommit=True) as connection:
        connection.execute(VERSION_3)
    stop, written = threading.Event(), []

    def version_3_writer() -> None:  # a replica of the release before, writing meanwhile
        with psycopg.connect(location, autocommit=True) as connection:
            while not stop.is_set():
                connection.execute(
                    "INSERT INTO trials (run_id, case_id, trial, decision, batch, day)"
                    " VALUES ('open', 'c', %s, 'l:approve', 2, %s)",
                    (len(written) + 1, today),
                )
                written.append(len(written) + 1)

    writer = threading.Thread(target=version_3_writer)
    writer.start()
    try:
        store = Store(location)
    finally:
        stop.set()
        writer.join()
    assert written, "the writer of the release before went on while the index was built"
    assert "trials gained relayed (locked)" in store.migrated
    assert "indexes trials_relayed built" in store.migrated
    assert "indexes trials_by_write dropped (locked an instant)" in store.migrated
    valid, attached = relayed_index(location)
    assert valid and set(attached) == set(partitions(location))
    with psycopg.connect(location) as connection:
        relayed = dict(
            connection.execute(  # type: ignore[arg-type]
                "SELECT relayed, count(*) FROM trials GROUP BY relayed"
            ).fetchall()
        )
    assert relayed == {1: 1 + len(written)}  # the rows before, and the older writer's
    store.write(
        Batch([Trial("c", 0, "deny", "mine")]), now=today * SECONDS_A_DAY, claim=("a", 1e12)
    )
    store.write(
        Batch([Trial("c", 1, "deny", "mine")]), now=today * SECONDS_A_DAY, claim=("b", 1e12)
    )
    with psycopg.connect(location) as connection:
        mine = connection.execute(
            "SELECT trial, relayed FROM trials WHERE run_id = 'mine' ORDER BY trial"
        ).fetchall()
    assert mine == [(0, 0), (1, 1)]  # its owner's own, another replica's relayed
    store.write(Batch([Trial("c", 0, "deny", "later")]), now=(today + 5) * SECONDS_A_DAY)
    valid, attached = relayed_index(location)  # a day made since has its index too
    assert valid and f"trials_d{today + 5}" in attached
    assert Store(location).migrated == ()
    store.close()
