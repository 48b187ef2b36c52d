"""A PostgreSQL database as the store's connections, through psycopg 3: the URL read once, the
session settings a URL leaves out (and the bounds each transaction sets itself, which follow the
replicas' lease), a small pool of connections, and statements run in their PostgreSQL text
(psycopg's raw form, `$1`), an insert of many rows sent as arrays of its columns."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from ...errors import ExtraMissing, StoreError
from .connection import CopyRepeated, Cursor, Database, Parameters, Query
from .connection_pool import ConnectionPool
from .faults import ends_the_session, first_line
from .locations import redacted
from .statements import Index, Statement

if TYPE_CHECKING:
    import psycopg

MIGRATION_LOCK = 0x76657264
"""The advisory lock replicas starting together migrate a PostgreSQL store under, one at a time."""
MIGRATION_POLL = 0.2
"""Seconds between a waiting replica's tries for the migration lock."""


class PostgresDatabase(Database):
    """A PostgreSQL database through psycopg 3, shared with other replicas. The URL (or the
    standard `PG*` environment variables it leaves out) says where and who. Each use takes a
    connection of a small pool (`ConnectionPool`), so ingest, the tick, the heartbeat, the
    forwarder, queries and the finisher's read of a whole run never queue behind one another;
    a connection lost is dropped from the pool and made again at the next use. Transactions
    are READ COMMITTED: rows a transaction changes are locked until it ends, which is what
    orders replicas' writes to one run or trace.

    Each transaction bounds itself (`bounds`): it waits for a row another replica holds a third
    of `lease` at most, and the server ends its session (and its locks) once it idled a whole
    `lease`, so a replica stalled inside a write loses its runs within two leases. It works
    through a pooler such as PgBouncer in session or transaction mode: those bounds are set in
    each transaction's `BEGIN`, which a pooler keeps for the transaction, and a session that
    lost the settings its `options` sent is a pooler's, and has no statement prepared on the
    server (a pooled server connection may have another client's of the same name)."""

    shared = True

    def __init__(self, url: str, lease: float) -> None:
        try:
            import psycopg
        except ImportError:
            raise ExtraMissing(
                "a PostgreSQL store needs psycopg, in the `postgres` extra (verdictgate[postgres])"
            ) from None
        self._psycopg = psycopg
        self._begin = begin(lease)
        self._begin_snapshot = begin(lease, "ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:  # the driver's text may quote the URL, password and all: never shown
            given = psycopg.conninfo.conninfo_to_dict(url)
            self._conninfo = psycopg.conninfo.make_conninfo(
                url, **{key: value for key, value in session(lease).items() if key not in given}
            )
        except (psycopg.Error, ValueError):
            raise _unreadable(url) from None
        self._pool = ConnectionPool(self._connect, POOL_SIZE, POOL_WAIT)
        self._kept = ConnectionPool(self._connect, 1, POOL_WAIT)
        """The heartbeat's own connection: a renewal never waits behind a full pool."""
        try:  # one connection first: a store away or a refused role is one clear line
            with self._pool.connection() as connection:
                (encoding,) = connection.execute("SHOW server_encoding").fetchone() or ("",)
        except psycopg.OperationalError as error:  # its text names no password
            raise StoreError(
                f"cannot reach the store {redacted(url)}: {first_line(error)}"
            ) from None
        except psycopg.Error:  # a parameter libpq refuses: its text may quote any of them
            raise _unreadable(url) from None
        if encoding != "UTF8":  # a label the door takes must be one the store keeps
            self._pool.close()
            raise StoreError(
                f"the store {redacted(url)} is a database in {encoding}: verdictgate needs one in"
                " UTF8 (CREATE DATABASE ... ENCODING 'UTF8'), which keeps every label it takes"
            )

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A new connection, with the session settings the URL leaves out; its statements
        prepared on the server only if the session kept the `lock_timeout` its start-up
        `options` set (then it is the server's own: a pooler drops them, and may share its
        server connections); lists (the columns of an insert of many rows) sent in binary,
        which spares the client quoting them."""
        from psycopg.types.array import ListBinaryDumper

        connection = self._psycopg.connect(self._conninfo, autocommit=True, prepare_threshold=None)
        try:
            (source,) = connection.execute(
                "SELECT source FROM pg_settings WHERE name = 'lock_timeout'"
            ).fetchone() or (None,)
        except BaseException:
            connection.close()
            raise
        if source == "client":
            connection.prepare_threshold = PREPARE_THRESHOLD
        connection.adapters.register_dumper(list, ListBinaryDumper)
        return connection

    @contextmanager
    def _connection(
        self, pool: ConnectionPool | None = None
    ) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A connection of the pool (or of `pool`) for the block (a server away raises the
        driver's error, which a sender is told to retry). A connection lost, or whose session
        the server ended (a restart, an administrator: the driver may not have noticed yet), is
        closed and lets go of the idle ones too, so that one server restart fails one use, not
        one use per connection; an error of the server's (a lock not had in time) keeps them."""
        with (pool or self._pool).connection() as connection:
            try:
                yield connection
            except self._psycopg.OperationalError as error:
                if connection.broken or ends_the_session(error):  # the server went
                    connection.close()
                    self._pool.drop_idle()
                    self._kept.drop_idle()
                raise

    def heartbeat(self) -> AbstractContextManager[Cursor]:
        return self._transaction(self._kept, self._begin)

    def transaction(self, copying: bool = False) -> AbstractContextManager[Cursor]:
        return self._transaction(self._pool, self._begin, copying)

    def snapshot(self) -> AbstractContextManager[Cursor]:
        return self._transaction(self._pool, self._begin_snapshot)

    @contextmanager
    def _transaction(
        self, pool: ConnectionPool, start: tuple[str, ...], copying: bool = False
    ) -> Iterator[Cursor]:
        with self._connection(pool) as connection:
            cursor = PostgresCursor(self._psycopg.RawCursor(connection), copying, start)
            try:
                yield cursor
                if cursor.begun:  # a transaction that ran no statement never began
                    connection.execute("COMMIT", prepare=False)
            except BaseException:
                if cursor.begun and not connection.broken:  # a lost connection ended it already
                    with contextlib.suppress(self._psycopg.Error):
                        connection.execute("ROLLBACK", prepare=False)
                raise

    @contextmanager
    def locked(self) -> Iterator[Cursor]:
        with self._connection() as connection:
            yield PostgresCursor(self._psycopg.RawCursor(connection))

    def now(self) -> float:
        with self._connection() as connection:
            cursor = connection.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())")
            (seconds,) = cursor.fetchone() or (None,)
        return float(seconds)

    def build_index(self, index: Index) -> None:
        """Built `CONCURRENTLY`: the table's writers go on meanwhile, and the build waits for
        their transactions as long as they take (no lock timeout for it). An invalid index of
        that name, left by a build that was interrupted, is dropped first."""
        with self._connection() as connection:
            connection.execute("SET lock_timeout = 0")
            try:
                connection.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index.name}")
                self._psycopg.RawCursor(connection).execute(index.build.postgres)
            finally:
                if not connection.broken:
                    connection.execute("RESET lock_timeout")

    @contextmanager
    def migrating(self) -> Iterator[None]:
        """The migration lock, held by a transaction of a connection of its own (pooled, it
        keeps its server connection), which idles meanwhile without a snapshot, so that an
        index built concurrently does not wait for it. A replica waiting for it tries again
        every MIGRATION_POLL seconds, in no transaction between tries: one blocked inside a
        statement would have a snapshot, which the migrating replica's build would wait for."""
        holder = self._connect()
        holder.prepare_threshold = None  # a prepared poll's portal would keep a snapshot
        try:
            while not _took_migration_lock(holder):
                time.sleep(MIGRATION_POLL)
            yield
            holder.execute("COMMIT")
        finally:
            holder.close()

    def close(self) -> None:
        self._pool.close()
        self._kept.close()


def _took_migration_lock(holder: psycopg.Connection[tuple[Any, ...]]) -> bool:
    """Whether `holder` took the migration lock: then a transaction of it holds it, its idle
    timeout off (a migration may build indexes a while); else no transaction is left open. Asked
    in a simple query: a bound one's portal would keep a snapshot while the transaction idles."""
    holder.execute("BEGIN; SET LOCAL idle_in_transaction_session_timeout = 0")
    cursor = holder.execute(f"SELECT pg_try_advisory_xact_lock({MIGRATION_LOCK})")
    (taken,) = cursor.fetchone() or (False,)
    if not taken:
        holder.execute("ROLLBACK")
    return bool(taken)


class PostgresCursor:
    """A psycopg raw cursor that runs statements' PostgreSQL text. A statement of many rows is
    sent as one: copied where it has that form (`Statement.postgres_copy`), which takes about
    half the server's time and a tenth of the client's of the same rows as arrays
    (`Statement.postgres_arrays`), which in turn take two thirds of the time of a row at a
    time, even pipelined. A transaction's start (`start`: its `BEGIN` and bounds) travels with
    its first statement, and statements run together (`execute_all`) in one simple query: a write
    that only adds to a known run makes 4 round trips (6 before), each a wait on a server a
    network hop away (`benchmarks/postgres_round_trips.py`)."""

    def __init__(
        self,
        cursor: psycopg.RawCursor[tuple[Any, ...]],
        copying: bool = False,
        start: tuple[str, ...] = (),
    ) -> None:
        self._cursor = cursor
        self._copying = copying
        """Many rows may be copied in (`Database.transaction`)."""
        self._start = start
        """The statements that start the cursor's transaction, until they are sent."""
        self._rowcount: int | None = None
        """Rows of the last call when the cursor's own count is not it: 0 for a call of no
        rows (psycopg would keep the count before), the rows of a copy."""
        self._fetching: (
            psycopg.RawCursor[tuple[Any, ...]] | psycopg.ClientCursor[tuple[Any, ...]]
        ) = cursor
        """The cursor the last statement's rows are read from."""

    @property
    def begun(self) -> bool:
        """Whether the transaction's start was sent (with the first statement)."""
        return not self._start

    @property
    def rowcount(self) -> int:
        return self._fetching.rowcount if self._rowcount is None else self._rowcount

    def execute(self, statement: Statement, parameters: Parameters = (), /) -> Cursor:
        self._rowcount = None
        if self._start:
            self._fetching = self._together([(statement, parameters)])
        else:
            self._fetching = self._cursor
            self._cursor.execute(statement.postgres, parameters)
        return self

    def execute_all(self, queries: Sequence[Query], /) -> list[list[Any]]:
        self._rowcount = None
        if len(queries) == 1 and not self._start:
            return [self.execute(*queries[0]).fetchall()]
        cursor = self._together(queries)
        rows = []
        for at in range(len(queries)):
            if at:
                cursor.nextset()
            rows.append(cursor.fetchall() if cursor.description else [])
        self._fetching = cursor
        return rows

    def _together(self, queries: Sequence[Query]) -> psycopg.ClientCursor[tuple[Any, ...]]:
        """Send the transaction's start if still due and `queries` in one simple query, their
        values bound as literals (`Statement.postgres_literal`); the cursor at the first query's
        result. One simple query, not psycopg's pipeline:
        after a pipeline psycopg asks the server to flush, which the server reads after its
        `ReadyForQuery` and which leaves its `idle_in_transaction_session_timeout` unarmed, so a
        replica stalled there would hold its locks for ever."""
        import psycopg

        start, self._start = self._start, ()
        cursor = psycopg.ClientCursor(self._cursor.connection)
        text = "; ".join([*start, *(statement.postgres_literal for statement, _ in queries)])
        cursor.execute(text, [value for _, parameters in queries for value in parameters])
        for _ in start:
            cursor.nextset()
        return cursor

    def _begin(self) -> None:
        """Send the transaction's start on its own, if still due (before a copy, or a statement
        of many rows, which travel on their own)."""
        if self._start:
            start, self._start = self._start, ()
            self._cursor.connection.execute("; ".join(start), prepare=False)

    def executemany(
        self, statement: Statement, parameters: Iterable[Parameters], /, shared: Parameters = ()
    ) -> Cursor:
        rows = [(*row, *shared) for row in parameters] if shared else list(parameters)
        self._rowcount, self._fetching = (None if rows else 0), self._cursor
        if len(rows) >= BULK_ROWS and statement.postgres_arrays:
            self._begin()
            if not self._copied(statement, rows):
                self._in_arrays(statement, rows)
        elif rows:  # in one simple query: psycopg's executemany pipelines (see `_together`)
            cursor = self._together([(statement, row) for row in rows])
            count = cursor.rowcount
            for _ in rows[1:]:
                cursor.nextset()
                count += cursor.rowcount
            self._rowcount = count
        return self

    def returning(self, statement: Statement, rows: Sequence[Parameters], /) -> list[Any]:
        self._rowcount, self._fetching = (None if rows else 0), self._cursor
        if not rows:
            return []
        self._begin()
        if (copy := statement.postgres_copy) and self._copied(statement, rows):
            return [tuple(row[at] for at in copy.returned) for row in rows]
        self._in_arrays(statement, rows)
        return self._cursor.fetchall()

    def _in_arrays(self, statement: Statement, rows: Sequence[Parameters]) -> None:
        """Run a statement of many rows as one over arrays of their columns."""
        if statement.postgres_arrays is None:
            raise ValueError(f"no form over arrays: {statement.postgres}")
        self._cursor.execute(statement.postgres_arrays, [list(c) for c in zip(*rows, strict=True)])

    def _copied(self, statement: Statement, rows: Sequence[Parameters]) -> bool:
        """Copy `rows` in, when the transaction copies, the statement has a copied form and the
        rows are many (BULK_ROWS); False (nothing written) otherwise, so that the insert runs
        as written. A row that repeats one held (or another of them) fails the transaction
        (`CopyRepeated`): a savepoint to undo the copy alone would cost a round trip and a
        subtransaction every copy, for a repeat that only a sender's retry brings (an insert
        that repeats rows in its ordinary course names its conflict, and is never copied)."""
        from psycopg.errors import UniqueViolation

        copy = statement.postgres_copy
        if not self._copying or copy is None or len(rows) < BULK_ROWS:
            return False
        try:
            with self._cursor.copy(copy.text) as writer:
                writer.set_types(list(copy.types))
                for row in rows:
                    writer.write_row(row)
        except UniqueViolation as repeated:
            raise CopyRepeated(str(repeated)) from repeated
        self._rowcount = len(rows)
        return True

    def fetchone(self) -> Any:
        return self._fetching.fetchone()

    def fetchall(self) -> list[Any]:
        return self._fetching.fetchall()


def bounds(lease: float) -> tuple[int, int]:
    """What each transaction of a replica whose claims lapse after `lease` seconds sets, in
    milliseconds: how long it waits for a lock another replica holds (a third of a lease, then
    it fails and its sender retries), and how long the server lets it idle before it ends its
    session and its locks (a lease: a replica stalled inside a write, whose heartbeat lapses
    after a lease, loses its runs within two)."""
    return round(lease * 1000 / 3), round(lease * 1000)


def begin(lease: float, mode: str = "") -> tuple[str, str, str]:
    """A transaction's start (in `mode`) and its bounds (`bounds`), sent with its first
    statement: a pooler in transaction mode drops the session's `options`, and keeps what a
    transaction sets."""
    lock_ms, idle_ms = bounds(lease)
    return (
        f"BEGIN {mode}".rstrip(),
        f"SET LOCAL lock_timeout = {lock_ms}",
        f"SET LOCAL idle_in_transaction_session_timeout = {idle_ms}",
    )


def session(lease: float) -> dict[str, str]:
    """libpq parameters a store URL leaves out. How long to try to connect, and TCP keepalives
    on the connection, so that this replica notices a server that is gone. For the server's
    side of it: the transaction bounds (`bounds`) as the session's own too, and the server's
    keepalives end the connection (and its locks) of a replica whose host vanished, within
    about half a minute. A URL that sets `options` sets all of those itself (each transaction
    still sets its bounds)."""
    lock_ms, idle_ms = bounds(lease)
    return {
        "connect_timeout": "10",
        "keepalives": "1",
        "keepalives_idle": "10",
        "keepalives_interval": "5",
        "keepalives_count": "3",
        "options": (
            f"-c lock_timeout={lock_ms} -c idle_in_transaction_session_timeout={idle_ms}"
            " -c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3"
            " -c tcp_user_timeout=30000"
        ),
        "application_name": "verdictgate",
        "target_session_attrs": "read-write",  # never a standby, after a failover
    }


PREPARE_THRESHOLD: int | None = 5
"""On a connection of the server's own, psycopg prepares a statement on the server after this
many executions (its default): half as many writes and reads again a second
(benchmarks/postgres_session.py). Never through a pooler, where one client's prepared statement
would meet another's of the same name on a shared server connection."""
BULK_ROWS = 8
"""Rows from which a statement of many rows is sent as arrays of its columns."""
POOL_SIZE = 8
"""Connections one replica holds at most (and one more kept for its heartbeat): ingest, the tick,
the forwarder, the finisher's reads and a few queries at once."""
POOL_WAIT = 10.0
"""Seconds a use waits for a connection of the pool when every one is in use: then it fails as
the store being away, and its sender is told to retry."""


def _unreadable(url: str) -> StoreError:
    """The error of a store URL PostgreSQL cannot read (never quoting it: a password may be in
    any part)."""
    return StoreError(
        f"the store URL {redacted(url)} is not one PostgreSQL reads "
        "(postgresql://[user[:password]@]host[:port]/database[?parameter=value&...])"
    )
