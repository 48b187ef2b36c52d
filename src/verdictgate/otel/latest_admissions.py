"""The latest admission of every (suite, point), as observable gauges read it: a series the
latest admission does not carry (a route it did not reach, an older run's id) is gone rather
than left at an older run's value, and one collection never mixes two admissions."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from .admission_record import GAUGES, AdmissionRecord

_BY_METER: weakref.WeakKeyDictionary[Meter, LatestAdmissions] = weakref.WeakKeyDictionary()
_BY_METER_LOCK = threading.Lock()


class LatestAdmissions:
    """Holds the latest publication per metric labels and observes every gauge from it alone.

    One per meter (`on`): the SDK keeps the first callbacks of an instrument name and drops
    any registered after them, so every publisher on a meter shares these. Each collection
    reads one set of admissions: the first gauge observed pins them, and the collection's
    other gauges read the same ones even if an admission replaces another meanwhile."""

    def __init__(self, meter: Meter) -> None:
        self._lock = threading.Lock()
        self._latest: dict[tuple[tuple[str, object], ...], AdmissionRecord] = {}
        self._pinned: list[AdmissionRecord] | None = None
        self._observed: set[str] = set()
        """The gauges the pinned collection has read: one read again starts the next."""
        for name, (unit, description) in GAUGES.items():
            meter.create_observable_gauge(
                name, callbacks=[self._observer(name)], unit=unit, description=description
            )

    @classmethod
    def on(cls, meter: Meter) -> LatestAdmissions:
        """The latest admissions observed through `meter`, made on first use."""
        with _BY_METER_LOCK:
            latest = _BY_METER.get(meter)
            if latest is None:
                latest = _BY_METER[meter] = cls(meter)
            return latest

    def replace(self, publication: AdmissionRecord) -> None:
        """Make a publication the latest of its (suite, point), unless the one shown was made
        later (whatever order admissions are shown in: at a restart, or by replicas)."""
        key = tuple(sorted(publication.metric_base.items()))
        with self._lock:
            kept = self._latest.get(key)
            if kept is None or publication.time_unix_nano >= kept.time_unix_nano:
                self._latest[key] = publication

    def publications(self) -> list[AdmissionRecord]:
        """The latest admission of every (suite, point)."""
        with self._lock:
            return list(self._latest.values())

    def _observer(self, name: str) -> Callable[[CallbackOptions], Iterator[Observation]]:
        def observe(options: CallbackOptions) -> Iterator[Observation]:
            with self._lock:
                if self._pinned is None or name in self._observed:  # a new collection
                    self._pinned, self._observed = list(self._latest.values()), set()
                self._observed.add(name)
                pinned = self._pinned
            for publication in pinned:
                for gauge, value, attributes in publication.gauges:
                    if gauge == name:
                        yield Observation(value, attributes)

        return observe
