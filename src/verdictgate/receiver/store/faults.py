"""What a store failing is: an error a sender is told to retry (the store away, or a conflict
with another replica), a driver's error of any kind, and its message on one line."""

from __future__ import annotations

import sqlite3


def is_store_error(error: BaseException) -> bool:
    """Whether an exception is the store failing in a way a retry may not meet (a sender is
    told to retry): any SQLite error; on PostgreSQL a lost connection, a server shutting down
    or out of resources, a deadlock or a lock not had in time, a transaction ended for idling,
    or a write that reached a standby; not an error in what was sent to it."""
    if isinstance(error, sqlite3.Error):
        return True
    if not is_driver_error(error):
        return False
    state = getattr(error, "sqlstate", None)
    if state is None:  # the driver's own: a connection that failed or was lost
        return any(
            kind.__name__ in ("OperationalError", "InterfaceError") for kind in type(error).__mro__
        )
    return state[:2] in _RETRYABLE_CLASSES or state in _RETRYABLE_STATES


def is_driver_error(error: BaseException) -> bool:
    """Whether an exception is a store driver's (sqlite3's or psycopg's), of any kind."""
    return isinstance(error, sqlite3.Error) or type(error).__module__.startswith("psycopg")


def is_connection_lost(error: BaseException) -> bool:
    """Whether a store error is the store being away (the connection, or the server; a SQLite
    file that cannot be written now), rather than a conflict with another replica or what a
    write holds."""
    if isinstance(error, sqlite3.Error):
        return isinstance(error, sqlite3.OperationalError)
    state = getattr(error, "sqlstate", None)
    return is_store_error(error) and (state is None or state[:2] in ("08", "57", "53", "58"))


def ends_the_session(error: BaseException) -> bool:
    """Whether a PostgreSQL error is the server ending the session it came on (a connection
    exception, an administrator's or a crash's shutdown): that connection, and every other kept
    to the same server, may be gone though the driver has not noticed yet."""
    state = getattr(error, "sqlstate", None) or ""
    return state[:2] == "08" or state[:3] == "57P"


_RETRYABLE_CLASSES = ("08", "40", "53", "57", "58")
"""SQLSTATE classes a retry may not meet: connection exceptions, transaction rollbacks
(deadlocks, serialization failures), insufficient resources, operator intervention (a shutdown,
a cancel), system errors."""
_RETRYABLE_STATES = ("55P03", "25P03", "25006")
"""And these: a lock not had in time, a transaction ended for idling, a read-only transaction
(a write that reached a standby during a failover)."""


def first_line(error: BaseException) -> str:
    """An error's message, its first line (a server error's primary message)."""
    diagnosis = getattr(error, "diag", None)
    primary = getattr(diagnosis, "message_primary", None)
    return str(primary) if primary else (str(error).splitlines() or [""])[0]


def is_lock_not_had(error: BaseException) -> bool:
    """Whether a store error is a lock not had within the transaction's lock timeout."""
    return getattr(error, "sqlstate", None) == "55P03"
