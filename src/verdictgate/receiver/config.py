"""What a receiver is told: when runs end, how much one run may hold, which suites canaries are
judged by and metrics may name. Data only, built once (by `serve`'s flags or by hand)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..lifecycle import DEFAULT_IDLE_SECONDS
from ..suite import Suite
from .store.connection import DEFAULT_LEASE

DEFAULT_MAX_TRIALS_PER_RUN = 1_000_000
"""Trials one run may hold in a receiver (a million trials assess in about two seconds)."""
DEFAULT_SETTLE = 5.0
"""Seconds a trace with a harness's trial span must be quiet before its trials are derived:
the framework spans of other processes may arrive after the trial span."""
DEFAULT_MAX_HOLD = 120.0
"""Seconds a trial span's spans are waited for at most: a trial whose spans never go quiet is
settled from what has arrived by then (what comes later is counted late)."""
DEFAULT_MAX_HELD_SPANS = 500_000
"""Framework spans held at most (about 100 MiB): beyond, the traces with no trial span that were
quiet the longest are let go first, and counted."""
DEFAULT_MAX_OPEN_RUNS = 100_000
"""Open runs one replica decides at most: each holds its evidence in memory (about 3 KiB and
its trials), so 100,000 canaries open at once hold a few hundred MiB."""

MIN_LEASE = 3.0
"""Seconds a lease holds at least: a replica renews it every third, between ticks of 0.5 s."""
DEFAULT_METRIC_SUITES = 50
"""Distinct (suite, point) label pairs metrics carry when no suites are named."""


@dataclass(frozen=True)
class ReceiverConfig:
    """A receiver's settings.

    `idle`: seconds without news after which a run is final (a canary's since its last trial,
    a declared run's since its run span or last trial). `window`: seconds between a canary's
    interim admissions (None: none). `max_trials_per_run`: spans beyond it are rejected.
    `assess_interval`: an open run is assessed for queries at most this often. `retain`:
    delete runs finished longer ago (None: keep every run). `settle`: quiet seconds before a
    trial's framework spans become its trial; `max_hold`: seconds after its trial span arrived
    by which a trial settles even if its spans keep coming; `max_held_spans`: framework spans
    held at most (the oldest trial-less traces are let go beyond it). `canary_suites`: suite name -> the suite its
    canaries are judged by. `metric_suites`: the suites metrics may name (None: the first
    `max_metric_suites` seen). `lease`: seconds a replica's claims on runs and outbox
    entries hold unless renewed (a shared store's replicas take over a dead one's after it);
    `replica`: this receiver's name among them (None: host, process and a random part, or
    `local` for a store no other process writes).
    """

    idle: float = DEFAULT_IDLE_SECONDS
    window: float | None = None
    max_trials_per_run: int = DEFAULT_MAX_TRIALS_PER_RUN
    assess_interval: float = 1.0
    retain: float | None = None
    settle: float = DEFAULT_SETTLE
    max_hold: float = DEFAULT_MAX_HOLD
    max_held_spans: int = DEFAULT_MAX_HELD_SPANS
    canary_suites: Mapping[str, Suite] = field(default_factory=lambda: MappingProxyType({}))
    metric_suites: frozenset[str] | None = None
    max_metric_suites: int = DEFAULT_METRIC_SUITES
    lease: float = DEFAULT_LEASE
    replica: str | None = None
    max_open_runs: int = DEFAULT_MAX_OPEN_RUNS
    """Open runs this replica decides at most: a request that would open more is refused as a
    whole with a retry hint (`Busy`), as one beyond the in-flight limits is, until runs end;
    its spans are retried, never lost, and a request for runs already open is taken."""
    settle_batch: int = 1000
    """Traces one tick settles at most (and expired ones it forgets); idle periods wait for
    the tick that settles the rest."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "canary_suites", MappingProxyType(dict(self.canary_suites)))
        if not self.lease >= MIN_LEASE:
            raise ValueError(f"lease must be at least {MIN_LEASE:g} seconds, got {self.lease!r}")
