"""Indexes an earlier release made that this one no longer uses, dropped when a replica of this
release migrates the store."""

from __future__ import annotations

import logging

from .connection import Database
from .faults import is_lock_not_had
from .statements import Statement

logger = logging.getLogger(__name__)

RETIRED_INDEXES = ("trials_by_write",)
"""Indexes an earlier release made that this one drops: `trials_by_write` indexed every trial
for what `trials_relayed` now indexes only where another replica wrote it (version 4)."""


def drop_retired(database: Database, retired: list[str]) -> str:
    """Drop the indexes this release no longer uses, which locks their table for an instant, or
    for as long as the lock timeout waits on a long reader: then they are left in place (still
    correct, only slower writes) with a line saying how to drop them; what was done."""
    names = ", ".join(retired)
    logger.warning("migrating the store: dropping %s locks its table for an instant", names)
    try:
        with database.transaction() as cursor:
            for name in retired:
                cursor.execute(Statement.of(f"DROP INDEX IF EXISTS {name}"))
    except Exception as error:
        if not is_lock_not_had(error):
            raise
        logger.warning(
            "migrating the store: %s left in place (its table was busy); drop it when it is"
            " quiet: DROP INDEX %s",
            names,
            names,
        )
        return f"indexes {names} left in place (their table was busy)"
    return f"indexes {names} dropped (locked an instant)"
