"""A PostgreSQL database as the store's connection, through psycopg 3: the URL read once, the
session settings a URL leaves out, and the aggregates' SQLite SQL translated (`to_postgres`,
cached per statement: `?` placeholders, `INSERT OR IGNORE`, `IS ?` comparisons and SQLite's
column types), an insert of many rows sent as arrays of its columns."""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .connection import Cursor, Database, Parameters
from .faults import first_line
from .locations import redacted

if TYPE_CHECKING:
    import psycopg

MIGRATION_LOCK = 0x76657264
"""The advisory lock replicas starting together migrate a PostgreSQL store under, one at a time."""
MIGRATION_POLL = 0.2
"""Seconds between a waiting replica's tries for the migration lock."""
LOCK_TIMEOUT_MS = 5000
"""How long a statement waits for a lock another replica holds (then it fails, and its sender
retries)."""
IDLE_IN_TRANSACTION_MS = 15000
"""How long the server lets a transaction idle before it ends its session (and its locks)."""


class PostgresDatabase(Database):
    """A PostgreSQL database through psycopg 3, shared with other replicas. The URL (or the
    standard `PG*` environment variables it leaves out) says where and who; a connection lost
    is made again at the next use. Transactions are READ COMMITTED: rows a transaction changes
    are locked until it ends, which is what orders replicas' writes to one run or trace.

    It works through a pooler such as PgBouncer in session or transaction mode: a session that
    lost the settings its `options` sent is a pooler's, and has no statement prepared on the
    server (a pooled server connection may have another client's of the same name); and each
    transaction sets its own bounds (`BEGIN`), which a pooler keeps for the transaction."""

    shared = True
    for_update_skip_locked = " FOR UPDATE SKIP LOCKED"
    for_update = " FOR UPDATE"

    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            import psycopg
        except ImportError:
            raise RuntimeError(
                "a PostgreSQL store needs psycopg, in the `postgres` extra (verdictgate[postgres])"
            ) from None
        self._psycopg = psycopg
        self._types: dict[str, dict[str, str]] = {}
        try:  # the driver's text may quote the URL, password and all: never shown
            given = psycopg.conninfo.conninfo_to_dict(url)
            self._conninfo = psycopg.conninfo.make_conninfo(
                url, **{key: value for key, value in SESSION.items() if key not in given}
            )
        except (psycopg.Error, ValueError):
            raise _unreadable(url) from None
        try:
            self._connection: psycopg.Connection[tuple[Any, ...]] = self._connect()
        except psycopg.OperationalError as error:  # its text names no password
            raise RuntimeError(
                f"cannot reach the store {redacted(url)}: {first_line(error)}"
            ) from None
        except psycopg.Error:  # a parameter libpq refuses: its text may quote any of them
            raise _unreadable(url) from None

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A connection, with the SESSION settings the URL leaves out; its statements prepared
        on the server only if the session kept the `lock_timeout` its start-up `options` set
        (then it is the server's own: a pooler drops them, and may share its server
        connections)."""
        connection = self._psycopg.connect(self._conninfo, autocommit=True, prepare_threshold=None)
        (source,) = connection.execute(
            "SELECT source FROM pg_settings WHERE name = 'lock_timeout'"
        ).fetchone() or (None,)
        if source == "client":
            connection.prepare_threshold = PREPARE_THRESHOLD
        return connection

    def _live(self) -> psycopg.Connection[tuple[Any, ...]]:
        """The connection, made again when the last one was lost (the lock is held; a server
        still away raises the driver's error, which a sender is told to retry)."""
        if self._connection.closed or self._connection.broken:
            self._connection = self._connect()
        return self._connection

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        with self.lock:
            connection = self._live()
            connection.execute(BEGIN)
            try:
                yield PostgresCursor(connection.cursor(), self._column_types)
                connection.execute("COMMIT")
            except BaseException:
                if not connection.broken:  # a lost connection ended it already
                    with contextlib.suppress(self._psycopg.Error):
                        connection.execute("ROLLBACK")
                raise

    @contextmanager
    def locked(self) -> Iterator[Cursor]:
        with self.lock:
            yield PostgresCursor(self._live().cursor(), self._column_types)

    def ping(self) -> None:
        self._live().execute("SELECT 1").fetchone()

    def now(self) -> float:
        with self.lock:
            cursor = self._live().execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())")
            (seconds,) = cursor.fetchone() or (None,)
        return float(seconds)

    def tables(self, cursor: Cursor) -> set[str]:
        rows = cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
        return {name for (name,) in rows}

    def indexes(self, cursor: Cursor) -> set[str]:
        """Those valid: one a concurrent build left invalid (interrupted) is not."""
        rows = cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND i.indisvalid"
        ).fetchall()
        return {name for (name,) in rows}

    def build_index(self, name: str, statement: str) -> None:
        """Built `CONCURRENTLY`: the table's writers go on meanwhile, and the build waits for
        their transactions as long as they take (no lock timeout for it). An invalid index of
        that name, left by a build that was interrupted, is dropped first."""
        concurrently = statement.replace("CREATE INDEX", "CREATE INDEX CONCURRENTLY", 1)
        with self.lock:
            connection = self._live()
            connection.execute("SET lock_timeout = 0")
            try:
                connection.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
                connection.execute(concurrently)
            finally:
                if not connection.broken:
                    connection.execute("RESET lock_timeout")

    def columns(self, cursor: Cursor, table: str) -> set[str]:
        rows = cursor.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        ).fetchall()
        return {name for (name,) in rows}

    def _column_types(self, table: str) -> dict[str, str]:
        """A table's columns and their types, read once (the lock is held)."""
        if table not in self._types:
            rows = (
                self._live()
                .execute(
                    "SELECT column_name, data_type FROM information_schema.columns"
                    " WHERE table_schema = current_schema() AND table_name = %s",
                    (table,),
                )
                .fetchall()
            )
            self._types[table] = dict(rows)
        return self._types[table]

    @contextmanager
    def migrating(self) -> Iterator[None]:
        """The migration lock, held by a transaction of a connection of its own (pooled, it
        keeps its server connection), which idles meanwhile without a snapshot, so that an
        index built concurrently does not wait for it. A replica waiting for it tries again
        every MIGRATION_POLL seconds, in no transaction between tries: one blocked inside a
        statement would have a snapshot, which the migrating replica's build would wait for."""
        holder = self._connect()
        try:
            while not _took_migration_lock(holder):
                time.sleep(MIGRATION_POLL)
            yield
            holder.execute("COMMIT")
        finally:
            holder.close()

    def close(self) -> None:
        with self.lock:
            self._connection.close()


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
    """A psycopg cursor that takes the aggregates' SQLite SQL (see `to_postgres`). An insert of
    many rows is sent as one statement over arrays of its columns (`unnest`), which PostgreSQL
    takes in about two thirds of the time of a row at a time, even pipelined."""

    def __init__(
        self, cursor: psycopg.Cursor[tuple[Any, ...]], types: Callable[[str], dict[str, str]]
    ) -> None:
        self._cursor = cursor
        self._types = types
        self._none = False
        """The last call was an executemany of no rows (psycopg would keep the rowcount before)."""

    @property
    def rowcount(self) -> int:
        return 0 if self._none else self._cursor.rowcount

    def execute(self, sql: str, parameters: Parameters = (), /) -> Cursor:
        self._none = False
        self._cursor.execute(to_postgres(sql), parameters or None)
        return self

    def executemany(self, sql: str, parameters: Iterable[Parameters], /) -> Cursor:
        rows = list(parameters)
        self._none = not rows
        statement = to_postgres(sql)
        insert = _INSERT_VALUES.match(statement) if len(rows) >= BULK_ROWS else None
        if insert is not None:
            table, columns, rest = insert.group(1), insert.group(2).split(","), insert.group(3)
            types = self._types(table)
            arrays = ", ".join(f"%b::{types[column.strip()]}[]" for column in columns)
            self._cursor.execute(
                f"INSERT INTO {table} ({insert.group(2)}) SELECT * FROM unnest({arrays}){rest}",
                [list(column) for column in zip(*rows, strict=True)],
            )
        elif rows:
            self._cursor.executemany(statement, rows)
        return self

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()


SESSION = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "options": (
        f"-c lock_timeout={LOCK_TIMEOUT_MS}"
        f" -c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
        " -c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3"
        " -c tcp_user_timeout=30000"
    ),
    "application_name": "verdictgate",
    "target_session_attrs": "read-write",  # never a standby, after a failover
}
"""libpq parameters a store URL leaves out. How long to try to connect, and TCP keepalives on
the connection, so that this replica notices a server that is gone. For the server's side of
it: a write waits for a row another replica holds 5 s at most (then it fails, and its sender
retries), a transaction left idle is ended after 15 s (this store's never wait on anything but
the server), and the server's own keepalives end the connection (and its locks) of a replica
whose host vanished, within about half a minute. A URL that sets `options` sets all of those
itself. Each transaction sets its two bounds again (`BEGIN`), where a pooler keeps them."""
PREPARE_THRESHOLD: int | None = 5
"""On a connection of the server's own, psycopg prepares a statement on the server after this
many executions (its default): half as many writes and reads again a second
(benchmarks/postgres_session.py). Never through a pooler, where one client's prepared statement
would meet another's of the same name on a shared server connection."""
BEGIN = (
    f"BEGIN; SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS};"
    f" SET LOCAL idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}"
)
"""A transaction's start and its bounds, in one round trip (one simple query): a pooler in
transaction mode drops the session's `options`, and keeps only what a transaction sets."""
BULK_ROWS = 8
"""Rows from which an insert is sent as arrays of its columns."""
_INSERT_VALUES = re.compile(
    r"INSERT INTO (\w+)\s*\(([^)]*)\)\s*VALUES\s*\((?:%s\s*,\s*)*%s\)(.*)", re.DOTALL
)
"""An insert of one row of placeholders: its table, its columns, and what follows the row."""
_TYPES = (
    (
        re.compile(r"INTEGER PRIMARY KEY AUTOINCREMENT"),
        "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    ),
    (re.compile(r"\bWITHOUT ROWID\b"), ""),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),  # PostgreSQL's REAL is 4 bytes
    (re.compile(r"\bBLOB\b"), "BYTEA"),
)


@functools.lru_cache(maxsize=512)
def to_postgres(sql: str) -> str:
    """A statement of the aggregates' SQLite SQL in PostgreSQL's."""
    text = sql.strip()
    if text.upper().startswith(("CREATE", "ALTER")):
        text = re.sub(r"--[^\n]*", "", text)
        for pattern, replacement in _TYPES:
            text = pattern.sub(replacement, text)
        text = text.strip()
    if text.startswith("INSERT OR IGNORE INTO"):
        text = (
            "INSERT INTO" + text.removeprefix("INSERT OR IGNORE INTO") + " ON CONFLICT DO NOTHING"
        )
    text = re.sub(r"\bIS NOT \?", "IS DISTINCT FROM ?", text)
    text = re.sub(r"\bIS \?", "IS NOT DISTINCT FROM ?", text)
    return text.replace("?", "%s")


def _unreadable(url: str) -> RuntimeError:
    """The error of a store URL PostgreSQL cannot read (never quoting it: a password may be in
    any part)."""
    return RuntimeError(
        f"the store URL {redacted(url)} is not one PostgreSQL reads "
        "(postgresql://[user[:password]@]host[:port]/database[?parameter=value&...])"
    )
