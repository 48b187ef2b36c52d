"""What the HTTP layer refuses and how: the errors its parts raise, the statuses exporters retry."""

from __future__ import annotations


class HttpError(Exception):
    """A request the HTTP layer refuses, with its status (bad framing, too large, too slow)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ClientGone(Exception):
    """The client closed or reset its connection, or stopped reading: nothing more to say."""


RETRYABLE = frozenset({429, 502, 503, 504})
"""The statuses OTLP/HTTP exporters retry (after `Retry-After`); the spec has every other
4xx and 5xx dropped."""


def timed_out() -> HttpError:
    """A body that did not arrive in time: 503, so an exporter retries it (408 is not among the
    statuses the OTLP/HTTP spec retries)."""
    return HttpError(503, "the request body did not arrive in time, retry later")
