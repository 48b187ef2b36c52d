"""The store's one SQLite connection: made owner-only, in WAL mode, used under one lock, and
written in `BEGIN IMMEDIATE ... COMMIT` transactions (rolled back on error)."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SqlRow = tuple[Any, ...]  # boundary: sqlite3, a row as it returns it (its columns' values)

CACHE_KIB = 65536
"""SQLite's page cache (64 MiB, against its 2 MiB default): inserts into a large trials table
then rarely read pages back from disk."""


class Database:
    """One SQLite connection shared by threads: every use of it holds `lock`."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        if str(path) != ":memory:" and not Path(path).exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # trial data: owner only
        self._connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.lock = threading.Lock()
        with self.lock:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes
            self._connection.execute(f"PRAGMA cache_size=-{CACHE_KIB}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """A cursor in `BEGIN IMMEDIATE`, under the lock: committed when the block ends (however
        it returns), rolled back when it or the commit raises, so no transaction stays open."""
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
    def locked(self) -> Iterator[sqlite3.Cursor]:
        """A cursor under the lock, outside any explicit transaction: each statement reads, or
        commits, on its own."""
        with self.lock:
            yield self._connection.cursor()

    def close(self) -> None:
        """Close the connection (after any use in progress)."""
        with self.lock:
            self._connection.close()
