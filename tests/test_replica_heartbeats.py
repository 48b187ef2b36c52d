"""Liveness per replica, not per run, and replicas that never queue behind one another (issue
35): a replica owns its runs while its heartbeat (one row) holds, so renewing changes no run's
row however many it owns; a lapsed heartbeat hands all its runs over at once; a store made
before heartbeats keeps its owners while their leases hold; and a trace another transaction
holds is left to it rather than waited for, its run kept open until it settles."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

import psycopg
import pytest

from postgres_support import StoreMaker
from receiver_support import request, stable_run, strands_trial
from verdictgate import Trial
from verdictgate.clock import ManualClock
from verdictgate.errors import StoreError
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.replication.ownership import CLAIM_BATCH
from verdictgate.receiver.store import Batch, Store
from verdictgate.receiver.store.postgres import POOL_SIZE

LEASE = 10.0


@pytest.fixture
def location(postgres_server: str, tmp_path: Path) -> str:
    return StoreMaker("postgresql", tmp_path, postgres_server).location("shared")


def replica(location: str, name: str, clock: ManualClock, **config: float) -> Receiver:
    settings = ReceiverConfig(replica=name, lease=LEASE, **{"idle": 600.0, **config})
    return Receiver(Store(location), None, settings, clock=clock)


def ingest(receiver: Receiver, spans: list) -> None:
    receiver.ingest(extract_protobuf(request(spans).SerializeToString()))


def row_versions(location: str) -> dict[str, int]:
    """Each run's row version (`xmin`): it changes whenever the row is written."""
    with psycopg.connect(location) as connection:
        rows = connection.execute("SELECT run_id, xmin::text FROM runs").fetchall()
    return {run_id: int(xmin) for run_id, xmin in rows}


def open_runs(store: Store, owner: str, runs: int, now: float) -> None:
    """`runs` canaries of one trial each, opened by `owner`."""
    trials = [Trial("c", 0, "approve", f"open-{n:05d}", "approve") for n in range(runs)]
    store.write(Batch(trials), now=now, claim=(owner, now + LEASE))


def test_renewing_a_heartbeat_writes_no_run_however_many_a_replica_owns(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a = replica(location, "a", clock)
    open_runs(a.store, "a", 500, clock())
    before = row_versions(location)
    for _ in range(5):
        clock.advance(LEASE / 3)
        a.renew_leases()
        a.tick()
    assert row_versions(location) == before  # one heartbeat row renewed, no run row
    assert set(a.store.claims.owned_runs("a")) == set(before)


def test_a_lapsed_heartbeat_hands_every_run_over_at_once(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    runs = 2 * CLAIM_BATCH + 500  # more than one claim takes
    open_runs(a.store, "a", runs, clock())
    clock.advance(LEASE / 2)
    b.tick()
    assert not b.store.claims.owned_runs("b")  # a's heartbeat holds
    clock.advance(LEASE)  # a stopped renewing: its heartbeat lapsed
    b.tick()
    assert len(b.store.claims.owned_runs("b")) == runs
    assert not b.store.claims.owned_runs("a")
    a.renew_leases()  # a, back, owns nothing any more: the tick lets its runs go
    a.tick()
    assert not a.store.claims.owned_runs("a")


def test_a_write_takes_a_run_whose_owner_is_not_alive(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    ingest(a, stable_run("r", cases=2, trials=2))
    ingest(b, stable_run("r", cases=2, trials=4)[2:])
    assert a.store.run("r").owner == "a"  # alive: b's trials are a's to decide
    clock.advance(LEASE + 1)
    ingest(b, stable_run("r2", cases=2, trials=2) + stable_run("r", cases=2, trials=6)[4:])
    assert b.store.run("r").owner == "b"


def test_a_store_made_before_heartbeats_keeps_its_owners_while_their_leases_hold(
    location: str,
) -> None:
    store = Store(location)
    open_runs(store, "old", 3, 1_000_000.0)
    store.close()
    with psycopg.connect(location, autocommit=True) as connection:  # as a release before
        connection.execute("DROP TABLE replicas")  # heartbeats left it: leases on the runs
        connection.execute("UPDATE runs SET lease_until = 1000020.0")
        connection.execute("UPDATE schema_version SET version = 1")
    clock = ManualClock(1_000_010.0)
    b = replica(location, "b", clock)
    b.tick()
    assert not b.store.claims.owned_runs("b")  # "old"'s lease holds until 1,000,020
    clock.advance(15.0)
    b.tick()
    assert len(b.store.claims.owned_runs("b")) == 3


def test_a_trace_another_transaction_holds_is_left_to_it_and_its_run_kept_open(
    location: str,
) -> None:
    clock = ManualClock(1_000_000.0)
    a = replica(location, "a", clock, idle=5.0, settle=1.0)
    ingest(a, strands_trial(1, "framework", "c", 0, ["lookup"]))
    clock.advance(2.0)
    a.tick()  # the first trial settled: the run is open
    ingest(a, strands_trial(2, "framework", "c", 1, ["lookup"]))
    clock.advance(6.0)  # the second is due to settle, and its run idle
    with psycopg.connect(location) as other:  # another replica settling it, mid-transaction
        trace_id = (2).to_bytes(16, "big").hex()
        other.execute("SELECT trace_id FROM traces WHERE trace_id = %s FOR UPDATE", (trace_id,))
        a.tick()  # never waits for it (a lock wait would fail after lock_timeout)
        assert a.store.run("framework").status is None  # kept open while its trial waits
    a.tick()
    clock.advance(6.0)
    a.tick()
    assert a.flush()
    run = a.store.run("framework")
    assert run is not None and run.status is not None and run.late == 0
    assert [trial.index for trial in a.store.evidence("framework").trials()] == [0, 1]


def test_open_runs_of_a_store_made_before_runs_had_owners_are_taken_up(location: str) -> None:
    store = Store(location)
    open_runs(store, "old", 2, 1_000_000.0)
    store.close()
    with psycopg.connect(location, autocommit=True) as connection:  # as a release before
        connection.execute("DROP TABLE replicas")  # owners and heartbeats left it
        connection.execute("UPDATE runs SET owner = NULL, lease_until = NULL")
        connection.execute("UPDATE schema_version SET version = 1")
    clock = ManualClock(1_000_010.0)
    b = replica(location, "b", clock, idle=30.0)
    b.tick()
    assert len(b.store.claims.owned_runs("b")) == 2  # never stranded
    clock.advance(31.0)
    b.tick()
    assert b.flush()
    assert all(b.store.run(f"open-{n:05d}").status is not None for n in range(2))


def test_a_database_in_another_encoding_than_utf8_is_refused_in_one_line(
    postgres_server: str,
) -> None:
    name = "latin1_store"
    with psycopg.connect(postgres_server, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name}")
        connection.execute(
            f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
            " TEMPLATE template0"
        )
    with pytest.raises(StoreError, match="in LATIN1: verdictgate needs one in UTF8"):
        Store(postgres_server.rpartition("/")[0] + "/" + name)


def heartbeat_writes(location: str, name: str) -> tuple[float, int]:
    """A replica's heartbeat as stored: until when it holds, and its row version (`xmin`)."""
    with psycopg.connect(location) as connection:
        row = connection.execute(
            "SELECT alive_until, xmin::text FROM replicas WHERE name = %s", (name,)
        ).fetchone()
    assert row is not None
    return float(row[0]), int(row[1])


def test_the_heartbeat_is_written_once_a_third_of_a_lease_whoever_asks(location: str) -> None:
    """The tick (every third of a lease) and the renewal thread (every sixth) both renew;
    whichever asks first once a quarter of a lease passed writes the row, and the other's ask
    writes nothing."""
    clock = ManualClock(1_000_000.0)
    a = replica(location, "a", clock)
    start = clock()
    started = heartbeat_writes(location, "a")
    assert started[0] == start + LEASE  # alive from the start, before any claim
    for _ in range(3):
        a.tick()
        a.renew_leases()
    assert heartbeat_writes(location, "a") == started
    clock.advance(LEASE / 6)
    a.renew_leases()
    a.tick()
    assert heartbeat_writes(location, "a") == started  # not due: a sixth of a lease
    clock.advance(LEASE / 6)
    a.renew_leases()
    renewed = heartbeat_writes(location, "a")
    assert renewed[0] == clock() + LEASE and renewed[1] != started[1]
    a.tick()
    a.renew_leases()
    assert heartbeat_writes(location, "a") == renewed
    clock.advance(LEASE / 3)
    a.tick()
    assert heartbeat_writes(location, "a")[0] == clock() + LEASE


def test_a_renewal_never_waits_behind_a_full_pool(location: str) -> None:
    """Every connection of a replica's pool waits inside a write (another session holds the
    trials table); its heartbeat is still renewed at once, over the connection kept for it."""
    long_lease = 60.0  # writes wait up to a third of it: longer than a use waits for the pool
    store = Store(location, lease=long_lease)
    open_runs(store, "a", 1, 1_000_000.0)
    writers: list[threading.Thread] = []
    with psycopg.connect(location) as holder:
        holder.execute("LOCK TABLE trials IN EXCLUSIVE MODE")
        for n in range(POOL_SIZE):
            trial = Trial("c", 0, "approve", f"blocked-{n}", "approve")
            write = functools.partial(store.write, Batch([trial]), now=1_000_001.0)
            writers.append(threading.Thread(target=write))
            writers[-1].start()
        while waiting_on_a_lock(location) < POOL_SIZE:
            time.sleep(0.05)
        store.claims.renew("a", 2_000_000.0)
        assert all(writer.is_alive() for writer in writers)  # the pool is still full
        assert heartbeat_writes(location, "a")[0] == 2_000_000.0
    for writer in writers:
        writer.join()
    store.close()


def waiting_on_a_lock(location: str) -> int:
    """Sessions of the database waiting for a lock."""
    with psycopg.connect(location) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0
