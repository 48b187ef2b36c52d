"""The latest admission of every (suite, point), as observable gauges read it: a series the
latest admission does not carry (a route it did not reach, an older run's id) is gone rather
than left at an older run's value, and one collection never mixes two admissions."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from .admission_record import GAUGES, Publication


class LatestAdmissions:
    """Holds the latest publication per metric labels and observes every gauge from it alone.

    `lock` is held while the latest admissions are read or replaced; pass one that a whole
    collection also holds (a scrape) so every gauge of that collection reads the same ones."""

    def __init__(self, meter: Meter, lock: AbstractContextManager[object] | None = None) -> None:
        self._lock: AbstractContextManager[object] = lock or threading.Lock()
        self._latest: dict[tuple[tuple[str, object], ...], Publication] = {}
        for name, (unit, description) in GAUGES.items():
            meter.create_observable_gauge(
                name, callbacks=[self._observer(name)], unit=unit, description=description
            )

    def replace(self, publication: Publication) -> None:
        """Make a publication the latest of its (suite, point)."""
        key = tuple(sorted(publication.metric_base.items()))
        with self._lock:
            self._latest[key] = publication

    def _observer(self, name: str) -> Callable[[CallbackOptions], Iterator[Observation]]:
        def observe(options: CallbackOptions) -> Iterator[Observation]:
            with self._lock:
                latest = list(self._latest.values())
            for publication in latest:
                for gauge, value, attributes in publication.gauges:
                    if gauge == name:
                        yield Observation(value, attributes)

        return observe
