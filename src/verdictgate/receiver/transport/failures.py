"""The failure taxonomy of a request's path, whatever the transport: what an exception means
for its sender (`Failure`: retry or not), the message it gets (`failure_of`), and how an
exception nothing planned for is logged (`report_unexpected`: once per kind, its details kept
out of the answer). Each transport maps a `Failure` to its own status."""

from __future__ import annotations

import logging
import threading
import traceback
from enum import Enum

from ...otel.otlp_reading import MalformedRequest
from ..ingest.decoding import DecoderUnavailable
from ..ingest.fair_gate import Busy
from ..store import is_store_error

logger = logging.getLogger(__name__)

_reported: set[tuple[str, str, int]] = set()
_reported_lock = threading.Lock()


def report_unexpected(error: BaseException, where: str) -> None:
    """Log an error no answer was planned for, with its traceback, the first time its kind
    (type and the line that raised it) is seen; repeats go to DEBUG, so a sender that keeps
    triggering one bug cannot flood the log."""
    frames = traceback.extract_tb(error.__traceback__)
    last = frames[-1] if frames else None
    kind = (
        type(error).__qualname__,
        last.filename if last else "",
        (last.lineno or 0) if last else 0,
    )
    with _reported_lock:
        first = kind not in _reported
        if first and len(_reported) < 1000:
            _reported.add(kind)
    if first:
        logger.error("verdictgate: unexpected error in %s", where, exc_info=error)
    else:
        logger.debug("verdictgate: unexpected error in %s (again)", where, exc_info=error)


class Failure(str, Enum):
    """What an exception on a request's path means for its sender, whatever the transport."""

    INVALID = "invalid"
    """The request itself is wrong: do not retry it."""
    BUSY = "busy"
    """The receiver is at a limit, or this client over its share: retry later."""
    UNAVAILABLE = "unavailable"
    """A decoder restarting or the store failing: retry later."""
    INTERNAL = "internal"
    """Nothing planned for it (logged once per kind): not retryable."""

    @property
    def retryable(self) -> bool:
        return self in (Failure.BUSY, Failure.UNAVAILABLE)


def failure_of(error: Exception, where: str) -> tuple[Failure, str]:
    """The failure an exception is, with the message the sender gets (an unplanned one is
    logged, and its details kept out of the answer)."""
    if isinstance(error, MalformedRequest):
        return Failure.INVALID, str(error)
    if isinstance(error, Busy):
        return Failure.BUSY, str(error)
    if isinstance(error, DecoderUnavailable):
        return Failure.UNAVAILABLE, "decoder restarting, retry later"
    if is_store_error(error):  # the receiver logs the outage, once (`StoreOutage`)
        logger.debug("verdictgate: store error in %s: %s", where, error)
        return Failure.UNAVAILABLE, "store unavailable, retry later"
    report_unexpected(error, where)
    return Failure.INTERNAL, "internal error"
