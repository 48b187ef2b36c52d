"""Chunked transfer coding, decoded as its bytes arrive."""

from __future__ import annotations

import re

from .refusals import HttpError

_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(;[^\r\n]*)?\r?\n")
_MAX_CHUNK_LINE = 4096
_MAX_TRAILER_LINES = 32


class ChunkedBody:
    """A chunked body decoded as its bytes arrive, strictly and within `limit` decoded bytes:
    `feed` takes each piece received, in order, and resumes where the last one stopped, so
    decoding is linear however the chunks are cut."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.body = bytearray()
        self.done = False
        self._left = -1
        """Bytes of the current chunk still to come; 0: its line end; -1: a size line; -2: the
        trailer fields."""
        self._partial = b""
        self._trailers = 0

    def feed(self, data: bytes) -> bytes:
        """Decode what `data` completes; once the body is whole, the bytes after it (the next
        request's). Raises HttpError: 400 for bad framing, 413 beyond `limit`."""
        data, self._partial = self._partial + data, b""
        at = 0
        while at < len(data) and not self.done:
            if self._left > 0:
                piece = min(self._left, len(data) - at)
                self.body += data[at : at + piece]
                at += piece
                self._left -= piece
            elif self._left == 0:
                if data.startswith(b"\r\n", at) or data.startswith(b"\n", at):
                    at += 2 if data[at] == 13 else 1
                    self._left = -1
                elif data[at:] != b"\r":
                    raise HttpError(400, "malformed chunked body")
                else:
                    break
            else:
                end = data.find(b"\n", at, at + _MAX_CHUNK_LINE)
                if end < 0:
                    if len(data) - at >= _MAX_CHUNK_LINE:
                        raise HttpError(400, "malformed chunked body")
                    break
                line, at = data[at : end + 1], end + 1
                self._line(line)
        if self.done:
            return data[at:]
        self._partial = data[at:]
        return b""

    def _line(self, line: bytes) -> None:
        if self._left == -2:  # trailer fields are read and ignored
            self._trailers += 1
            if line in (b"\r\n", b"\n"):
                self.done = True
            elif self._trailers >= _MAX_TRAILER_LINES:
                raise HttpError(400, "malformed chunked body trailer")
            return
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            raise HttpError(400, "malformed chunked body")
        size = int(match.group(1), 16)
        if len(self.body) + size > self.limit:
            raise HttpError(413, "request too large")
        self._left = size if size else -2
