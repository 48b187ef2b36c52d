"""What the framework tests share: a sink collecting trials, a suite of expected routes, a run
whose decisions by input must equal a script's (flips and pairs included), the trials a
receiver stored, and a decision as a harness process prints it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import verdictgate
from verdictgate import NoDecision, Suite, Trial
from verdictgate.receiver.store import Store
from verdictgate.suite import Case, Contract

HERE = Path(__file__).parent


class Collected:
    def __init__(self) -> None:
        self.trials: list[Trial] = []

    def add(self, trial: Trial) -> None:
        self.trials.append(trial)


def suite_of(expected: dict[str, str]) -> Suite:
    return Suite(
        name="support",
        point="support_router",
        cases=tuple(Case(f"c{n}", text, route) for n, (text, route) in enumerate(expected.items())),
        contract=Contract(frozenset(expected.values())),
    )


def decisions_by_input(suite: Suite, trials: list[Trial]) -> dict[str, list]:
    text_of = {case.id: case.input for case in suite.cases}
    found: dict[str, list] = {}
    for trial in sorted(trials, key=lambda t: t.index):
        found.setdefault(text_of[trial.case], []).append(trial.decision)
    return found


def flips_of(decisions: Sequence) -> int:
    return sum(a != b for a, b in zip(decisions[::2], decisions[1::2], strict=True))


def run_and_check(
    agent, suite: Suite, expected: dict[str, list], repeats: int = 6, **settings
) -> verdictgate.Assessment:
    """Run `agent` (with `settings` for `verdictgate.run`): its trials' decisions by input must
    be `expected`, its flips and pairs theirs; the assessment."""
    sink = Collected()
    assessment = verdictgate.run(agent, suite, repeats=repeats, sink=sink, **settings)
    assert decisions_by_input(suite, sink.trials) == expected
    assert assessment.pooled.flips == sum(flips_of(d) for d in expected.values())
    assert assessment.pooled.pairs == len(expected) * repeats // 2
    return assessment


def stored_trials(store: Path, run: str, expected: int, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while True:
        reader = Store(store)
        found = {
            (t.case, t.index): (t.decision, t.error_type) for t in reader.evidence(run).trials()
        }
        reader.close()
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.25)


def decision_of(value) -> object:
    if isinstance(value, dict):
        return NoDecision(value["no_decision"])
    return tuple(value) if isinstance(value, list) else value


def harness_output(python: str, script: str, *args: str, timeout: float) -> str:
    """What a harness script of this folder printed, run by `python` (a framework's own
    environment) with `args`; the test fails with the tail of its errors when it fails."""
    done = subprocess.run(
        [python, str(HERE / script), *args],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
