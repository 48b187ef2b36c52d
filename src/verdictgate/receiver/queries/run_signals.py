"""Wake-ups per run: `RunSignals` wakes the watchers of one run only when that run changes;
other runs' traffic never wakes them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager


class RunSignals:
    """Wake-ups per run: `notify` wakes only the waiters of the runs it names."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[str, _Signal] = {}

    @contextmanager
    def watching(self, run_id: str) -> Iterator[Callable[[float], None]]:
        """While inside, a run's changes can be waited for with the yielded `wait(timeout)`,
        which returns at the first change after the previous call (or at the timeout)."""
        with self._lock:
            signal = self._watched.get(run_id)
            if signal is None:
                signal = self._watched[run_id] = _Signal()
            signal.watchers += 1
        seen = signal.generation
        try:

            def wait(timeout: float) -> None:
                nonlocal seen
                with signal.condition:
                    signal.condition.wait_for(lambda: signal.generation != seen, timeout)
                    seen = signal.generation

            yield wait
        finally:
            with self._lock:
                signal.watchers -= 1
                if not signal.watchers:
                    del self._watched[run_id]

    def notify(self, run_ids: Iterable[str]) -> None:
        """Wake the waiters of these runs."""
        with self._lock:
            signals = [self._watched[run] for run in run_ids if run in self._watched]
        for signal in signals:
            with signal.condition:
                signal.generation += 1
                signal.condition.notify_all()


class _Signal:
    __slots__ = ("condition", "generation", "watchers")

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.generation = 0
        self.watchers = 0
