"""Decoding OTLP export bodies: inline, or in worker processes so parsing runs beside the store."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from .otlp import Extract, extract_json, extract_protobuf

JSON = "application/json"
INLINE_BELOW = 32 << 10
"""Bodies smaller than this are decoded in the serving thread: shipping them costs more."""


class DecoderUnavailable(Exception):
    """A worker process died; the request should be retried (the pool is restarted)."""


def decode(body: bytes, content_type: str) -> Extract:
    """Decode one export body (raises MalformedRequest for a body that is not OTLP)."""
    return extract_json(body) if content_type == JSON else extract_protobuf(body)


class Decoder:
    """Decodes in `workers` processes (none: in the calling thread).

    Reading spans is Python work that holds the GIL; in another process it runs on another core
    while this one commits the previous request to SQLite (which releases the GIL).
    """

    def __init__(self, workers: int = 0) -> None:
        self._workers = workers
        self._pool = self._start() if workers else None

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self._workers, mp_context=multiprocessing.get_context("spawn"))

    def decode(self, body: bytes, content_type: str) -> Extract:
        pool = self._pool
        if pool is None or len(body) < INLINE_BELOW:
            return decode(body, content_type)
        try:
            return pool.submit(decode, body, content_type).result()
        except BrokenProcessPool:
            self._pool = self._start()
            raise DecoderUnavailable() from None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
