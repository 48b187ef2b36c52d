"""Whether a store answers, asked within a deadline whatever the store does: a round trip on a
connection of the probe's own (never the store's, which a long write may hold), run on a
thread of its own that the asker waits for until the deadline, one at a time, its answer
reused for a moment so that a flood of probes costs one round trip."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .faults import is_driver_error
from .locations import is_postgres_url

logger = logging.getLogger(__name__)

DEADLINE = 0.5
"""Seconds a round trip may take to count as an answer (and an asker waits at most)."""
FRESH = 1.0
"""Seconds an answer is reused before the store is asked again."""
CONNECT_TIMEOUT = 2
"""Seconds a probe's PostgreSQL connection may take to be made (libpq's least): a server that
accepts the connection but answers nothing (frozen) ends the attempt then."""


@dataclass
class _Attempt:
    """One round trip under way, or done."""

    started: float
    done: threading.Event = field(default_factory=threading.Event)
    answered: bool = False
    finished: float = 0.0


class StoreProbe:
    """Asks `round_trip` (which raises when the store does not answer) on a thread of its own
    and answers within DEADLINE seconds: True when the store answered within DEADLINE of the
    asking. An attempt still under way is waited for, never doubled, and once it has taken
    longer than DEADLINE the answer is False at once; an answer is reused for FRESH seconds.
    `clock` (seconds) times it."""

    def __init__(
        self,
        round_trip: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        deadline: float = DEADLINE,
        fresh: float = FRESH,
    ) -> None:
        self._round_trip = round_trip
        self._clock = clock
        self._deadline = deadline
        self._fresh = fresh
        self._lock = threading.Lock()
        self._last: _Attempt | None = None

    def answers(self) -> bool:
        """Whether the store answered a round trip within the deadline (now, or less than FRESH
        seconds ago); returns within about DEADLINE seconds whatever the store does."""
        with self._lock:
            now = self._clock()
            attempt = self._last
            if attempt is None or (attempt.done.is_set() and now - attempt.finished >= self._fresh):
                attempt = self._last = _Attempt(now)
                threading.Thread(
                    target=self._ask, args=(attempt,), name="verdictgate-probe", daemon=True
                ).start()
        attempt.done.wait(max(0.0, attempt.started + self._deadline - self._clock()))
        return attempt.done.is_set() and attempt.answered

    def _ask(self, attempt: _Attempt) -> None:
        """One round trip: an answer only if it came within the deadline."""
        answered = False
        try:
            self._round_trip()
            answered = True
        except Exception as error:
            if not is_driver_error(error):
                logger.warning("verdictgate: the store's probe failed", exc_info=True)
        attempt.finished = self._clock()
        attempt.answered = answered and attempt.finished - attempt.started <= self._deadline
        attempt.done.set()


def round_trip_to(location: str | Path) -> Callable[[], None]:
    """A round trip to the store at `location` on a connection of its own: a PostgreSQL
    server's `SELECT 1` (connecting within CONNECT_TIMEOUT, to a server that takes writes, as
    the store's connection does), a SQLite file's schema read; nothing for `:memory:`, which
    lives in this process."""
    if is_postgres_url(location):
        return _postgres_round_trip(str(location))
    if str(location) == ":memory:":
        return lambda: None
    uri = Path(location).resolve().as_uri() + "?mode=ro"

    def read_schema() -> None:
        connection = sqlite3.connect(uri, uri=True, timeout=DEADLINE)
        try:
            connection.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        finally:
            connection.close()

    return read_schema


def _postgres_round_trip(url: str) -> Callable[[], None]:
    import psycopg

    given = psycopg.conninfo.conninfo_to_dict(url)
    settings = {
        "target_session_attrs": "read-write",
        "application_name": "verdictgate-probe",
        "tcp_user_timeout": "5000",  # data a vanished server never acknowledges
    }
    conninfo = psycopg.conninfo.make_conninfo(
        url,
        connect_timeout=str(CONNECT_TIMEOUT),
        **{key: value for key, value in settings.items() if key not in given},
    )

    def select_one() -> None:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute("SELECT 1").fetchone()

    return select_one
