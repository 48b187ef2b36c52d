"""The store on a real PostgreSQL (the Debian package's server, started as an unprivileged user
in a scratch directory): migrations by replicas starting at once, a lock waited for within
bounds (through PgBouncer too), a lost connection made again, and a password never printed
(tests/test_store_statements.py runs every statement on both stores)."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from pgbouncer_support import MODES, pgbouncer
from postgres_support import StoreMaker, postgresql
from relay_support import TurnCountingRelay, address, relayed
from verdictgate.receiver.store import Batch, Store, is_store_error
from verdictgate.receiver.store.connection import open_database
from verdictgate.receiver.store.locations import redacted
from verdictgate.receiver.store.statements import Statement
from verdictgate.trial_model import Trial


def test_a_scratch_postgresql_starts_listens_on_loopback_only_and_stops():
    with postgresql() as url, psycopg.connect(url, autocommit=True) as connection:
        (listening,) = connection.execute("SHOW listen_addresses").fetchone() or (None,)
    assert listening == "127.0.0.1"
    with pytest.raises(psycopg.OperationalError):  # stopped with its context
        psycopg.connect(url, connect_timeout=2)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://bob:hunter2@db:5432/vg", "postgresql://bob:***@db:5432/vg"),
        (
            "postgresql://bob@db/vg?sslmode=require&password=hunter2",
            "postgresql://bob:***@db/vg?sslmode=require",
        ),
        ("postgresql://bob:hun#ter2@db/vg", "postgresql://bob:***@db/vg"),  # libpq reads it so
        ("postgresql://bob:hun?ter2@db/vg", "postgresql://bob:***@db/vg"),
        ("postgresql://bob@db/vg?pass%77ord=hunter2", "postgresql://bob:***@db/vg"),
        ("postgresql://bob@db/vg?PASSWORD=hunter2", "postgresql://(a URL that cannot be read)"),
        ("postgresql://u:hunter2@[::1/vg", "postgresql://(a URL that cannot be read)"),
        ("postgresql://bob@db/vg", "postgresql://bob@db/vg"),
        ("/var/lib/store.sqlite", "/var/lib/store.sqlite"),
    ],
)
def test_a_url_is_printed_without_its_password(url: str, shown: str) -> None:
    assert redacted(url) == shown


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (psycopg.errors.AdminShutdown, True),  # the server restarting
        (psycopg.errors.DeadlockDetected, True),
        (psycopg.errors.LockNotAvailable, True),  # lock_timeout
        (psycopg.errors.IdleInTransactionSessionTimeout, True),  # a replica paused mid-write
        (psycopg.errors.ReadOnlySqlTransaction, True),  # a write that reached a standby
        (psycopg.OperationalError, True),  # the connection lost (no SQLSTATE)
        (psycopg.errors.InsufficientPrivilege, False),
        (psycopg.errors.UniqueViolation, False),
        (psycopg.errors.UndefinedColumn, False),
    ],
)
def test_a_sender_is_told_to_retry_what_a_retry_may_not_meet(error: type, retried: bool) -> None:
    assert is_store_error(error()) is retried


def test_a_role_that_may_not_create_the_tables_is_one_line(cli, postgres_server: str) -> None:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        admin.execute(f"CREATE ROLE r_{name} LOGIN")  # PostgreSQL 15: no CREATE on public
    url = postgres_server.rpartition("@")[2].rpartition("/")[0]
    result = cli(
        "serve", "--store", f"postgresql://r_{name}@{url}/{name}", "--grpc-listen", "127.0.0.1:0"
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "cannot open the store" in result.output and "permission denied" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_admissions_since_are_read_page_by_page_each_once(
    postgres_server: str, tmp_path: Path
) -> None:
    store = Store(StoreMaker("postgresql", tmp_path, postgres_server).location("pages"))
    for number in range(25):  # five admissions at each of five times
        run = f"r{number:02d}"
        store.write(Batch([Trial("c", 0, "approve", run, "approve")]), now=1_000.0)
        store.finish(run, "qualified", None, 1_000.0 + number // 5)
    seen, position = [], (0.0, "")
    while page := store.finished_since(*position, 4):
        seen += [run.run_id for run, _ in page]
        position = (page[-1][1], page[-1][0].run_id)
    assert seen == [f"r{number:02d}" for number in range(25)]
    store.close()


@pytest.mark.parametrize(
    "store",
    [
        "postgresql://bob:pw%zzhunter2@127.0.0.1:1/vg",  # the driver's error quotes it
        "postgresql://bob@127.0.0.1:1/vg?connect_timeout=abc&password=hunter2",
        "postgresql://u:hunter2@[::1/vg",
        "host=127.0.0.1 dbname=vg password=hunter2",  # libpq's form, not a file name
    ],
)
def test_a_store_url_that_cannot_be_used_is_one_line_without_its_password(
    cli, tmp_path: Path, store: str
) -> None:
    result = cli("serve", "--store", store, "--grpc-listen", "127.0.0.1:0")
    assert result.exit_code == 2, result.output
    assert "hunter2" not in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not list(tmp_path.glob("host=*"))


def test_a_lease_too_short_to_renew_is_refused(cli) -> None:
    result = cli("serve", "--store", ":memory:", "--lease", "1s")
    assert result.exit_code == 2 and "--lease must be at least 3s" in result.output


def test_serve_that_cannot_reach_its_store_says_so_without_the_password(cli) -> None:
    from components import free_port

    url = f"postgresql://bob:hunter2@127.0.0.1:{free_port()}/vg"
    result = cli(
        "serve", "--store", url, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"
    )
    assert result.exit_code == 2
    assert "cannot reach the store postgresql://bob:***@127.0.0.1" in result.output
    assert "hunter2" not in result.output and "Traceback" not in result.output


def test_replicas_starting_at_once_migrate_one_at_a_time(
    postgres_server: str, tmp_path: Path
) -> None:
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("fresh")
    start, stores, failures = threading.Barrier(4), [], []

    def open_store() -> None:
        start.wait()
        try:
            stores.append(Store(location))
        except Exception as error:
            failures.append(error)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and len(stores) == 4
    stores[0].write(Batch([Trial("c", 0, "approve", "r", "approve")]))
    assert [t.index for t in stores[3].evidence("r").trials()] == [0]
    for store in stores:
        store.close()


@pytest.mark.parametrize("pooled", [None, *MODES])
def test_a_write_waits_for_a_row_another_replica_holds_at_most_the_lock_timeout(
    postgres_server: str, tmp_path: Path, pooled: str | None
) -> None:
    """Connected directly or through PgBouncer (which drops the session's `options`): each
    transaction bounds its own lock waits, so the write fails (its sender retries) instead of
    waiting as long as the row is held."""
    direct = StoreMaker("postgresql", tmp_path, postgres_server).location("bounded")
    with pgbouncer(postgres_server, pooled) if pooled else nullcontext() as pooler:
        store = Store(pooler.url(direct) if pooler else direct)
        store.write(Batch([Trial("c", 0, "approve", "r", "approve")]))
        failed: list[Exception] = []

        def write() -> None:
            try:
                store.write(Batch([Trial("c", 1, "approve", "r", "approve")]))
            except Exception as error:
                failed.append(error)

        with psycopg.connect(direct) as holder:  # a transaction, open until the block ends
            holder.execute("SELECT 1 FROM runs WHERE run_id = 'r' FOR UPDATE")
            writing = threading.Thread(target=write)
            writing.start()
            writing.join(60)
            assert failed, "the write waited as long as the row was held"
        assert isinstance(failed[0], psycopg.errors.LockNotAvailable)
        assert is_store_error(failed[0])
        store.close()


def test_a_lost_connection_fails_one_write_and_is_made_again(
    postgres_server: str, tmp_path: Path
) -> None:
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("lost")
    store = Store(location)
    store.write(Batch([Trial("c", 0, "approve", "r", "approve")]))
    database = location.rpartition("/")[2]
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = 'verdictgate'",  # how the store says it
            (database,),
        )
    with pytest.raises(Exception) as failed:  # the sender is told to retry
        store.write(Batch([Trial("c", 1, "approve", "r", "approve")]))
    assert is_store_error(failed.value)
    store.write(Batch([Trial("c", 1, "approve", "r", "approve")]))  # the exporter's retry
    assert [t.index for t in store.evidence("r").trials()] == [0, 1]
    store.close()


@pytest.mark.parametrize(
    ("error", "kept"),
    [
        (psycopg.errors.AdminShutdown("terminating connection"), False),  # 57P01
        (psycopg.errors.ConnectionFailure("server closed the connection"), False),  # 08006
        (psycopg.errors.LockNotAvailable("lock timeout"), True),  # 55P03: the session goes on
    ],
)
def test_a_session_the_server_ended_is_never_used_again(
    postgres_server: str, tmp_path: Path, error: Exception, kept: bool
) -> None:
    """An error that says the server ended the session (an administrator, a restart, a lost
    connection) closes its connection, though the driver may not have noticed the socket close
    yet: the next use gets a new session. A lock not had in time keeps it."""
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("ended")
    database = open_database(location)
    session = Statement.of("SELECT pg_backend_pid()")
    try:
        with database.locked() as cursor:
            (before,) = cursor.execute(session).fetchone()
        with pytest.raises(type(error)), database.locked():
            raise error
        with database.locked() as cursor:
            (after,) = cursor.execute(session).fetchone()
    finally:
        database.close()
    assert (after == before) is kept


def test_healthz_answers_a_probe_without_a_token_and_fails_while_the_store_is_down() -> None:
    import urllib.error
    import urllib.request

    from receiver_support import running_server, wait_until

    def probe(port: int, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read()

    database = postgresql()
    url = database.__enter__()
    with running_server(url, token="s3cret") as server:
        try:
            assert probe(server.http_port, "/healthz") == (200, b'{"status":"ok"}')
            assert probe(server.http_port, "/v1/runs")[0] == 401  # the probe opens nothing else
        finally:
            database.__exit__(None, None, None)  # the store's server stops under the receiver
        wait_until(lambda: probe(server.http_port, "/healthz")[0] == 503)  # past a fresh 200
        assert probe(server.http_port, "/healthz") == (503, b'{"status":"store unavailable"}')


_TRIALS = st.lists(
    st.builds(
        Trial,
        st.sampled_from(["c0", "c1", "c2"]),
        st.integers(0, 5),
        st.one_of(st.none(), st.sampled_from(["approve", "deny"])),
        st.just("r"),
        st.one_of(st.none(), st.sampled_from(["approve", "deny"])),
        st.none(),
        passed=st.one_of(st.none(), st.booleans()),
        latency_ms=st.one_of(st.none(), st.floats(0, 1e6)),
        invariants_failed=st.sampled_from([(), ("no_pii",)]),
    ).map(lambda t: t if t.decision is not None else replace(t, error_type="timeout")),
    max_size=40,
)


@given(writes=st.lists(_TRIALS, min_size=1, max_size=4))
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_both_stores_keep_the_same_trials_repeats_and_conflicts(
    postgres_server: str, tmp_path: Path, writes: list[list[Trial]]
) -> None:
    """The same writes, in the same order, to SQLite and to PostgreSQL: the same trials kept,
    the same counts of repeats and conflicts, the same run, whatever the rows (one at a time or
    as arrays of columns, with repeats inside one write)."""
    run = f"r-{uuid.uuid4().hex[:8]}"
    stores = [Store(), Store(StoreMaker("postgresql", tmp_path, postgres_server).location("same"))]
    try:
        for trials in writes:
            for store in stores:
                store.write(Batch([replace(t, run=run) for t in trials]), now=1_000.0)
        sqlite, postgres = (store.evidence(run) for store in stores)
        assert list(postgres.trials()) == list(sqlite.trials())
        assert (postgres.duplicates, postgres.conflicted) == (sqlite.duplicates, sqlite.conflicted)
        first, second = (store.run(run) for store in stores)
        assert (first and first.received) == (second and second.received)
    finally:
        for store in stores:
            store.close()


def test_a_write_that_only_adds_to_a_known_run_takes_four_round_trips(
    postgres_server: str, tmp_path: Path
) -> None:
    """Its transaction's start, the run advanced through the writer's part and read back travel
    together (one round trip), the copy takes two (its start, then its rows) and the commit one:
    each saved is a wait on a server a network hop away (benchmarks/postgres_round_trips.py)."""
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("trips")
    relay = TurnCountingRelay(address(location))
    store = Store(relayed(location, relay.port))
    first, second = (
        [Trial(f"c{n}", trial, "approve", "r", "approve") for n in range(64)] for trial in (0, 1)
    )
    try:
        store.write(Batch(first))  # the run made, and the writer's part of it
        before = relay.turns
        written = store.write(Batch(second))
    finally:
        store.close()
    assert relay.turns - before == 4
    (run,) = written.runs
    assert run.received == 128 and run.version.writes == 2


@pytest.mark.parametrize("rows", [1, 3, 20])
def test_a_transaction_idle_after_a_write_of_few_rows_is_ended_by_the_server(
    postgres_server: str, tmp_path: Path, rows: int
) -> None:
    """A replica stalled right after a write of rows keeps its session's idle timeout: the server
    ends the transaction (and its locks) after a lease. psycopg's pipelined `executemany` left
    the timeout unarmed, so a write of a few trials, then a freeze, held its run for good."""
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("idle")
    Store(location).close()  # the tables made
    database = open_database(location, 0.6)
    insert = Statement.of(
        "INSERT INTO replicas (name, alive_until) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
    )
    try:
        with (
            pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout),
            database.transaction() as cursor,
        ):
            cursor.executemany(insert, [(f"r{n}", 1.0) for n in range(rows)])
            assert cursor.rowcount == rows
            time.sleep(1.5)  # idle in the transaction for over the lease
            cursor.execute(insert, ("late", 1.0))
    finally:
        database.close()
