"""A run's declaration as its run spans make it: the first declares it, a later different one is
a conflict, one that comes after the run is final is late."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ...otel import conventions as names
from ...wire_types import AttributeValue
from .connection import Cursor
from .statements import IS_DISTINCT_FROM, sql

_LATE_DECLARATION = sql(
    "UPDATE runs SET late = late + 1 WHERE run_id = ? AND final = 1 AND declaration",
    IS_DISTINCT_FROM,
    "?",
)
_DECLARE = sql(
    "UPDATE runs SET declaration = ?, planned_trials = ?, declared_at = ?,"
    " suite = COALESCE(?, suite), point = COALESCE(?, point)"
    " WHERE run_id = ? AND declaration IS NULL AND final = 0"
)
_DECLARATION_CONFLICT = sql(
    "UPDATE runs SET declaration_conflict = 1 WHERE run_id = ? AND final = 0 AND declaration != ?"
)


def declare(cursor: Cursor, attributes: Mapping[str, AttributeValue], now: float) -> None:
    """The first run span of a run declares it; a later, different one is an integrity
    conflict (the first stays), an identical one a harmless repeat. A run that is final is
    frozen: a different run span then is only counted as late."""
    run_id, text = attributes[names.RUN_ID], json.dumps(attributes, sort_keys=True)
    cursor.execute(_LATE_DECLARATION, (run_id, text))
    if cursor.rowcount:
        return
    cursor.execute(
        _DECLARE,
        (
            text,
            attributes.get(names.PLAN_TRIALS),
            now,
            attributes.get(names.SUITE),
            attributes.get(names.POINT),
            run_id,
        ),
    )
    if cursor.rowcount == 0:
        cursor.execute(_DECLARATION_CONFLICT, (run_id, text))
