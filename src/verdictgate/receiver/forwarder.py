"""Delivering the receiver's admissions: a thread drains the store's durable outbox, oldest
first (the order of one replica's claims), into a target (an OTLP endpoint, see
`otlp_target`), retrying with backoff; ingest never waits for it."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Protocol

from ..otel.admission_record import AdmissionRecord
from ..otel.publisher import Publisher
from .config import DEFAULT_LEASE
from .database_clock import store_clock
from .store import LOCAL, Store

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
        """Send the `pending` signals of outbox entry `seq`; returns the signals now done
        (delivered, or refused for good) and, when some must be tried again later, why."""
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
    published at least once, across restarts; a failure backs off exponentially (with jitter)
    and is logged once when publishing stops and once when it resumes. Replicas sharing a
    store each claim the entries they deliver (`claim_as`), with a lease, so that one replica
    delivers an entry at a time and a dead one's entries are delivered by another, with the
    same span ids (order then holds within each replica's claims, not across replicas)."""

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
        self.failing: str | None = None
        """Why the last attempt failed, while publishing is failing; None when it works."""

    def claim_as(self, replica: str, lease: float) -> None:
        """Claim outbox entries as `replica`, each for `lease` seconds (the receiver's)."""
        self.replica, self.lease = replica, lease

    def wake(self) -> None:
        """Something was staged: deliver it now."""
        self._wake.set()

    def drain(self) -> bool:
        """Deliver what the outbox holds, in order, until it is empty (True) or the target fails
        (False, logged when that starts)."""
        while not self._stop.is_set():
            claimed = self._clock()
            entries = self.store.claim_outbox(
                self.replica, claimed, claimed + self.lease, self._batch
            )
            if not entries:
                self._recovered()
                return True
            for seq, body, sent in entries:
                if self._clock() > claimed + self.lease / 2:
                    break  # claim the rest again before the claim on them lapses
                try:
                    publication = AdmissionRecord.from_json(body)
                except (ValueError, TypeError, KeyError):  # never blocks the outbox's head
                    logger.error("verdictgate: outbox entry %d is unreadable; dropped", seq)
                    self.store.mark_sent(seq, ALL_SIGNALS, ALL_SIGNALS)
                    continue
                pending = ALL_SIGNALS & ~sent
                done, failure = self.target.deliver(seq, publication, pending)
                self.store.mark_sent(seq, sent | done, ALL_SIGNALS)
                if failure is not None:
                    self._failed(failure)
                    return False
        return False

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
        failures = 0
        while not self._stop.is_set():
            self._wake.clear()
            try:
                delivered = self.drain()
            except Exception:  # a store fault or a bug: keep the thread, try again later
                if self._stop.is_set():
                    return  # the target was closed under an attempt
                logger.warning("verdictgate: publishing failed", exc_info=True)
                delivered = False
            if delivered:
                failures = 0
                # in a shared store, entries another replica left (it died, or stopped) are
                # looked for every third of a lease: nothing wakes this one for them
                self._wake.wait(self.lease / 3 if self.store.shared else None)
                continue
            low, high = self._backoff
            delay = min(high, low * 2 ** min(failures, 32)) * random.uniform(0.5, 1.0)
            failures += 1
            self._stop.wait(delay)

    def _failed(self, reason: str) -> None:
        if self.failing is None and not self._stop.is_set():
            logger.warning(
                "verdictgate: cannot publish admissions to %s (%s); %d kept in the outbox, "
                "retrying with backoff",
                self.target.endpoint,
                reason,
                self.store.outbox_size(),
            )
        self.failing = reason

    def _recovered(self) -> None:
        if self.failing is not None:
            logger.warning(
                "verdictgate: publishing to %s again; the outbox is delivered",
                self.target.endpoint,
            )
        self.failing = None
