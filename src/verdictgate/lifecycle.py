"""The run lifecycle: when a run's evidence is final, interim, or late, whatever the path.

One state machine serves the in-process span processor and the receiver alike. Events go in
(a trial, a run span that started or ended, the time); rulings come out:

- `Final`: the run is over, with why (`FinalReason`): its run span ended (in process), its declared
  plan is complete, it was `idle` too long, a sequential look found a round its rule decides
  (`close`), the collector shuts down, or it was made final before a restart;
- `Interim`: a canary's window is due (an in-progress admission that does not end it);
- `Look`: a sequential run holds new complete rounds, which the caller judges off the hot path
  and, when one decides it, ends with `close(run_id, FinalReason.SEQUENTIAL)`.

Records of a run that is over are `late`: counted per run, never added. It does no I/O, reads
no clock (every event says when it happened) and assesses nothing; it is not thread-safe (its
caller serialises events). Each event costs constant time but for its trial's bookkeeping;
`due` costs what is due and what changed since the last call, never the open runs' number.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from .declaration import RunDeclaration
from .evidence import MISSING, Evidence
from .trial_model import Trial

DEFAULT_IDLE_SECONDS = 30.0
"""Seconds without news after which a run is final, in process and in a receiver alike."""
KEPT_ENDED = 10_000
"""Runs that ended whose ids (and late counts) are remembered, so their records are late."""


class FinalReason(str, Enum):
    """Why a run is final."""

    RUN_ENDED = "run_ended"
    PLAN_COMPLETE = "plan_complete"
    IDLE = "idle"
    SEQUENTIAL = "sequential"
    SHUTDOWN = "shutdown"
    RECOVERED = "recovered"
    """Made final before a restart, admitted after it."""


@dataclass(frozen=True)
class Timing:
    """When runs end.

    `idle`: seconds without news after which a run is final (a canary's since its last trial;
    with `run_span_ends_run` False, also a declared run's since its run span or last trial);
    None: never for idleness. `window`: seconds between a canary's interim admissions (None:
    none). `run_span_ends_run`: True in process, where a run span ends after its trials; False
    in a receiver, where trials may still be in flight behind it (the run is final when its
    plan is complete or it is idle).
    """

    idle: float | None = DEFAULT_IDLE_SECONDS
    window: float | None = None
    run_span_ends_run: bool = True

    def __post_init__(self) -> None:
        if self.idle is not None and not self.idle >= 0:
            raise ValueError(f"idle must be a number of seconds, got {self.idle!r}")
        if self.window is not None and not self.window > 0:
            raise ValueError(f"window must be a positive number of seconds, got {self.window!r}")


class SpanState(Enum):
    """What a run's own span has told: nothing (a canary), that it started, that it ended."""

    NONE = 0
    STARTED = 1
    ENDED = 2


@dataclass(frozen=True)
class Final:
    """A run that is over: its evidence (no longer changed), what it is judged by, and why."""

    run_id: str
    reason: FinalReason
    evidence: Evidence
    declaration: RunDeclaration
    declared: bool
    """Its declaration came from its run span (else from a canary's suite, or the default)."""
    declaration_conflict: bool = False


@dataclass(frozen=True)
class Interim:
    """A canary's window: a copy of its evidence so far."""

    run_id: str
    evidence: Evidence
    declaration: RunDeclaration


@dataclass(frozen=True)
class Look:
    """New complete rounds of a sequential run (`first` .. `last`) to judge, with a copy of its
    evidence that holds them."""

    run_id: str
    first: int
    last: int
    evidence: Evidence
    declaration: RunDeclaration


Ruling = Final | Interim | Look
"""What the lifecycle rules a run is due (a trial's own decision is `trial_model.Decision`)."""


@dataclass
class _Run:
    """An open run."""

    run_id: str
    opened: float
    declaration: RunDeclaration
    evidence: Evidence = field(default_factory=Evidence)
    span: SpanState = SpanState.NONE
    declared: bool = False
    """Its declaration came from its run span."""
    last_news: float = 0.0
    window_mark: float = 0.0
    received: int = 0
    conflict: bool = False
    looked: int = 0
    """Rounds already handed out in a `Look`."""
    leading: dict[str, int] = field(default_factory=dict)
    """Per case, the complete rerun pairs it holds from its first trial on."""


class Lifecycle:
    """Open runs, their evidence, and the rulings they are due (see the module's text).

    `canary_declaration(run_id, suite, point)` says what a run without a run span is judged by
    (a known suite's declaration, or the default policy's)."""

    def __init__(
        self,
        timing: Timing | None = None,
        canary_declaration: Callable[[str, str | None, str | None], RunDeclaration] | None = None,
    ) -> None:
        self.timing = timing or Timing()
        self._canary = canary_declaration or RunDeclaration.default
        self._runs: dict[str, _Run] = {}
        self._ended: OrderedDict[str, int] = OrderedDict()
        """Runs that ended -> records that came after."""
        self._deadlines: list[tuple[float, str]] = []
        """(when to look again, run): at least one entry per open run with a timer, maybe
        stale (a later trial moved its deadline); looked at lazily."""
        self._changed: set[str] = set()
        """Sequential runs whose evidence changed since the last `due`."""
        self._finals: list[Final] = []
        self._amendable: set[str] = set()
        """Runs whose trials come from spans that may amend them while they are open."""
        self._resumed = -math.inf
        """News could arrive again from then on (`resumed`): no run is idle before a full idle
        period from it."""

    # Events

    def record(
        self, trial: Trial, now: float, suite: str | None = None, point: str | None = None
    ) -> bool | None:
        """Add a trial (`suite`, `point`: what its span names); True when it was the first
        record of its identity, False for a repeat, None when its run is over (late)."""
        new = self.record_all(trial.run, (trial,), now, suite, point)
        return None if new is None else new == 1

    def record_all(
        self,
        run_id: str,
        trials: Sequence[Trial],
        now: float,
        suite: str | None = None,
        point: str | None = None,
    ) -> int | None:
        """Add trials of one run (fastest when those of one case come together); how many
        were the first record of their identity, None when the run is over (all late)."""
        run = self._open(run_id, now, suite, point, len(trials))
        if run is None:
            return None
        run.last_news = now
        new = run.evidence.add_all(trials)
        if new:
            run.received += new
            if run.declaration.sequential:
                self._changed.add(run_id)
            self._check_plan(run)
        return new

    def heard(self, run_id: str, now: float) -> None:
        """News of an open run that is not a trial yet (a span of one of its framework trials,
        still settling): its idle period starts again. Nothing for a run not open."""
        run = self._runs.get(run_id)
        if run is not None:
            run.last_news = max(run.last_news, now)

    def resumed(self, now: float) -> None:
        """No news could arrive until `now` (a store away, a restart, a process paused): every
        open run has a full idle period from `now`, as if it had news then. Costs nothing per
        run: each looks again at its deadline once."""
        self._resumed = max(self._resumed, now)

    def amendable(self, run_id: str) -> None:
        """A run, open or about to open, whose trials come from spans that may yet amend them
        (a framework trial's, settled from what had arrived): a complete plan ends it once it is
        idle, not at once. Nothing for a run that ended."""
        if run_id not in self._ended:
            self._amendable.add(run_id)
        if len(self._amendable) > 2 * len(self._runs) + KEPT_ENDED:  # runs that never opened
            self._amendable &= self._runs.keys()

    def holds(self, run_id: str, trials: Iterable[Trial]) -> bool:
        """Whether an open run keeps a record of any of these trials' identities already."""
        run = self._runs.get(run_id)
        return run is not None and any(run.evidence.holds(trial) for trial in trials)

    def amend(self, run_id: str, evidence: Evidence) -> None:
        """An open run's evidence with some of its trials derived again (as its store holds
        them now): it replaces what the run held. Nothing for a run not open."""
        run = self._runs.get(run_id)
        if run is None:
            return
        run.evidence, run.received, run.leading = evidence, evidence.kept(), {}
        if run.declaration.sequential:
            self._changed.add(run_id)
        self._check_plan(run)

    @property
    def resumed_at(self) -> float:
        """Since when news could arrive again (`resumed`; -inf when it never stopped)."""
        return self._resumed

    def started(self, declaration: RunDeclaration, now: float) -> None:
        """A run span started: the run is judged by it and ends with it (never for idleness)."""
        run = self._open(declaration.run_id, now)
        if run is None or run.span is SpanState.ENDED:
            return
        run.span, run.declaration, run.declared = SpanState.STARTED, declaration, True

    def ended(self, declaration: RunDeclaration, now: float) -> bool:
        """A run span ended with its final declaration. In process the run is over; in a
        receiver it is final when its plan is complete or it is idle. A second run span that
        declares the run differently is a conflict (the first declaration stays). False (and
        counted late) when the run was over already."""
        run = self._open(declaration.run_id, now)
        if run is None:
            return False
        if run.span is SpanState.ENDED:
            run.conflict = run.conflict or declaration != run.declaration
        else:
            run.span, run.declaration, run.declared = SpanState.ENDED, declaration, True
        run.last_news = now
        if self.timing.run_span_ends_run:
            self._close(run, FinalReason.RUN_ENDED)
            return True
        if run.declaration.sequential:
            self._changed.add(run.run_id)
        self._check_plan(run)
        return True

    def restore(
        self,
        run_id: str,
        evidence: Evidence,
        declaration: RunDeclaration,
        *,
        declared: bool,
        opened: float,
        last_news: float,
    ) -> None:
        """Take up an open run as a store kept it (a receiver's restart, or a replica taking a
        run over): its evidence, what it is judged by, whether a run span declared it (then it
        has ended), and when it opened and last had news."""
        self._ended.pop(run_id, None)
        run = self._runs[run_id] = _Run(
            run_id,
            opened,
            declaration,
            evidence,
            SpanState.ENDED if declared else SpanState.NONE,
            declared,
            last_news=last_news,
            window_mark=opened,
            received=evidence.kept(),
        )
        self._schedule(run)
        if declaration.sequential:
            self._changed.add(run_id)
        self._check_plan(run)

    def release(self, run_id: str) -> None:
        """Forget an open run another decides now (a replica that took it over); nothing if it
        is not open."""
        self._runs.pop(run_id, None)
        self._amendable.discard(run_id)

    def set_aside(self, run_id: str) -> None:
        """A run that cannot be judged (its stored declaration unreadable): it decides nothing,
        and its records are counted late."""
        self._runs.pop(run_id, None)
        self._amendable.discard(run_id)
        self._ended[run_id] = 0

    def close(self, run_id: str, reason: FinalReason) -> None:
        """End a run now (a sequential look that decided it); nothing if it is over."""
        run = self._runs.get(run_id)
        if run is not None:
            self._close(run, reason)

    def shutdown(self) -> None:
        """End every open run."""
        for run in list(self._runs.values()):
            self._close(run, FinalReason.SHUTDOWN)

    # Rulings

    def due(self, now: float, timers: bool = True, waiting: Collection[str] = ()) -> list[Ruling]:
        """What is due at `now`: runs that ended since the last call, sequential runs' new
        complete rounds, and with `timers` canary windows and runs idle too long (a receiver
        looks at timers only on its tick, after settling what is due, so a run is never idle
        while a trial of it waits to settle; the runs `waiting` for one of their trials to
        settle are looked at again at the next call)."""
        rulings: list[Ruling] = []
        timing = self.timing
        held: list[str] = []
        while timers and self._deadlines and self._deadlines[0][0] <= now:
            _, run_id = heapq.heappop(self._deadlines)
            run = self._runs.get(run_id)
            if run is None:
                continue
            idle, window = timing.idle, timing.window
            is_idle = (
                run.span is not SpanState.STARTED
                and idle is not None
                and now - max(run.last_news, self._resumed) >= idle
            )
            if is_idle and run_id not in waiting:
                self._close(
                    run, FinalReason.PLAN_COMPLETE if self._planned(run) else FinalReason.IDLE
                )
                continue
            if (
                run.span is SpanState.NONE
                and window is not None
                and now - run.window_mark >= window
            ):
                run.window_mark = now
                rulings.append(Interim(run.run_id, run.evidence.snapshot(), run.declaration))
            if is_idle:  # idle once its trials settled: looked at again at the next call
                held.append(run_id)
            else:
                self._schedule(run)
        for run_id in held:
            heapq.heappush(self._deadlines, (now, run_id))
        for run_id in sorted(self._changed):
            run = self._runs.get(run_id)
            if run is not None and (look := self._look(run)) is not None:
                rulings.append(look)
        self._changed.clear()
        finals, self._finals = self._finals, []
        return [*finals, *rulings]

    # Queries

    def late(self, run_id: str) -> int:
        """Records of an ended run that came after it ended (0 when unknown)."""
        return self._ended.get(run_id, 0)

    # Inside

    def _open(
        self,
        run_id: str,
        now: float,
        suite: str | None = None,
        point: str | None = None,
        records: int = 1,
    ) -> _Run | None:
        """The open run, opened if new; None (and its `records` counted late) when it ended."""
        run = self._runs.get(run_id)
        if run is not None:
            return run
        if run_id in self._ended:
            self._ended[run_id] += records
            return None
        run = self._runs[run_id] = _Run(
            run_id, now, self._canary(run_id, suite, point), last_news=now, window_mark=now
        )
        self._schedule(run)
        return run

    def _schedule(self, run: _Run) -> None:
        """Put the run's next timer on the heap (none when no timer applies)."""
        timing = self.timing
        deadlines = []
        if run.span is not SpanState.STARTED and timing.idle is not None:
            deadlines.append(max(run.last_news, self._resumed) + timing.idle)
        if run.span is SpanState.NONE and timing.window is not None:
            deadlines.append(run.window_mark + timing.window)
        if deadlines:
            heapq.heappush(self._deadlines, (min(deadlines), run.run_id))

    def _check_plan(self, run: _Run) -> None:
        if self._planned(run) and run.run_id not in self._amendable:
            self._close(run, FinalReason.PLAN_COMPLETE)

    @staticmethod
    def _planned(run: _Run) -> bool:
        """Whether a run's declared plan is complete."""
        planned = run.declaration.planned_trials
        return run.span is SpanState.ENDED and planned is not None and run.received >= planned

    def _close(self, run: _Run, reason: FinalReason) -> None:
        del self._runs[run.run_id]
        self._amendable.discard(run.run_id)
        self._ended[run.run_id] = 0
        while len(self._ended) > KEPT_ENDED:
            self._ended.popitem(last=False)
        self._finals.append(
            Final(run.run_id, reason, run.evidence, run.declaration, run.declared, run.conflict)
        )

    def _look(self, run: _Run) -> Look | None:
        """The run's new complete rounds, when it holds every case it declares (and nothing
        else) from trial 0 on; None when none is new, or while its run span is open."""
        declaration = run.declaration
        if declaration.planned_cases is None or run.span is SpanState.STARTED:
            return None  # a run whose span is open ends with it: its harness stops it
        evidence = run.evidence
        cases = {case for _, case in evidence.cases}
        wanted = declaration.case_ids
        if len(cases) != declaration.planned_cases or (wanted and cases != wanted):
            return None
        rounds = min(self._leading(run, case) for case in cases)
        if rounds <= run.looked:
            return None
        first, run.looked = run.looked + 1, rounds
        return Look(run.run_id, first, rounds, evidence.snapshot(), declaration)

    @staticmethod
    def _leading(run: _Run, case: str) -> int:
        """The case's complete pairs from trial 0 on (resumed where the last look stopped)."""
        slots = run.evidence.cases[(run.run_id, case)].slots
        pairs = run.leading.get(case, 0)
        while 2 * pairs + 1 < len(slots) and MISSING not in (
            slots[2 * pairs],
            slots[2 * pairs + 1],
        ):
            pairs += 1
        run.leading[case] = pairs
        return pairs
