"""Decoding OTLP export bodies: inline, or in worker processes so parsing runs beside the store."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ...otel.otlp_reading import ExportContents, MalformedRequest, extract_json, extract_protobuf
from .allocator import reuse_freed_memory

JSON = "application/json"
INLINE_BELOW = 32 << 10
"""Bodies smaller than this are decoded in the serving thread: shipping them costs more."""


class DecoderUnavailable(Exception):
    """A worker process died; the request should be retried (the pool is restarted)."""


def decode(body: bytes, content_type: str) -> ExportContents:
    """Decode one export body (raises MalformedRequest for a body that is not OTLP, including
    one nested too deep or holding numbers too large to read)."""
    try:
        return extract_json(body) if content_type == JSON else extract_protobuf(body)
    except (RecursionError, OverflowError) as error:
        raise MalformedRequest(f"cannot read the body: {type(error).__name__}") from None


class Decoder:
    """Decodes in `workers` processes (none: in the calling thread).

    Reading spans is Python work that holds the GIL; in another process it runs on another core
    while this one commits the previous request to SQLite (which releases the GIL). A worker that
    dies breaks its pool: the requests it held get DecoderUnavailable and the pool is replaced.
    """

    def __init__(self, workers: int = 0) -> None:
        self._workers = workers
        self._lock = threading.Lock()
        self._pool = self._start() if workers else None

    @property
    def worker_initializer(self) -> Callable[[], object] | None:
        """What each worker process runs as it starts: `reuse_freed_memory`, so that it reuses
        the memory of one body for the next instead of faulting it in again; None when there
        are no workers (bodies are decoded in the calling thread)."""
        return reuse_freed_memory if self._workers else None

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self._workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=self.worker_initializer,
        )

    def decode(self, body: bytes, content_type: str) -> ExportContents:
        pool = self._pool
        if pool is None or len(body) < INLINE_BELOW:
            return decode(body, content_type)
        try:
            return pool.submit(decode, body, content_type).result()
        except BrokenProcessPool:
            self._replace(pool)
            raise DecoderUnavailable() from None

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        """Start a new pool once, however many requests saw the old one break."""
        with self._lock:
            if self._pool is broken:
                self._pool = self._start()
        broken.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(cancel_futures=True)
