"""Delivering the receiver's admissions: a thread drains the store's durable outbox, oldest
first (the order of one replica's claims), into a target (an OTLP endpoint, see
`otlp_target`), a signal that fails set behind the others and retried with backoff; ingest
never waits for it."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Protocol

from ...otel.admission_record import AdmissionRecord
from ...otel.publisher import Publisher
from ..replication.database_clock import store_clock
from ..store import LOCAL, Store, is_store_error
from ..store.connection import DEFAULT_LEASE
from ..store.faults import first_line

logger = logging.getLogger(__name__)

TRACES, LOGS, METRICS = 1, 2, 4
"""The signals of one publication, as bits of the outbox's `sent` column."""
ALL_SIGNALS = TRACES | LOGS | METRICS


class Target(Protocol):
    """Where staged admissions go."""

    endpoint: str
    """What the logs call it."""

    def deliver(
        self, seq: int, publication: AdmissionRecord, pending: int
    ) -> tuple[int, str | None]:
        """Send the `pending` signals of outbox entry `seq`, each on its own (one that fails
        stops none of the others), each call within its own deadline; returns the signals now
        done (delivered, or refused for good) and, when some must be tried again later, why."""
        ...

    def close(self) -> None:
        """Stop: an attempt in flight ends now."""
        ...


class PublisherTarget:
    """Emits through a Publisher's OpenTelemetry providers (delivery is then their business)."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.endpoint = "an in-process publisher"

    def deliver(
        self, seq: int, publication: AdmissionRecord, pending: int
    ) -> tuple[int, str | None]:
        self.publisher.emit(publication)
        return ALL_SIGNALS, None

    def close(self) -> None:
        """Nothing in flight to stop."""


class Forwarder:
    """Drains the outbox into a target, oldest first, on its own thread. An entry leaves the
    outbox only when each of its signals was delivered (or refused for good), so an admission is
    published at least once, across restarts. A signal that fails (the target down, or stalling
    that signal's calls past their deadline) is stalled: the entries after it are delivered
    their other signals, and it is tried again on the oldest entry waiting for it once the rest
    is delivered, after a backoff that grows exponentially (with jitter); an admission staged
    meanwhile is delivered at once all the same. Failing deliveries are logged once when they
    start, in one line, and once when they work again. Replicas sharing a store each claim the
    entries they deliver (`claim_as`), with a lease, so that one replica delivers an entry at a
    time and a dead one's entries are delivered by another, with the same span ids (order then
    holds within each replica's claims, not across replicas)."""

    def __init__(
        self,
        store: Store,
        target: Target,
        *,
        backoff: tuple[float, float] = (0.5, 30.0),
        batch: int = 64,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        self.replica, self.lease = LOCAL, DEFAULT_LEASE
        self._clock = clock or store_clock(store)
        """What its claims are timed by (by default `store_clock`: a shared store's database)."""
        self.target = target
        self._backoff = backoff
        self._batch = batch
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stalled: dict[int, str] = {}
        """The signals whose last attempt failed, with why, the longest stalled first."""
        self.failing: str | None = None
        """Why deliveries fail, while they do; None when they work."""

    def claim_as(self, replica: str, lease: float) -> None:
        """Claim outbox entries as `replica`, each for `lease` seconds (the receiver's)."""
        self.replica, self.lease = replica, lease

    def wake(self) -> None:
        """Something was staged: deliver it now."""
        self._wake.set()

    @property
    def stalled(self) -> int:
        """The signals stalled (bits): tried again only once the rest is delivered."""
        return sum(self._stalled)

    def drain(self, retry: bool = True) -> bool:
        """Deliver what the outbox holds, oldest first: every signal of every entry but the
        stalled ones, then, with `retry`, each signal stalled before this call on the oldest
        entry waiting for it (its success lets that signal flow again). True when nothing is
        left to deliver and nothing is stalled; False when a signal is (logged when failing
        starts)."""
        retrying = list(self._stalled) if retry else []
        while not self._stop.is_set():
            if self._deliver_batch(ALL_SIGNALS & ~self.stalled):
                continue  # more may wait
            if not retrying:
                break
            if not self._retry(retrying.pop(0)):
                return False
            # it flows again: the entries after that one are delivered it, then the next one
        if self._stop.is_set() or self._stalled:
            return False
        self._recovered()
        return True

    def _deliver_batch(self, signals: int) -> bool:
        """Claim a batch of the oldest entries waiting for one of `signals` and deliver those
        they wait for; False when none waits."""
        if not signals:
            return False
        claimed = self._clock()
        entries = self.store.outbox.claim(
            self.replica, claimed, claimed + self.lease, self._batch, waiting_for=signals
        )
        for seq, body, sent in entries:
            if self._clock() > claimed + self.lease / 2:
                break  # claim the rest again before the claim on them lapses
            self._deliver(seq, body, sent, signals & ~self.stalled)
        return bool(entries)

    def _retry(self, signal: int) -> bool:
        """Try a stalled signal again on the oldest entry waiting for it; whether it flows
        again (no entry waits for it any more, or that one took it)."""
        if signal not in self._stalled:
            return True
        claimed = self._clock()
        entries = self.store.outbox.claim(
            self.replica, claimed, claimed + self.lease, 1, waiting_for=signal
        )
        if entries and self._deliver(*entries[0], signal) is not None:
            self._stalled[signal] = self._stalled.pop(signal)  # the others' turn first next time
            return False
        self._stalled.pop(signal, None)
        return True

    def _deliver(self, seq: int, body: str, sent: int, signals: int) -> str | None:
        """Send an entry the `signals` it still waits for; a signal that fails is stalled, and
        why is returned."""
        try:
            publication = AdmissionRecord.from_json(body)
        except (ValueError, TypeError, KeyError):  # never blocks the outbox's head
            logger.error("verdictgate: outbox entry %d is unreadable; dropped", seq)
            self.store.outbox.mark_sent(seq, ALL_SIGNALS, ALL_SIGNALS)
            return None
        pending = signals & ~sent
        if not pending:
            return None
        done, failure = self.target.deliver(seq, publication, pending)
        for signal in (TRACES, LOGS, METRICS):
            if pending & signal:
                if done & signal:
                    self._stalled.pop(signal, None)
                elif failure is not None:
                    self._stalled[signal] = failure
        if done:
            self.store.outbox.mark_sent(seq, sent | done, ALL_SIGNALS)
        if failure is not None:
            self._failed(failure)
        return failure

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="verdictgate-publish", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop within about `timeout` seconds whatever the target does; what was not delivered
        stays in the outbox for the next start."""
        self._stop.set()
        self._wake.set()
        self.target.close()  # ends an attempt in flight
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        """Drain until stopped: stalled signals are tried again after the backoff, what is
        staged meanwhile is delivered when it is staged."""
        failures, retry_at = 0, 0.0
        while not self._stop.is_set():
            self._wake.clear()
            retry = time.monotonic() >= retry_at
            try:
                delivered = self.drain(retry)
            except Exception as error:  # a store fault or a bug: keep the thread, try again later
                if self._stop.is_set():
                    return  # the target was closed under an attempt
                logger.debug("verdictgate: publishing failed", exc_info=True)
                self._failed(_why(error))
                delivered, retry = False, True
            if delivered:
                failures, retry_at = 0, 0.0
                # in a shared store, entries another replica left (it died, or stopped) are
                # looked for every third of a lease: nothing wakes this one for them
                self._wake.wait(self.lease / 3 if self.store.shared else None)
                continue
            if retry:
                low, high = self._backoff
                delay = min(high, low * 2 ** min(failures, 32)) * random.uniform(0.5, 1.0)
                failures += 1
                retry_at = time.monotonic() + delay
            self._wake.wait(max(0.0, retry_at - time.monotonic()))

    def _failed(self, reason: str) -> None:
        """Log the first failure of an episode, in one line."""
        if self.failing is None and not self._stop.is_set():
            logger.warning(
                "verdictgate: cannot publish admissions to %s (%s); they wait in the outbox, "
                "retried with backoff, the others delivered meanwhile",
                self.target.endpoint,
                reason,
            )
        self.failing = reason

    def _recovered(self) -> None:
        if self.failing is not None:
            logger.warning(
                "verdictgate: publishing to %s again; the outbox is delivered",
                self.target.endpoint,
            )
        self.failing = None


def _why(error: Exception) -> str:
    """Why a delivery failed that the target did not answer: the store, or something else, in
    one line."""
    if is_store_error(error):
        return f"the store is unavailable: {first_line(error)}"
    return f"{type(error).__name__}: {first_line(error)}"
