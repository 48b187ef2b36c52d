"""The finisher: one thread that admits the runs the lifecycle made final, in order."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from ..lifecycle import Decision

logger = logging.getLogger(__name__)


class Finisher:
    """Does each decision handed to it (`put`) on its own thread, one at a time and in order,
    so that no request and no tick waits for an assessment. A failure is logged with its run
    and never stops the next one. Started on first need."""

    def __init__(self, do: Callable[[Decision], None]) -> None:
        self._do = do
        self._queue: deque[Decision] = deque()
        self._changed = threading.Condition()
        self._pending = 0
        """Decisions queued or being done: `flush` waits for none."""
        self._thread: threading.Thread | None = None
        self._stopping = False

    def put(self, decision: Decision) -> None:
        """Queue a decision (cheap: the caller may hold its own locks)."""
        with self._changed:
            if self._stopping:
                return
            self._queue.append(decision)
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="verdictgate-finisher", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every decision queued so far (and any it queued) is done; False if
        `timeout` seconds passed first."""
        if threading.current_thread() is self._thread:
            return False  # never wait on itself
        with self._changed:
            return self._changed.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Finish what is queued (within `timeout` seconds), then take nothing more."""
        self.flush(timeout)
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._stopping:
                    self._changed.wait()
                if not self._queue:
                    return
                decision = self._queue.popleft()
            try:
                self._do(decision)
            except Exception:
                logger.warning(
                    "verdictgate: run %s cannot be assessed", decision.run_id, exc_info=True
                )
            finally:
                with self._changed:
                    self._pending -= 1
                    self._changed.notify_all()
