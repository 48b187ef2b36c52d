"""Collecting a run round by round and stopping as soon as the sequential rule decides it.

A round gives every open case one rerun pair (trials 2k and 2k + 1), so the pooled counts are
taken at complete rounds, as the rule's validity across cases needs. After each round the
trials so far are judged under the sequential rule (its answers stay valid however often they
are looked at); the run stops at the first round that decides it (`sequential_replay.decides`). A route
whose own test has decided stops collecting; a case also stops at its cap: its share of
`max_pairs` for its route (by default 15/t pairs a test, t the route's tolerance).
"""

from __future__ import annotations

import math
import threading

from ..assessment import Assessment
from ..engine import assess
from ..policy import Policy
from ..sequential_design import default_max_pairs
from ..suite import Suite
from ..trial_model import Trial


class SequentialCollection:
    """Which calls each round makes, and whether the trials so far decide the run."""

    def __init__(self, suite: Suite, policy: Policy, max_pairs: int | None = None) -> None:
        self.suite = suite
        self.policy = policy
        by_route: dict[str, int] = {}
        for case in suite.cases:
            if case.expected is not None:
                by_route[case.expected] = by_route.get(case.expected, 0) + 1
        tests = [(policy.tolerance, len(suite.cases))] + [
            (suite.contract.tolerance_for(route, policy.tolerance), cases)
            for route, cases in by_route.items()
        ]
        self.rounds = max(
            math.ceil((max_pairs or default_max_pairs(t)) / cases) for t, cases in tests
        )
        self._trials: list[Trial] = []
        self._lock = threading.Lock()

    @property
    def most_calls(self) -> int:
        """The calls the run makes if no round decides it."""
        return 2 * self.rounds * len(self.suite.cases)

    def add(self, trial: Trial) -> None:
        """A trial of this run, as it is recorded (from any thread)."""
        with self._lock:
            self._trials.append(trial)

    def round(self, number: int) -> list[tuple[str, int]]:
        """(case id, trial index) of the calls round `number` (from 0) makes; none after the
        last round."""
        if number >= self.rounds:
            return []
        return [
            (case.id, index) for case in self.suite.cases for index in (2 * number, 2 * number + 1)
        ]

    def judge(self, planned: int) -> Assessment:
        """The run as it stands, under the sequential rule."""
        with self._lock:
            trials = list(self._trials)
        return assess(trials, self.suite, self.policy, planned_trials=planned)
