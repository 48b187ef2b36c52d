"""The store's one connection: used under one lock and written in transactions (committed
when the block ends, rolled back on error), to a SQLite file (here) or a PostgreSQL database
(`postgres`). A PostgreSQL store is `shared`: other replicas write to it too, so what this
process counts is an estimate that is read again from the tables when it matters."""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from .locations import is_postgres_url

SqlRow = tuple[Any, ...]  # boundary: a driver's row as it returns it (its columns' values)
Parameters = Sequence[object]

CACHE_KIB = 65536
"""SQLite's page cache (64 MiB, against its 2 MiB default): inserts into a large trials table
then rarely read pages back from disk."""


class Cursor(Protocol):
    """What the aggregates use of a cursor (sqlite3's, or a translating PostgreSQL one)."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: str, parameters: Parameters = (), /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Parameters], /) -> Cursor: ...

    def fetchone(self) -> Any: ...  # boundary: a row, or None

    def fetchall(self) -> list[Any]: ...  # boundary: rows


class Database(ABC):
    """One connection shared by threads: every use of it holds `lock`."""

    shared = False
    """Whether other processes write the same tables (then counts kept here are estimates)."""
    for_update_skip_locked = ""
    """What a claiming `SELECT` ends with, so that replicas claim different rows."""
    for_update = ""
    """What a `SELECT` of a row a transaction goes on to change ends with, to hold it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Cursor]:
        """A cursor in a write transaction, under the lock: committed when the block ends
        (however it returns), rolled back when it or the commit raises."""

    @abstractmethod
    def locked(self) -> AbstractContextManager[Cursor]:
        """A cursor under the lock, outside any explicit transaction: each statement reads, or
        commits, on its own."""

    @abstractmethod
    def ping(self) -> None:
        """One round trip to the store (the lock is held); the driver's error if it fails."""

    @abstractmethod
    def now(self) -> float:
        """The store's time, epoch seconds: the server's clock for a shared store, what replicas
        compare their leases and deadlines on (this process's wall clock for a file)."""

    @abstractmethod
    def migrating(self) -> AbstractContextManager[None]:
        """Held while this process migrates the schema: processes migrate one at a time (a
        process waiting for it holds nothing another one's migration waits for)."""

    @abstractmethod
    def tables(self, cursor: Cursor) -> set[str]:
        """The tables the store has."""

    @abstractmethod
    def columns(self, cursor: Cursor, table: str) -> set[str]:
        """The columns a table has."""

    @abstractmethod
    def indexes(self, cursor: Cursor) -> set[str]:
        """The indexes the store has that are ready for use."""

    @abstractmethod
    def build_index(self, name: str, statement: str) -> None:
        """Build an index (`CREATE INDEX IF NOT EXISTS name ON ...`) on a table in use,
        outside any transaction, without blocking its writers where the database can."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection (after any use in progress)."""


class SqliteDatabase(Database):
    """A SQLite file (made owner-only) in WAL mode, or `:memory:`; written in `BEGIN IMMEDIATE`."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        super().__init__()
        if str(path) != ":memory:" and not Path(path).exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # trial data: owner only
        self._connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        with self.lock:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes
            self._connection.execute(f"PRAGMA cache_size=-{CACHE_KIB}")

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        with self.lock:
            cursor = self._connection.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            try:
                yield cursor
                cursor.execute("COMMIT")
            except BaseException:
                if self._connection.in_transaction:  # a failed COMMIT leaves it open
                    cursor.execute("ROLLBACK")
                raise

    @contextmanager
    def locked(self) -> Iterator[Cursor]:
        with self.lock:
            yield self._connection.cursor()

    def ping(self) -> None:
        self._connection.execute("SELECT 1").fetchone()

    def now(self) -> float:
        return time.time()

    def tables(self, cursor: Cursor) -> set[str]:
        rows = cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {name for (name,) in rows}

    def columns(self, cursor: Cursor, table: str) -> set[str]:
        return {row[1] for row in cursor.execute(f"PRAGMA table_info({table})").fetchall()}

    def indexes(self, cursor: Cursor) -> set[str]:
        rows = cursor.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
        return {name for (name,) in rows}

    def build_index(self, name: str, statement: str) -> None:
        """SQLite builds it holding the file's write lock (one writer at a time in any case)."""
        with self.locked() as cursor:
            cursor.execute(statement)

    @contextmanager
    def migrating(self) -> Iterator[None]:
        """Nothing to hold: a migration's transaction takes the file's write lock, and the
        indexes it builds after are created only if they still do not exist."""
        yield

    def close(self) -> None:
        with self.lock:
            self._connection.close()


def open_database(location: str | Path = ":memory:") -> Database:
    """The database a store location names: a PostgreSQL URL, or a SQLite file (`:memory:`).
    libpq's other form (`host=db dbname=vg`) is refused, rather than taken for a file name."""
    if is_postgres_url(location):
        from .postgres import PostgresDatabase  # the driver is loaded only for such a store

        return PostgresDatabase(str(location))
    if re.match(r"\w+=\S*(\s+\w+=\S*)*\s*$", str(location)):
        raise RuntimeError(
            "a PostgreSQL store is named by a URL: postgresql://user@host:port/database"
        )
    return SqliteDatabase(location)
