"""How one run's (or trace's) fault is kept from stopping the others: logged, and the work
tried again or set aside."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .store import is_store_error
from .store.faults import first_line, is_driver_error

logger = logging.getLogger("verdictgate.receiver.core")
"""The receiver's log, one name whichever of its parts writes a line (operators filter on it)."""


def log_set_aside(kind: str, key: str, error: Exception) -> None:
    """The line for a run or trace set aside, so that one never stops the tick for the others:
    one line when the store refused what it holds (a poison value), the traceback when
    nothing planned for the error (a bug)."""
    if is_driver_error(error):
        logger.warning(
            "verdictgate: %s %.80s is set aside, the others go on: %s: %s",
            kind,
            key,
            type(error).__name__,
            first_line(error),
        )
    else:
        logger.error(
            "verdictgate: %s %.80s is set aside, the others go on", kind, key, exc_info=error
        )


def log_after_commit(error: Exception) -> None:
    """A fault after a group committed (the store away while runs were closed, or a bug): its
    requests are acknowledged all the same, since what they sent is stored, and the next tick
    takes the runs up from the store."""
    if is_store_error(error):
        logger.warning(
            "verdictgate: a committed write's runs wait for the next tick (%s)", first_line(error)
        )
    else:
        logger.error("verdictgate: following a committed write failed", exc_info=error)


def isolated(run_id: str, work: Callable[[], object]) -> bool | None:
    """Do one run's work; a run that cannot be assessed is logged (False), a store fault too
    (None: the work is to be tried again), and neither stops a request, the tick or other
    runs."""
    try:
        work()
    except Exception as error:
        if is_store_error(error):
            logger.warning("verdictgate: run %s waits for the store (%s)", run_id, error)
            return None
        logger.warning("verdictgate: run %s cannot be assessed", run_id, exc_info=True)
        return False
    return True
