"""HTTP/1.1 request framing, without I/O: where a request head ends, and a body's bytes by its
`Content-Length` or its chunked transfer coding, taken as they arrive."""

from __future__ import annotations

import re

from .chunked import ChunkedBody
from .refusals import HttpError

MAX_HEAD_BYTES = 32 << 10
"""The request line and headers together."""
HEAD_END = re.compile(rb"\r?\n\r?\n")
FRAMING_SLACK = 64 << 10
"""The chunked framing allowed beyond four times a body's limit (sizes, extensions, line ends)."""


def head_length(buffer: bytes | bytearray, scanned: int = 0) -> int | None:
    """The length of the request head at the start of `buffer`, its blank line included, or
    None while it is incomplete; `scanned` bytes were searched before. Raises HttpError 431
    once more than `MAX_HEAD_BYTES` arrived without its end."""
    end = HEAD_END.search(buffer, max(0, scanned - 3))
    if end is not None and end.start() <= MAX_HEAD_BYTES:
        return end.end()
    if len(buffer) > MAX_HEAD_BYTES:
        raise HttpError(431, "request head too large")
    return None


class BodyFraming:
    """A request body as its bytes arrive: `length` bytes, or chunks decoded strictly (None)
    within `limit` decoded bytes."""

    __slots__ = ("_chunks", "_raw", "_received", "length")

    def __init__(self, length: int | None, limit: int) -> None:
        self.length = length
        self._chunks = ChunkedBody(limit) if length is None else None
        self._received = bytearray()
        """A `Content-Length` body's bytes so far."""
        self._raw = 0
        """Bytes received for a chunked body, framing included."""

    def wanted(self, most: int) -> int:
        """How many bytes to receive next, at most `most`: no more than the body still needs."""
        return most if self.length is None else min(most, self.length - len(self._received))

    def feed(self, data: bytes) -> tuple[int, bytes | None]:
        """Take `data`: (the body's bytes it added, the bytes after the body once it is whole,
        else None). Raises HttpError: 400 for bad framing, 413 beyond the limit."""
        if self._chunks is None:
            assert self.length is not None
            piece = data[: self.length - len(self._received)]
            self._received += piece
            done = len(self._received) == self.length
            return len(piece), data[len(piece) :] if done else None
        chunks = self._chunks
        self._raw += len(data)
        if self._raw > 4 * chunks.limit + FRAMING_SLACK:  # framing far beyond the data
            raise HttpError(413, "request too large")
        before = len(chunks.body)
        after = chunks.feed(data)
        return len(chunks.body) - before, after if chunks.done else None

    def body(self) -> bytes:
        """The body received (whole once `feed` returned what follows it)."""
        return bytes(self._received if self._chunks is None else self._chunks.body)
