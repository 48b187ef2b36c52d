"""Decoding OTLP export bodies: inline, or in worker processes so parsing runs beside the store."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import NoReturn

from ...otel.otlp_reading import ExportContents, MalformedRequest, extract_json, extract_protobuf
from .allocator import reuse_freed_memory

JSON = "application/json"
INLINE_BELOW = 32 << 10
"""Bodies smaller than this are decoded in the serving thread: shipping them costs more."""
ANSWER_SECONDS = 30.0
"""A worker that has not answered a body within this, once its turn came, is taken as stuck:
it is replaced and the requests it held get DecoderUnavailable (the largest body allowed is
decoded in well under a second)."""
CLOSE_SECONDS = 5.0
"""How long `close` waits for a killed worker to be gone."""


class DecoderUnavailable(Exception):
    """A worker process died; the request should be retried (the worker is restarted)."""


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
    while this one commits the previous request to SQLite (which releases the GIL). A request
    goes to the worker with the fewest in hand. A worker that dies fails the requests it held
    with DecoderUnavailable and is replaced.
    """

    def __init__(self, workers: int = 0, answer_seconds: float = ANSWER_SECONDS) -> None:
        self._workers = workers
        self._answer_seconds = answer_seconds
        self._lock = threading.Lock()
        self._channels = [self._start() for _ in range(workers)]

    @property
    def worker_initializer(self) -> Callable[[], object] | None:
        """What each worker process runs as it starts: `reuse_freed_memory`, so that it reuses
        the memory of one body for the next instead of faulting it in again; None when there
        are no workers (bodies are decoded in the calling thread)."""
        return reuse_freed_memory if self._workers else None

    def _start(self) -> _Channel:
        """A new worker, and the pipe to it."""
        return _Channel(reuse_freed_memory, self._answer_seconds)

    def decode(self, body: bytes, content_type: str) -> ExportContents:
        if not self._channels or len(body) < INLINE_BELOW:
            return decode(body, content_type)
        with self._lock:
            if not self._channels:  # closed meanwhile
                return decode(body, content_type)
            channel = min(self._channels, key=_Channel.load)
        try:
            return channel.decode(body, content_type)
        except BaseException:
            if channel.broken:  # the next request gets a new worker
                self._replace(channel)
            raise

    def _replace(self, broken: _Channel) -> None:
        """Start a new worker once, however many requests saw the old one die."""
        with self._lock:
            if broken in self._channels:
                self._channels[self._channels.index(broken)] = self._start()
        broken.close()

    def close(self) -> None:
        with self._lock:
            channels, self._channels = self._channels, []
        for channel in channels:
            channel.close()


class _Channel:
    """One worker process and the pipe to it. Bodies are sent in turn and answered in the
    order sent, so each calling thread writes its own body and reads its own answer: no thread
    of this process relays them. A second body waits in the pipe while the worker decodes the
    first. Anything that goes wrong between sending a body and reading its answer breaks the
    channel (the pipe would be out of step): every request it holds gets DecoderUnavailable."""

    def __init__(self, initializer: Callable[[], object], answer_seconds: float) -> None:
        self._answer_seconds = answer_seconds
        context = multiprocessing.get_context("spawn")
        self._connection, theirs = context.Pipe()
        self._process = context.Process(
            target=_decode_from, args=(theirs, initializer), name="verdictgate-decoder", daemon=True
        )
        self._process.start()
        theirs.close()
        self._sending = threading.Lock()
        self._turns = threading.Condition()
        self._sent = 0
        """Bodies sent: the next one sent has this ticket."""
        self._answered = 0
        """Answers read: the next answer in the pipe is for this ticket."""
        self._broken = False

    @property
    def broken(self) -> bool:
        """Its worker died or is stuck, or its pipe went out of step: it takes no more bodies."""
        return self._broken

    def load(self) -> tuple[bool, int]:
        """Whether it is broken, then how many bodies it holds: the least loaded is chosen."""
        return self._broken, self._sent - self._answered

    def decode(self, body: bytes, content_type: str) -> ExportContents:
        with self._sending:
            if self._broken:
                raise DecoderUnavailable()
            ticket = self._sent
            self._sent += 1
            try:
                self._connection.send_bytes(content_type.encode())
                self._connection.send_bytes(body)
            except BaseException as error:
                self._break(error)
        with self._turns:
            while self._answered != ticket and not self._broken:
                self._turns.wait()
            if self._answered != ticket:  # broken before its turn came
                raise DecoderUnavailable()
        try:  # only this ticket's caller reads now
            if not self._connection.poll(self._answer_seconds):
                raise TimeoutError("the decoder did not answer")
            answer = self._connection.recv_bytes()
        except BaseException as error:
            self._break(error)
        with self._turns:
            self._answered += 1
            self._turns.notify_all()
        outcome = pickle.loads(answer)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[no-any-return]  # boundary: what the worker decoded

    def _break(self, error: BaseException) -> NoReturn:
        """The pipe is out of step, or the worker died or is stuck: every request it holds gets
        DecoderUnavailable, this one too (an error not the worker's is raised as it is)."""
        with self._turns:
            self._broken = True
            self._turns.notify_all()
        if isinstance(error, (EOFError, OSError)):
            raise DecoderUnavailable() from None
        raise error

    def close(self) -> None:
        """Stop the worker (it keeps nothing); requests it still holds get DecoderUnavailable.
        The pipe closes when the last caller lets go of the channel."""
        with self._turns:
            self._broken = True
            self._turns.notify_all()
        self._process.kill()
        self._process.join(CLOSE_SECONDS)


def _decode_from(connection: Connection, initializer: Callable[[], object]) -> None:
    """A worker process: after `initializer`, decode each body the pipe brings, answer with what
    it holds or the error it raised (pickled; an ExportContents as msgpack), until the pipe
    closes."""
    initializer()
    while True:
        try:
            content_type = connection.recv_bytes().decode("ascii", "replace")
            body = connection.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            outcome: ExportContents | Exception = decode(body, content_type)
        except Exception as error:
            outcome = error
        try:
            answer = pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # an error that cannot be pickled: its message can
            answer = pickle.dumps(RuntimeError(f"{type(error).__name__}: {error}"))
        try:
            connection.send_bytes(answer)
        except OSError:  # the receiver closed the pipe meanwhile
            return
