"""Collecting a run round by round, for a run that may stop before its plan.

A round gives every case with trials left one rerun pair (trials 2k and 2k + 1), so the pooled
counts are taken at complete rounds, as the rules' validity across cases needs. After each
round the trials so far are judged: a sequential run stops at the first round its rule decides
(`sequential.replay.decides`; its answers stay valid however often they are looked at); a
curtailed run (and a sequential run with a budget) stops as soon as no outcome of the calls
left could qualify it (`curtailment.can_still_qualify`). A sequential run is sized by the
most demanding test's cap: `max_pairs` pairs (by default 15/t, t the test's tolerance) spread
over its cases.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from enum import Enum

from ..assessment import Assessment
from ..curtailment import can_still_qualify
from ..engine import assess
from ..evidence import Evidence
from ..policy import Policy
from ..sequential.replay import decides
from ..sequential.rule import sequential_policy
from ..suite import Suite
from ..trial_model import Trial


class Stop(str, Enum):
    """Why a round ends the run."""

    DECIDED = "decided"
    CURTAILED = "curtailed"


class RoundCollection:
    """Which calls each round makes, and whether the trials so far end the run."""

    def __init__(
        self,
        suite: Suite,
        policy: Policy,
        trials_per_case: Mapping[str, int],
        *,
        sequential: bool,
        curtail: bool,
        budget: int | None = None,
        prior: Sequence[Trial] = (),
    ) -> None:
        """`policy` judges the run collected to its end; `budget` caps the calls made now, in
        whole rounds; `prior` are the trials of complete rounds an earlier, undecided run of
        this collection made (it goes on from there). ValueError when the sequential rule,
        which judges a run that stops early, cannot judge this one, `prior` cannot be
        continued, no call is left, or a run that curtails could not qualify even if every pair
        agreed: all found before any call."""
        self.suite = suite
        self.policy = policy
        self.stopped_policy = sequential_policy(policy, suite)
        self.sequential = sequential
        self.curtail = curtail
        self._trials_per_case = dict(trials_per_case)
        self.rounds = max((math.ceil(n / 2) for n in self._trials_per_case.values()), default=0)
        self.first_round = self._continued_from(prior) if prior else 0
        first_round_calls = len(self.round(self.first_round))
        if budget is not None:
            affordable, spent = self.first_round, 0
            while affordable < self.rounds:
                cost = len(self.round(affordable))
                if spent + cost > budget:
                    break
                spent += cost
                affordable += 1
            self.rounds = affordable
        self.sized_for = sum(len(self.round(number)) for number in range(self.rounds))
        if self.rounds <= self.first_round:
            raise ValueError(
                f"the budget leaves no round to collect: one pair of every case costs "
                f"{first_round_calls} calls"
            )
        if curtail and not self._can_still_qualify(assess(prior, suite, self.stopped_policy)):
            raise ValueError(
                f"even if every pair agreed, {self.sized_for} calls in all ("
                f"{self.sized_for - len(prior)} still to make) could not qualify the run: allow "
                "more (a larger budget or --max-pairs), or loosen the tolerance"
            )
        self._evidence = Evidence()  # the earlier run's trials too, as they are recorded again
        self._lock = threading.Lock()

    def _continued_from(self, prior: Sequence[Trial]) -> int:
        """The round an earlier run's trials end at, when it can be continued: it holds complete
        rounds of this suite's cases and its rule had not decided it."""
        evidence = Evidence(prior)
        done = evidence.complete_rounds()
        if done is None or {case for _, case in evidence.cases} != set(self._trials_per_case):
            raise ValueError(
                "the stored run does not end at a complete round of this suite's cases"
            )
        if decides(assess(evidence, self.suite, self.stopped_policy)):
            raise ValueError("the stored run is already decided: its answer stands")
        if done >= self.rounds:
            raise ValueError(
                f"the stored run already holds {done} rounds, all this run's cap allows: raise "
                "--max-pairs"
            )
        return done

    def add(self, trial: Trial) -> None:
        """A trial of this run, as it is recorded (from any thread)."""
        with self._lock:
            self._evidence.add(trial)

    def round(self, number: int) -> list[tuple[str, int]]:
        """(case id, trial index) of the calls round `number` (from 0) makes; none after the
        last round."""
        if number >= self.rounds:
            return []
        return [
            (case.id, index)
            for case in self.suite.cases
            for index in (2 * number, 2 * number + 1)
            if index < self._trials_per_case[case.id]
        ]

    def after_round(self, number: int) -> Stop | None:
        """Whether the run ends after round `number` (from 0)."""
        with self._lock:
            evidence = self._evidence.snapshot()
        judged: Assessment = assess(evidence, self.suite, self.stopped_policy)
        if self.sequential and decides(judged):
            return Stop.DECIDED
        if self.curtail and number + 1 < self.rounds and not self._can_still_qualify(judged):
            return Stop.CURTAILED
        return None

    def _can_still_qualify(self, judged: Assessment) -> bool:
        """Whether the run could qualify if every pair left agreed (`curtailment`)."""
        final_pairs = {
            case: min(n, 2 * self.rounds) // 2 for case, n in self._trials_per_case.items()
        }
        return can_still_qualify(judged, self.suite, final_pairs, self.policy)
