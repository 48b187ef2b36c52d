"""A PostgreSQL store's trials partitioned by day: each run's trials in the partition of the day
it was first seen (`runs.day`, carried in each trial row and its primary key), partitions made
before a write needs them, a version-2 table kept in place as the partition of the days before
(never rewritten), and retention that drops a whole day, with its runs, once every run first
seen in it was admitted before the cutoff, one replica at a time. A SQLite store keeps one
table and deletes rows (`RunListing.forget_finished`: one file, one writer)."""

from __future__ import annotations

import logging
import math
import re
import threading

from .connection import Cursor, Database
from .faults import is_lock_not_had
from .statements import Index, Statement, sql

logger = logging.getLogger(__name__)

SECONDS_A_DAY = 86400.0
DAYS_AHEAD = 1
"""Days after the current one whose partitions are made with it: a write at midnight finds its
day made by the first write of the day before."""
BEFORE = "trials_before"
"""The partition of every day before the store was partitioned: a version-2 store's rows (their
runs' day is 0), and nothing in a store made partitioned."""
PARTITION_LOCK = 0x76676474
"""The advisory lock under which replicas make and drop partitions, one at a time."""
DROP_WAIT_MS = 500
"""How long dropping a day waits for the trials table's lock (writes queue behind it meanwhile):
past it, the day is left for the next retention round."""
_FAR_PAST = -(2**62)
"""The first day of `trials_before` (its range starts at MINVALUE)."""

_TODAY = Statement.of("SELECT CAST(floor(EXTRACT(EPOCH FROM clock_timestamp()) / 86400) AS BIGINT)")
_PARTITIONED = Statement.of("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass('trials')")
_PARTITIONS = Statement.of(
    "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
    " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass('trials')"
)
_WAIT_LOCK = Statement.of(f"SELECT pg_advisory_xact_lock({PARTITION_LOCK})")
_TRY_LOCK = Statement.of(f"SELECT pg_try_advisory_xact_lock({PARTITION_LOCK})")
_SHORT_WAIT = Statement.of(f"SET LOCAL lock_timeout = {DROP_WAIT_MS}")
_UNFINISHED = sql(
    "SELECT 1 FROM runs WHERE day >= ? AND day < ?"
    " AND (status IS NULL OR finished_at IS NULL OR finished_at >= ?) LIMIT 1"
)
"""A run of the days given not admitted before the cutoff: it keeps its day."""
_FORGET_RUNS = sql("DELETE FROM runs WHERE day >= ? AND day < ?")
_BOUND = re.compile(r"FROM \('?(MINVALUE|-?\d+)'?\) TO \('?(-?\d+)'?\)")


def day_of(time: float) -> int:
    """The day (since the epoch) a time (epoch seconds) falls in: the partition of the trials of
    a run first seen then."""
    return math.floor(time / SECONDS_A_DAY)


def partition_new(cursor: Cursor) -> None:
    """Give a `trials` table just made partitioned (in the transaction that made it) the
    partition of the days before today."""
    (today,) = cursor.execute(_TODAY).fetchone()
    cursor.execute(
        Statement.of(
            f"CREATE TABLE {BEFORE} PARTITION OF trials FOR VALUES FROM (MINVALUE) TO ({today})"
        )
    )


def partition_existing(
    database: Database, table: Statement, indexes: tuple[Index, ...]
) -> str | None:
    """Partition a version-2 `trials` table (its rows' `day` is 0) without rewriting it or
    blocking its writers for long: a constraint that its days come before today, validated
    while writes go on, and its key with `day`, built concurrently; then, in one transaction
    that locks the table for an instant, it is renamed `trials_before` (its `indexes` too) and
    attached to a new partitioned `trials` (made by `table`, with `indexes`) as the partition
    of the days before today (the constraint spares a scan; its indexes are taken for the new
    table's). What was done, or None for a table partitioned already."""
    with database.locked() as cursor:
        row = cursor.execute(_PARTITIONED).fetchone()
        if row is None or row[0]:
            return None
        (today,) = cursor.execute(_TODAY).fetchone()
        present = database.indexes(cursor)
    _run(
        database,
        "ALTER TABLE trials DROP CONSTRAINT IF EXISTS trials_before_days",
        f"ALTER TABLE trials ADD CONSTRAINT trials_before_days CHECK (day < {today}) NOT VALID",
    )
    _run(database, "ALTER TABLE trials VALIDATE CONSTRAINT trials_before_days")
    if "trials_before_key" not in present:
        database.build_index(_BEFORE_KEY)
    logger.warning(
        "migrating the store: partitioning trials by day locks it for an instant (its rows kept"
        " in place as %s)",
        BEFORE,
    )
    _run(
        database,
        f"ALTER TABLE trials RENAME TO {BEFORE}",
        *(f"ALTER INDEX IF EXISTS {made.name} RENAME TO {BEFORE}_{made.name}" for made in indexes),
        f"ALTER TABLE {BEFORE} DROP CONSTRAINT trials_pkey",
        f"ALTER TABLE {BEFORE} ADD CONSTRAINT {BEFORE}_pkey PRIMARY KEY USING INDEX"
        " trials_before_key",
        table,
        *(made.create for made in indexes),
        f"ALTER TABLE trials ATTACH PARTITION {BEFORE} FOR VALUES FROM (MINVALUE) TO ({today})",
    )
    return f"trials partitioned by day, its rows kept in place as {BEFORE} (locked an instant)"


_BEFORE_KEY = Index(
    "trials",
    "trials_before_key",
    Statement.of("CREATE UNIQUE INDEX trials_before_key ON trials (run_id, case_id, trial, day)"),
    Statement.of(
        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS trials_before_key"
        " ON trials (run_id, case_id, trial, day)"
    ),
)
"""A version-2 table's key with `day`, as the partitioned table's primary key needs it."""


def build_index(database: Database, index: Index) -> None:
    """Build an index of `trials` on a store in use without blocking its writers: on a
    partitioned table, the table's own index made first (`ON ONLY`: it covers no partition
    yet, and a partition made meanwhile gets its own as it is attached), then each
    partition's built `CONCURRENTLY` and attached to it, after which it is valid; on a table
    not partitioned, as `Database.build_index` builds any."""
    with database.locked() as cursor:
        row = cursor.execute(_PARTITIONED).fetchone()
    if row is None or not row[0]:
        database.build_index(index)
        return
    _run(database, f"CREATE INDEX IF NOT EXISTS {index.name} ON ONLY trials {index.definition}")
    with database.locked() as cursor:
        lacking = [name for (name,) in cursor.execute(_UNINDEXED, (index.name,)).fetchall()]
    for partition in lacking:
        name = f"{partition}_{index.name}"
        on = f" {name} ON {partition} {index.definition}"
        try:
            database.build_index(
                Index(
                    partition,
                    name,
                    Statement.of(f"CREATE INDEX IF NOT EXISTS{on}"),
                    Statement.of(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS{on}"),
                )
            )
            _run(database, f"ALTER INDEX {index.name} ATTACH PARTITION {name}")
        except Exception as error:
            if getattr(error, "sqlstate", None) != _UNDEFINED_TABLE:
                raise  # a day another replica's retention dropped meanwhile needs no index


_UNDEFINED_TABLE = "42P01"
_UNINDEXED = Statement.of(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
    " WHERE i.inhparent = to_regclass('trials') AND NOT EXISTS (SELECT 1 FROM pg_inherits p"
    " JOIN pg_index x ON x.indexrelid = p.inhrelid"
    " WHERE p.inhparent = to_regclass(?) AND x.indrelid = c.oid) ORDER BY c.relname"
)
"""The partitions of `trials` that have no index attached to the partitioned index named."""


def _run(database: Database, *statements: str | Statement) -> None:
    """Run statements in one transaction of their own."""
    with database.transaction() as cursor:
        for statement in statements:
            cursor.execute(
                statement if isinstance(statement, Statement) else Statement.of(statement)
            )


class TrialDays:
    """The days a PostgreSQL store's `trials` has partitions for, as this replica last read them:
    a write makes its day's and the next one's first when either is not known here
    (`cover`), and retention drops whole days (`forget_finished`)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._lock = threading.Lock()
        self._before = _FAR_PAST
        """Every day before it is in `trials_before`."""
        self._made: set[int] = set()

    def cover(self, now: float) -> None:
        """Make sure the partitions of the day `now` falls in and of the next DAYS_AHEAD exist
        (a run first seen now has its trials stored there): read, and made when missing, in a
        transaction of their own under the advisory lock, when this replica does not know them
        yet (once a day, or after a restart); otherwise nothing is asked of the store."""
        days = range(day_of(now), day_of(now) + DAYS_AHEAD + 1)
        with self._lock:
            if all(day < self._before or day in self._made for day in days):
                return
            with self._database.transaction() as cursor:
                cursor.execute(_WAIT_LOCK)
                self._read(cursor)
                for day in days:
                    if day >= self._before and day not in self._made:
                        _make(cursor, day)
            self._made.update(day for day in days if day >= self._before)

    def forget_finished(self, before: float) -> int:
        """Drop each day that ended before `before` (epoch seconds) whose runs were all admitted
        before it, with those runs, oldest first, each in a transaction of its own; how many
        runs. A run still open, or admitted since, keeps its whole day (its neighbours
        included). One replica at a time: while another one drops days, this one drops none;
        a day whose drop would wait past DROP_WAIT_MS for the table's lock is left for the next
        round."""
        with self._database.locked() as cursor:
            partitions = _partitions(cursor)
        forgotten = 0
        for name, first, end in sorted(partitions, key=lambda partition: partition[2]):
            if end * SECONDS_A_DAY > before:
                break
            try:
                with self._database.transaction() as cursor:
                    if not cursor.execute(_TRY_LOCK).fetchone()[0]:
                        return forgotten  # another replica drops days meanwhile
                    dropped = _drop(cursor, name, first, end, before)
            except Exception as error:
                if not is_lock_not_had(error):
                    raise
                logger.info("verdictgate: dropping %s waited too long for its lock", name)
                return forgotten
            if dropped is not None:
                forgotten += dropped
                with self._lock:
                    if name == BEFORE:
                        self._before = _FAR_PAST
                    else:
                        self._made.difference_update(range(first, end))
        return forgotten

    def _read(self, cursor: Cursor) -> None:
        """Read the partitions the store has now."""
        self._before, self._made = _FAR_PAST, set()
        for name, first, end in _partitions(cursor):
            if name == BEFORE:
                self._before = end
            else:
                self._made.update(range(first, end))


def _partitions(cursor: Cursor) -> list[tuple[str, int, int]]:
    """The partitions of `trials`: each one's name and its days, first and end (excluded)."""
    partitions = []
    for name, bound in cursor.execute(_PARTITIONS).fetchall():
        if bound is None:  # being detached by another replica's transaction: gone for this one
            continue
        found = _BOUND.search(bound)
        if found is not None:
            first, end = found.groups()
            partitions.append((name, _FAR_PAST if first == "MINVALUE" else int(first), int(end)))
    return partitions


def _make(cursor: Cursor, day: int) -> None:
    """Make a day's partition: a table like `trials`, attached (which locks the new table, not
    the trials other writes use)."""
    name = f"trials_d{day}"
    cursor.execute(Statement.of(f"CREATE TABLE {name} (LIKE trials INCLUDING DEFAULTS)"))
    cursor.execute(
        Statement.of(
            f"ALTER TABLE trials ATTACH PARTITION {name} FOR VALUES FROM ({day}) TO ({day + 1})"
        )
    )


def _drop(cursor: Cursor, name: str, first: int, end: int, before: float) -> int | None:
    """Drop one partition whose runs were all admitted before `before`, with those runs; how
    many runs; None (nothing dropped) when one of them was not, or another replica dropped it
    since this one looked."""
    if name not in {partition for partition, _, _ in _partitions(cursor)}:
        return None
    if cursor.execute(_UNFINISHED, (first, end, before)).fetchone() is not None:
        return None
    forgotten = cursor.execute(_FORGET_RUNS, (first, end)).rowcount
    cursor.execute(_SHORT_WAIT)
    cursor.execute(Statement.of(f"ALTER TABLE trials DETACH PARTITION {name}"))
    cursor.execute(Statement.of(f"DROP TABLE {name}"))
    return forgotten
