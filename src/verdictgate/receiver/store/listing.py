"""Listing runs (all, by page, the newest, the open ones, the latest finished per suite and a
suite's inconclusive streak) and retention (forgetting runs finished long ago)."""

from __future__ import annotations

import base64
import json

from .connection import Cursor
from .records import StoredRun
from .runs import RUN_COLUMNS, select_runs, stored_run

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
"""Runs in one page of `/v1/runs` and ListRuns: by default, and at most."""


class RunListing:
    """Reads of the `runs` table through its indexes, and the deletion of finished runs."""

    def runs(self, cursor: Cursor) -> list[StoredRun]:
        """Every run, oldest first."""
        return select_runs(cursor, "ORDER BY first_seen, run_id")

    def page(
        self, cursor: Cursor, token: str = "", size: int = DEFAULT_PAGE_SIZE
    ) -> tuple[list[StoredRun], str]:
        """One page of runs, oldest first, and the token of the next page ("" after the last).
        Reads only the page, through the listing index; a token that is not one of ours raises
        ValueError."""
        size = min(max(size, 1), MAX_PAGE_SIZE) if size else DEFAULT_PAGE_SIZE
        parameters: tuple[float, str] | tuple[()] = _position(token) if token else ()
        where = "WHERE (first_seen, run_id) > (?, ?)" if token else ""
        runs = select_runs(
            cursor, f"{where} ORDER BY first_seen, run_id LIMIT ?", (*parameters, size + 1)
        )
        if len(runs) <= size:
            return runs, ""
        last = runs[size - 1]
        return runs[:size], _token((last.first_seen, last.run_id))

    def newest(
        self, cursor: Cursor, limit: int, suite: str | None, status: str | None
    ) -> list[StoredRun]:
        """The newest runs first, at most `limit`, of a suite and with a status when given
        (`in_progress` for runs not yet final); read backwards through the listing index."""
        clauses, parameters = [], []
        if suite is not None:
            clauses.append("suite = ?")
            parameters.append(suite)
        if status == "in_progress":
            clauses.append("final = 0")
        elif status is not None:
            clauses.append("final = 1 AND status = ?")
            parameters.append(status)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return select_runs(
            cursor, f"{where} ORDER BY first_seen DESC, run_id DESC LIMIT ?", (*parameters, limit)
        )

    def latest_finished(self, cursor: Cursor) -> list[tuple[StoredRun, float]]:
        """The run each (suite, point) finished last, with when, the most recent first (through
        an index of finished runs by suite)."""
        rows = cursor.execute(
            f"SELECT {RUN_COLUMNS}, finished_at FROM (SELECT {RUN_COLUMNS}, finished_at,"
            " ROW_NUMBER() OVER (PARTITION BY suite, point ORDER BY finished_at DESC) AS newest"
            " FROM runs WHERE final = 1 AND finished_at IS NOT NULL) AS finished"
            " WHERE newest = 1 ORDER BY finished_at DESC"
        ).fetchall()
        return [(stored_run(row[:-1]), row[-1]) for row in rows]

    def finished_since(
        self, cursor: Cursor, after: float, after_run: str, limit: int
    ) -> list[tuple[StoredRun, float]]:
        """The runs admitted after the position (`after`, epoch seconds; `after_run`, the run
        id at that time), with when, the oldest first, at most `limit` (through the index of
        finished runs by age: pass the last one's position to read the next page)."""
        rows = cursor.execute(
            f"SELECT {RUN_COLUMNS}, finished_at FROM runs WHERE final = 1 AND finished_at >= ?"
            " AND (finished_at > ? OR run_id > ?) AND status IS NOT NULL"
            " ORDER BY finished_at, run_id LIMIT ?",
            (after, after, after_run, limit),
        ).fetchall()
        return [(stored_run(row[:-1]), row[-1]) for row in rows]

    def inconclusive_streak(
        self, cursor: Cursor, suite: str | None, point: str | None, most: int
    ) -> int:
        """How many of the suite's latest finished runs in a row were inconclusive (at most
        `most`; read newest first through the index of finished runs by suite)."""
        same = [  # `=` where a value is given: an index condition for either store
            "suite IS NULL" if suite is None else "suite = ?",
            "point IS NULL" if point is None else "point = ?",
        ]
        given = tuple(value for value in (suite, point) if value is not None)
        rows = cursor.execute(
            f"SELECT status FROM runs WHERE final = 1 AND {' AND '.join(same)}"
            " ORDER BY finished_at DESC LIMIT ?",
            (*given, most),
        ).fetchall()
        return next((n for n, (status,) in enumerate(rows) if status != "inconclusive"), len(rows))

    def forget_finished(self, cursor: Cursor, before: float, limit: int) -> int:
        """Delete up to `limit` runs finished before `before` (epoch seconds), with their
        trials; how many."""
        cursor.execute(
            "SELECT run_id FROM runs WHERE final = 1 AND finished_at < ?"
            " ORDER BY finished_at LIMIT ?",
            (before, limit),
        )
        doomed = [(run_id,) for (run_id,) in cursor.fetchall()]
        cursor.executemany("DELETE FROM trials WHERE run_id = ?", doomed)
        cursor.executemany("DELETE FROM runs WHERE run_id = ?", doomed)
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
