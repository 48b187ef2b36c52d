"""The `verdict_gate` fixture's object: assess, record the assessment on the test, fail it when
the run is not admitted."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypedDict

import pytest

from ..assessment import Assessment, Isolation, Status
from ..engine import Reported, assess
from ..evidence import Evidence
from ..policy import Policy
from ..runner.agent import Agent
from ..runner.suite_run import run
from ..suite import Suite
from ..trial_model import Trial
from .properties import PROPERTY_PREFIX

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..runner.run_options import RunSettings


class AssessSettings(TypedDict, total=False):
    """The keywords of `verdictgate.assess` after its trials, suite and policy."""

    run_id: str | None
    isolation: Isolation | None
    planned_trials: int | None
    reported: Reported | None


class Gate:
    """Assess a run for one test and fail the test when the run is not admitted."""

    def __init__(self, node: pytest.Item, *, inconclusive_fails: bool = True) -> None:
        self._node = node
        self.inconclusive_fails = inconclusive_fails
        self.assessments: list[Assessment] = []
        self._numbers = itertools.count()

    def run_id(self) -> str:
        """A run id for this test's next run: its node id (then `#2`, `#3`... for more runs)."""
        number = next(self._numbers)
        return self._node.nodeid + (f"#{number + 1}" if number else "")

    def run(
        self,
        agent: Agent | Callable[[str], object],
        suite: Suite,
        policy: Policy | None = None,
        **settings: Unpack[RunSettings],
    ) -> Assessment:
        """`verdictgate.run(agent, suite, policy, **settings)`, gated."""
        settings.setdefault("run_id", self.run_id())
        return self.check(run(agent, suite, policy, **settings))

    def assess(
        self,
        trials: Evidence | Iterable[Trial],
        suite: Suite | None = None,
        policy: Policy | None = None,
        **options: Unpack[AssessSettings],
    ) -> Assessment:
        """`verdictgate.assess(trials, suite, policy, **options)`, gated."""
        options.setdefault("run_id", self.run_id())
        return self.check(assess(trials, suite, policy, **options))

    def check(self, assessment: Assessment) -> Assessment:
        """Record `assessment` on the test and fail the test unless the run is qualified (or
        inconclusive, when inconclusive runs pass)."""
        self.assessments.append(assessment)
        properties = self._node.user_properties
        properties[:] = [(k, v) for k, v in properties if not str(k).startswith(PROPERTY_PREFIX)]
        properties.extend(_properties(assessment))
        admitted = assessment.status is Status.QUALIFIED or (
            assessment.status is Status.INCONCLUSIVE and not self.inconclusive_fails
        )
        if not admitted:
            pytest.fail(sendable(explanation(assessment)), pytrace=False)
        return assessment


def sendable(text: str) -> str:
    """Text a pytest-xdist worker can send its controller (execnet sends UTF-8 only): a lone
    surrogate, which a suite's own labels may hold, written as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _properties(a: Assessment) -> list[tuple[str, str]]:
    return [
        (PROPERTY_PREFIX + name, sendable(value))
        for name, value in (
            ("status", a.status.value),
            ("exit_code", str(a.status.exit_code)),
            ("run", a.run.id),
            ("headline", a.headline),
            ("reasons", ",".join(a.reason_codes)),
            ("trials", f"{a.trials.received}/{a.trials.expected}"),
        )
    ]


def explanation(a: Assessment) -> str:
    """Why the run was not admitted: its headline, every reason, what to do next."""
    lines = [f"verdictgate: {a.headline}"]
    lines += [f"  reason {r.code}: {r.message}" for r in a.reasons]
    lines += [f"  next: {step}" for step in a.next_steps[:5]]
    return "\n".join(lines)
