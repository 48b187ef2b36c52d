"""Clocks: what every timed component reads the time from, and one a test drives by hand."""

from __future__ import annotations

import threading


class ManualClock:
    """A clock that moves only when told (`advance`): pass it as a component's `clock` and
    drive its idle periods and windows without waiting. Thread-safe."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the time on by `seconds`; the new time."""
        if seconds < 0:
            raise ValueError(f"a clock never goes back, got {seconds}")
        with self._lock:
            self._now += seconds
            return self._now
