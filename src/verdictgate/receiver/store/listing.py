"""Listing runs (all, by page, the newest, the open ones, the latest finished per suite and a
suite's inconclusive streak) and a SQLite store's retention (deleting the rows of runs finished
long ago)."""

from __future__ import annotations

import base64
import json

from .connection import Cursor
from .records import StoredRun
from .run_rows import RUN_COLUMNS, runs_where, select_runs, stored_run
from .statements import Statement, sql

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
"""Runs in one page of `/v1/runs` and ListRuns: by default, and at most."""

_ALL = runs_where("ORDER BY first_seen, run_id")
_FIRST_PAGE = runs_where("ORDER BY first_seen, run_id LIMIT ?")
_NEXT_PAGE = runs_where("WHERE (first_seen, run_id) > (?, ?) ORDER BY first_seen, run_id LIMIT ?")


def _newest(conditions: tuple[str, ...]) -> Statement:
    """The statement of the newest runs that meet the conditions (any run, for none)."""
    where = f"WHERE {' AND '.join(conditions)} " if conditions else ""
    return runs_where(f"{where}ORDER BY first_seen DESC, run_id DESC LIMIT ?")


_STATUSES = {None: (), "in_progress": ("final = 0",), "status": ("final = 1 AND status = ?",)}
"""What `newest` asks of a run's status: anything, not final, or final with the one given."""
_NEWEST = {
    (of_suite, status): _newest(("suite = ?",) * of_suite + conditions)
    for of_suite in (False, True)
    for status, conditions in _STATUSES.items()
}
_LATEST_FINISHED = sql(
    f"SELECT {RUN_COLUMNS}, finished_at FROM (SELECT {RUN_COLUMNS}, finished_at,"
    " ROW_NUMBER() OVER (PARTITION BY suite, point ORDER BY finished_at DESC) AS newest"
    " FROM runs WHERE final = 1 AND finished_at IS NOT NULL) AS finished"
    " WHERE newest = 1 ORDER BY finished_at DESC"
)
_FINISHED_SINCE = sql(
    f"SELECT {RUN_COLUMNS}, finished_at FROM runs WHERE final = 1 AND finished_at >= ?"
    " AND (finished_at > ? OR run_id > ?) AND status IS NOT NULL"
    " ORDER BY finished_at, run_id LIMIT ?"
)
_STREAK = {  # `=` where a value is given: an index condition for either store
    (no_suite, no_point): sql(
        "SELECT status FROM runs WHERE final = 1"
        f" AND {'suite IS NULL' if no_suite else 'suite = ?'}"
        f" AND {'point IS NULL' if no_point else 'point = ?'}"
        " ORDER BY finished_at DESC LIMIT ?"
    )
    for no_suite in (False, True)
    for no_point in (False, True)
}
"""The statuses of a suite's finished runs, newest first, by whether its suite and point are
NULL."""
_FINISHED_BEFORE = sql(
    "SELECT run_id FROM runs WHERE final = 1 AND finished_at < ? ORDER BY finished_at LIMIT ?"
)
_DELETE_TRIALS = sql("DELETE FROM trials WHERE run_id = ?")
_DELETE_RUN = sql("DELETE FROM runs WHERE run_id = ?")


class RunListing:
    """Reads of the `runs` table through its indexes, and the deletion of finished runs."""

    def runs(self, cursor: Cursor) -> list[StoredRun]:
        """Every run, oldest first."""
        return select_runs(cursor, _ALL)

    def page(
        self, cursor: Cursor, token: str = "", size: int = DEFAULT_PAGE_SIZE
    ) -> tuple[list[StoredRun], str]:
        """One page of runs, oldest first, and the token of the next page ("" after the last).
        Reads only the page, through the listing index; a token that is not one of ours raises
        ValueError."""
        size = min(max(size, 1), MAX_PAGE_SIZE) if size else DEFAULT_PAGE_SIZE
        if token:
            runs = select_runs(cursor, _NEXT_PAGE, (*_position(token), size + 1))
        else:
            runs = select_runs(cursor, _FIRST_PAGE, (size + 1,))
        if len(runs) <= size:
            return runs, ""
        last = runs[size - 1]
        return runs[:size], _token((last.first_seen, last.run_id))

    def newest(
        self, cursor: Cursor, limit: int, suite: str | None, status: str | None
    ) -> list[StoredRun]:
        """The newest runs first, at most `limit`, of a suite and with a status when given
        (`in_progress` for runs not yet final); read backwards through the listing index."""
        kind = status if status in (None, "in_progress") else "status"
        given = (suite, status if kind == "status" else None)
        parameters = tuple(value for value in given if value is not None)
        statement = _NEWEST[suite is not None, kind]
        return select_runs(cursor, statement, (*parameters, limit))

    def latest_finished(self, cursor: Cursor) -> list[tuple[StoredRun, float]]:
        """The run each (suite, point) finished last, with when, the most recent first (through
        an index of finished runs by suite)."""
        rows = cursor.execute(_LATEST_FINISHED).fetchall()
        return [(stored_run(row[:-1]), row[-1]) for row in rows]

    def finished_since(
        self, cursor: Cursor, after: float, after_run: str, limit: int
    ) -> list[tuple[StoredRun, float]]:
        """The runs admitted after the position (`after`, epoch seconds; `after_run`, the run
        id at that time), with when, the oldest first, at most `limit` (through the index of
        finished runs by age: pass the last one's position to read the next page)."""
        rows = cursor.execute(_FINISHED_SINCE, (after, after, after_run, limit)).fetchall()
        return [(stored_run(row[:-1]), row[-1]) for row in rows]

    def inconclusive_streak(
        self, cursor: Cursor, suite: str | None, point: str | None, most: int
    ) -> int:
        """How many of the suite's latest finished runs in a row were inconclusive (at most
        `most`; read newest first through the index of finished runs by suite)."""
        given = tuple(value for value in (suite, point) if value is not None)
        statement = _STREAK[suite is None, point is None]
        rows = cursor.execute(statement, (*given, most)).fetchall()
        return next((n for n, (status,) in enumerate(rows) if status != "inconclusive"), len(rows))

    def forget_finished(self, cursor: Cursor, before: float, limit: int) -> int:
        """Delete up to `limit` runs finished before `before` (epoch seconds), with their
        trials' rows; how many (a SQLite store's retention: a PostgreSQL one drops whole days,
        `TrialDays`)."""
        cursor.execute(_FINISHED_BEFORE, (before, limit))
        doomed = [(run_id,) for (run_id,) in cursor.fetchall()]
        cursor.executemany(_DELETE_TRIALS, doomed)
        cursor.executemany(_DELETE_RUN, doomed)
        return len(doomed)


def _token(position: tuple[float, str]) -> str:
    """A page token: the listing position (first_seen, run_id) of a page's last run."""
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode()


def _position(token: str) -> tuple[float, str]:
    """The listing position a page token holds; ValueError when it is not one of ours."""
    try:
        first_seen, run_id = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError, UnicodeError):
        raise ValueError("page_token is not one this receiver gave") from None
    if not isinstance(first_seen, (int, float)) or not isinstance(run_id, str):
        raise ValueError("page_token is not one this receiver gave")
    return float(first_seen), run_id
