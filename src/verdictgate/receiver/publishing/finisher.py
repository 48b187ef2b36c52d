"""The finisher: a few threads that admit the runs the lifecycle made final, each run's
rulings in order, runs side by side."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable

from ...lifecycle import Ruling

logger = logging.getLogger(__name__)

WORKERS = 2
"""Threads that assess and admit at once: a large run's assessment never holds a small one's."""


class Finisher:
    """Does each ruling handed to it (`put`) off the caller's thread: the rulings of one run
    one at a time and in order (a window before the final admission), different runs side by
    side on `workers` threads, taken in turn, so no request, no tick and no other run waits
    for one run's assessment. A failure is logged with its run and never stops the next one.
    Started on first need."""

    def __init__(self, do: Callable[[Ruling], None], workers: int = WORKERS) -> None:
        self._do = do
        self._workers = workers
        self._queues: OrderedDict[str, deque[Ruling]] = OrderedDict()
        """Runs with rulings waiting, in the order they are to be taken."""
        self._busy: set[str] = set()
        """Runs a thread is working on (their queues wait for it)."""
        self._changed = threading.Condition()
        self._pending = 0
        """Rulings queued or being done: `flush` waits for none."""
        self._threads: list[threading.Thread] = []
        self._stopping = False

    def put(self, ruling: Ruling) -> None:
        """Queue a ruling (cheap: the caller may hold its own locks)."""
        with self._changed:
            if self._stopping:
                return
            self._queues.setdefault(ruling.run_id, deque()).append(ruling)
            self._pending += 1
            if len(self._threads) < self._workers:
                thread = threading.Thread(
                    target=self._work,
                    name=f"verdictgate-finisher-{len(self._threads)}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
            self._changed.notify_all()

    def holds(self, run_id: str) -> bool:
        """Whether a ruling of the run is queued or being done."""
        with self._changed:
            return run_id in self._queues or run_id in self._busy

    def flush(self, timeout: float) -> bool:
        """Wait until every ruling queued so far (and any it queued) is done; False if
        `timeout` seconds passed first."""
        if threading.current_thread() in self._threads:
            return False  # never wait on itself
        with self._changed:
            return self._changed.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Finish what is queued (within `timeout` seconds), then take nothing more."""
        self.flush(timeout)
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def _next(self) -> Ruling | None:
        """The first ruling of the first run no thread is working on (the lock is held)."""
        for run_id, queue in self._queues.items():
            if run_id not in self._busy:
                self._busy.add(run_id)
                ruling = queue.popleft()
                if queue:
                    self._queues.move_to_end(run_id)  # runs take turns
                else:
                    del self._queues[run_id]
                return ruling
        return None

    def _work(self) -> None:
        while True:
            with self._changed:
                while (ruling := self._next()) is None:
                    if self._stopping:
                        return
                    self._changed.wait()
            try:
                self._do(ruling)
            except Exception:
                logger.warning(
                    "verdictgate: run %s cannot be assessed", ruling.run_id, exc_info=True
                )
            finally:
                with self._changed:
                    self._busy.discard(ruling.run_id)
                    self._pending -= 1
                    self._changed.notify_all()
