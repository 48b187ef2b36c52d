"""Runs and their trials: runs seen and declared, trials stored while their run has room (first
record wins, repeats counted), late records counted, and runs closed and admitted.

Each writer of a run (a replica) counts its writes, the trials they stored, its news and the
room it holds under the run's trial cap in a part of the run of its own (`run_parts`), so that
the writers of one run never wait for each other's commit: a write to an open run holds the
run's row shared (a close, a claim or an admission waits for it, never another write) and
updates its own part alone. The run's row is written, and held alone, only when a write changes
it (made, claimed, labelled, declared, marked framework, late records) or needs more room than
its part holds. A run's counts are its parts' folded where they are read, and into its row when
it is admitted (its parts then deleted)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ...trial_model import Trial
from .connection import Cursor, SqlRow
from .records import StoredRun, batch_number
from .run_rows import PART_COLUMNS, PARTS, RUN_COLUMNS, fold, stored_run
from .statements import (
    Each,
    Statement,
    sql,
)
from .stored_trials import amend_trial, insert_trials
from .trial_days import day_of
from .trial_rows import TrialBatch

Lease = tuple[str, float]
"""A replica's lease: its name, and until when its heartbeat holds (a write claims new runs, and
runs whose owner's lease lapsed, under it)."""

ROOM_GRANT = 10_000
"""Trials of room under a run's cap a writer's part takes at most at once: its writes store
that many without holding the run's row alone."""

_OWNER_ALIVE = (
    "EXISTS (SELECT 1 FROM replicas WHERE replicas.name = runs.owner AND replicas.alive_until >= ?)"
)


def _with_parts(*more: str) -> Statement:
    """A run (RUN_COLUMNS), `more` of its columns, and its parts in one read: a row a part (one
    with no part for a run without, or admitted: its row holds their counts)."""
    return sql(
        "SELECT "
        + ", ".join(
            [
                *(f"runs.{column.strip()}" for column in RUN_COLUMNS.split(",")),
                *more,
                *(f"run_parts.{column}" for column in PART_COLUMNS.split(", ")),
            ]
        )
        + " FROM runs LEFT JOIN run_parts ON run_parts.run_id = runs.run_id"
        " AND runs.status IS NULL WHERE runs.run_id = ? ORDER BY run_parts.part"
    )


_RUN_WITH_PARTS = _with_parts()
_STATE = _with_parts("runs.day")
"""A run as a write finds it (`_with_parts`), with its day."""
_RUN_WIDTH = len(RUN_COLUMNS.split(","))


def _parts_of(rows: list[SqlRow], more: int = 0) -> list[SqlRow]:
    """The parts (PART_COLUMNS each) in the rows of a `_with_parts` read of `more` columns."""
    at = _RUN_WIDTH + more
    return [row[at:] for row in rows if row[at] is not None]


_NEW_RUN = sql(
    "INSERT INTO runs (run_id, suite, point, first_seen, last_seen, owner, day)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING"
)
"""A run first seen by a write: its day (`day_of`) is the one its trials are stored under."""
_HOLD_SEEN = sql(
    "UPDATE runs SET suite = COALESCE(suite, ?), point = COALESCE(point, ?),"
    f" owner = CASE WHEN final = 0 AND NOT {_OWNER_ALIVE} THEN ? ELSE owner END"
    " WHERE run_id = ? RETURNING final, owner"
)
"""A run a write changes, held alone: labelled where it had none, and claimed by the writing
replica when its owner is not alive (its heartbeat lapsed)."""
_HOLD = sql("SELECT final, owner FROM runs WHERE run_id = ?", Each("", " FOR UPDATE"))
_ADVANCE = sql(
    "WITH held AS (SELECT owner FROM runs WHERE run_id = ? AND final = 0"
    " AND (? = 0 OR framework = 1) AND (CAST(? AS TEXT) IS NULL OR suite IS NOT NULL)"
    f" AND (CAST(? AS TEXT) IS NULL OR point IS NOT NULL) AND (? = 0 OR {_OWNER_ALIVE})"
    " AND EXISTS (SELECT 1 FROM run_parts WHERE run_parts.run_id = runs.run_id"
    " AND run_parts.writer = ? AND run_parts.room >= ?)",
    Each("", " FOR SHARE"),
    ") UPDATE run_parts SET writes = writes + 1, last_seen = ?, room = room - ?,"
    " received = received + ?",
    Each("", " FROM held"),
    " WHERE run_parts.run_id = ? AND writer = ? AND room >= ?",
    Each(" AND EXISTS (SELECT 1 FROM held)", ""),
    " RETURNING part, writes, ",
    # SQLite reads `held` again after the update, whose part no longer has the room: the run's row
    Each("(SELECT owner FROM runs WHERE runs.run_id = run_parts.run_id)", "held.owner"),
)
"""A write through the writer's part of a run it only adds to, when it may: the run open, marked
framework if the write marks it, labelled where the write would label it, its owner alive when
the write brings it trials, and the part holding the room the write needs (which it takes). It
counts the trials the write brings as stored (`take` corrects the count when some are not), the
run held shared (its other writers go on, a close or a claim waits, so its owner stays who it is
until the write commits): the part, its writes and the run's owner; nothing when the write must
hold the run alone, and then the run is not held at all (two writes holding it shared would
deadlock, each waiting to hold it alone)."""
_NEW_PART = sql(
    "INSERT INTO run_parts (run_id, writer, last_seen) VALUES (?, ?, ?)"
    " ON CONFLICT (run_id, writer) DO NOTHING"
)
_STORED = sql(
    "SELECT received + CAST(COALESCE((SELECT SUM(received) FROM run_parts"
    " WHERE run_parts.run_id = runs.run_id), 0) AS BIGINT) FROM runs WHERE run_id = ?"
)
"""The trials a run stored, by all its writers."""
_GRANT = sql(
    "UPDATE run_parts SET writes = writes + 1, last_seen = ?, room = ? WHERE part = ?"
    " RETURNING writes"
)
_REVOKE = sql("UPDATE run_parts SET room = 0 WHERE run_id = ? AND part != ? AND room > 0")
_PART_RECEIVED = sql("UPDATE run_parts SET received = received + ?, room = room + ? WHERE part = ?")
"""A write's trials stored through a part, and the room it took but did not fill given back."""
_LATE = sql("UPDATE runs SET late = late + ? WHERE run_id = ?")
_FRAMEWORK = sql("UPDATE runs SET framework = 1 WHERE run_id = ? AND framework = 0")
_CLOSE = sql("UPDATE runs SET final = 1 WHERE run_id = ? AND final = 0 AND owner = ?")
_ADMIT = sql(
    "UPDATE runs SET status = ?, final = 1, finished_at = ?,"
    " declaration = COALESCE(declaration, ?) WHERE run_id = ? AND status IS NULL"
)
_OF_PARTS = "FROM run_parts WHERE run_parts.run_id = runs.run_id"
_FOLD = sql(
    f"UPDATE runs SET received = received + COALESCE((SELECT SUM(received) {_OF_PARTS}), 0),"
    f" version = version + COALESCE((SELECT SUM(writes) {_OF_PARTS}), 0), last_seen = ",
    Each("MAX", "GREATEST"),
    f"(last_seen, COALESCE((SELECT MAX(last_seen) {_OF_PARTS}), last_seen)) WHERE run_id = ?",
)
"""An admitted run's parts folded into its row (its writers held it shared: all committed)."""
_DROP_PARTS = sql("DELETE FROM run_parts WHERE run_id = ?")
_STATUS = sql("SELECT status FROM runs WHERE run_id = ?")


@dataclass(frozen=True)
class Access:
    """How a write holds a run: a final one only counts its records late; an open one stores
    its trials under `batch` and the run's `day`, counted in the writer's `part`. `room`: the
    trials it may store (None: no cap)."""

    final: bool
    batch: int = 0
    part: int = 0
    room: int | None = None
    day: int = 0
    """The run's day: its trials' (`trial_days`)."""
    relayed: bool = True
    """The writer is not the run's owner: its trials are indexed for the owner to read back."""
    claimed: bool = False
    """The write claimed the run (its owner was not alive), or may have (the owner it read
    before holding the run had changed since): the writer takes it up whole."""
    counted: int = 0
    """Trials its part counted as stored already (all the write brings the run, when it only
    adds to it): `take` corrects the count when fewer were."""
    standing: StoredRun | None = None
    """When the write only adds to the run through its part: the run as the write leaves it
    once it has stored all it counted, not read back: read before the write, the writer's part
    as the write advanced it and the owner it holds the run under. Another writer's commit
    since that read is missing from it (its version is lower than the store's, never higher):
    the owner catches up with it at its next write or tick, and an admission reads the
    evidence again whenever the version it closed on is not the store's."""


@dataclass(frozen=True)
class Visit:
    """What one write brings each run, as `Runs.see` holds them: trials (at most `needs`, per
    run), the runs it declares, those whose framework trials it stores or hears of, records
    `late`, and the cap of trials a run holds (`max_trials`, None for none)."""

    needs: dict[str, int]
    declared: frozenset[str]
    marking: frozenset[str]
    late: dict[str, int]
    max_trials: int | None


class Runs:
    """The `runs`, `run_parts` and `trials` tables, on the cursor of the caller's transaction
    or read."""

    def see(
        self,
        cursor: Cursor,
        touched: Iterable[str],
        heard: Iterable[str],
        visit: Visit,
        labels: dict[str, tuple[str | None, str | None]],
        now: float,
        claim: Lease,
    ) -> dict[str, Access]:
        """Hold every run a write changes or adds to, in one pass in one order (so that writers
        never deadlock): the runs its trials or run spans `touched`, seen `now` (a new one made,
        labelled with its (suite, point) when given, and claimed by `claim`; a known one
        labelled where it had none, and claimed when its owner is not alive); the open runs of
        trials still settling that got spans (`heard`); and the runs with records late
        (counted). A run is held shared when the write only adds to it through the writer's
        part (which holds the room it needs), alone otherwise. Each touched run's access, and
        each heard run's while it is open."""
        touched, heard = set(touched), set(heard)
        accesses = {}
        for run_id in sorted(touched | heard | set(visit.late)):
            if run_id in touched or run_id in heard:
                access = self._hold(cursor, run_id, run_id in touched, visit, labels, now, claim)
                if access is not None:
                    accesses[run_id] = access
            if visit.late.get(run_id):
                cursor.execute(_LATE, (visit.late[run_id], run_id))
        return accesses

    def _hold(
        self,
        cursor: Cursor,
        run_id: str,
        seen: bool,
        visit: Visit,
        labels: dict[str, tuple[str | None, str | None]],
        now: float,
        claim: Lease,
    ) -> Access | None:
        """Hold one run for a write (see `see`); its access, or None for a run heard of that is
        unknown or final."""
        writer, capped = claim[0], visit.max_trials is not None
        brings = visit.needs.get(run_id, 0)
        need = brings if capped else 0
        suite, point = labels.get(run_id, (None, None))
        marking = run_id in visit.marking
        read = (_STATE, (run_id,))
        if run_id in visit.declared or visit.late.get(run_id):  # changes the run: held alone
            advanced, rows = [], cursor.execute_all([read])[0]
        else:  # through the writer's part if it may, the run read as the write leaves it
            held = (run_id, int(marking), suite, point, int(seen), now, writer, need)
            advance = (*held, now, need, brings, run_id, writer, need)
            advanced, rows = cursor.execute_all([(_ADVANCE, advance), read])
        if advanced:
            ((part, writes, owner),) = advanced
            return Access(
                False,
                batch_number(part, writes),
                part,
                need if capped else None,
                rows[0][_RUN_WIDTH],
                owner != writer,
                counted=brings,
                standing=replace(fold(stored_run(rows[0]), _parts_of(rows, more=1)), owner=owner),
            )
        if not rows:
            if not seen:
                return None
            day = day_of(now)
            cursor.execute(_NEW_RUN, (run_id, suite, point, now, now, writer, day))
            if cursor.rowcount:  # made by this write, so held alone, and its own
                access = self._settle(cursor, run_id, writer, need, visit.max_trials, now, day)
                return replace(access, relayed=False)
            rows = cursor.execute(_STATE, (run_id,)).fetchall()  # made meanwhile
        read_run, day = stored_run(rows[0]), rows[0][_RUN_WIDTH]
        if seen:
            final, owner = cursor.execute(
                _HOLD_SEEN, (suite, point, now, writer, run_id)
            ).fetchone()
        else:
            final, owner = cursor.execute(_HOLD, (run_id,)).fetchone()
        if final:
            if not seen:
                return None
            room = None
            if visit.max_trials is not None:
                room = max(0, visit.max_trials - cursor.execute(_STORED, (run_id,)).fetchone()[0])
            return Access(True, room=room)
        access = self._settle(cursor, run_id, writer, need, visit.max_trials, now, day)
        return replace(access, relayed=owner != writer, claimed=owner == writer != read_run.owner)

    def _settle(
        self,
        cursor: Cursor,
        run_id: str,
        writer: str,
        need: int,
        cap: int | None,
        now: float,
        day: int,
    ) -> Access:
        """A write through the writer's part of an open run the write holds alone (no other
        writer is in it: every part stands as committed): the part made if new, and given
        the room the write needs if the run has it (taken back from the other parts when only
        they hold it), and half the room no part holds, up to ROOM_GRANT, for its later
        writes (the other half left for other writers' parts)."""
        cursor.execute(_NEW_PART, (run_id, writer, now))
        parts = cursor.execute(PARTS, (run_id,)).fetchall()
        part = next(row[0] for row in parts if row[1] == writer)
        room, keep = None, 0
        if cap is not None:
            (stored,) = cursor.execute(_STORED, (run_id,)).fetchone()
            others = sum(row[4] for row in parts if row[0] != part)
            free = cap - stored - others
            if need > free and others:
                cursor.execute(_REVOKE, (run_id, part))
                free = cap - stored
            room = max(0, min(need, free))
            keep = max(0, min((free - room) // 2, ROOM_GRANT))
        (writes,) = cursor.execute(_GRANT, (now, keep, part)).fetchone()
        return Access(False, batch_number(part, writes), part, room, day)

    def mark_framework(self, cursor: Cursor, run_ids: Iterable[str]) -> None:
        """Note runs whose trials come from framework spans (a late span may amend them), among
        those a write holds (alone, unless marked already)."""
        cursor.executemany(_FRAMEWORK, [(run_id,) for run_id in sorted(run_ids)])

    def take(
        self, cursor: Cursor, batch: TrialBatch, accesses: dict[str, Access]
    ) -> tuple[dict[str, int], dict[str, list[Trial]], dict[str, int]]:
        """Store each run's trials as far as its access has room (a final run's are only
        counted late) under its batch; per run, the trials refused, the trials taken and how
        many were stored. Each part counts the trials stored through it, so no write scans a
        run (the count its access made ahead corrected only when it differs), and gets back
        the room its write took but did not fill."""
        refused: dict[str, int] = {}
        accepted: dict[str, list[Trial]] = {}
        stored: dict[str, int] = {}
        for run_id, rows in batch.rows.items():
            access = accesses[run_id]
            if access.room is not None and len(rows) > access.room:
                refused[run_id] = len(rows) - access.room
                rows = rows[: access.room]
            if access.final:  # its admission is frozen: count, never store
                cursor.execute(_LATE, (len(rows), run_id))
                continue
            accepted[run_id] = batch.given[run_id][: len(rows)]
            stored[run_id] = insert_trials(cursor, rows, access.batch, access.day, access.relayed)
        for run_id, access in sorted(accesses.items()):
            count = stored.get(run_id, 0)
            unused = 0 if access.final or access.room is None else access.room - count
            if count != access.counted or unused:
                cursor.execute(_PART_RECEIVED, (count - access.counted, unused, access.part))
        return refused, accepted, stored

    def amend(
        self, cursor: Cursor, batch: TrialBatch, accesses: dict[str, Access]
    ) -> tuple[dict[str, list[Trial]], list[Trial]]:
        """Replace the stored records of framework trials derived again (a span came after they
        settled) while their run is open, under the batch of the run's access; per run the
        trials replaced, and the trials with no record to replace (to store as new ones)."""
        amended: dict[str, list[Trial]] = {}
        new: list[Trial] = []
        for run_id, rows in batch.rows.items():
            access = accesses[run_id]
            if access.final:
                cursor.execute(_LATE, (len(rows), run_id))
                continue
            for row, trial in zip(rows, batch.given[run_id], strict=True):
                if amend_trial(cursor, row, access.batch, access.relayed):
                    amended.setdefault(run_id, []).append(trial)
                else:
                    new.append(trial)
        return amended, new

    def run(self, cursor: Cursor, run_id: str) -> StoredRun | None:
        """One run, or None when unknown (one read, its parts with it)."""
        rows = cursor.execute(_RUN_WITH_PARTS, (run_id,)).fetchall()
        if not rows:
            return None
        return fold(stored_run(rows[0]), _parts_of(rows))

    def written(
        self, cursor: Cursor, accesses: dict[str, Access], stored: dict[str, int]
    ) -> list[StoredRun]:
        """The runs a write held, after it (in the order of `accesses`): one it only added to
        and that stored all it counted (`stored`, from `take`) as `Access.standing` says, the
        others read back."""
        runs = []
        for run_id, access in accesses.items():
            if access.standing is not None and stored.get(run_id, 0) == access.counted:
                runs.append(access.standing)
            elif (run := self.run(cursor, run_id)) is not None:
                runs.append(run)
        return runs

    def close(self, cursor: Cursor, run_ids: Iterable[str], owner: str) -> list[str]:
        """Make final the runs `owner` holds, their admission still to be made; those made so
        (a run another replica took over is not). Each waits for the writes holding it."""
        closed = []
        for run_id in sorted(run_ids):  # in the order every writer locks runs
            cursor.execute(_CLOSE, (run_id, owner))
            if cursor.rowcount:
                closed.append(run_id)
        return closed

    def admit(
        self,
        cursor: Cursor,
        run_id: str,
        status: str,
        finished_at: float,
        declaration: str | None,
    ) -> bool:
        """Give a run its admission, final, its parts folded into its row; False (nothing
        written) when it has one already. A run without a run span keeps `declaration` as what
        it was judged by."""
        cursor.execute(_ADMIT, (status, finished_at, declaration, run_id))
        if cursor.rowcount != 1:
            return False
        cursor.execute(_FOLD, (run_id,))
        cursor.execute(_DROP_PARTS, (run_id,))
        return True

    def awaits_admission(self, cursor: Cursor, run_id: str) -> bool:
        """Whether a run is known and not admitted yet."""
        cursor.execute(_STATUS, (run_id,))
        row = cursor.fetchone()
        return row is not None and row[0] is None
