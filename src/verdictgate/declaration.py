"""What a run declares (its contract, policy and plan), and its evidence judged against that."""

from __future__ import annotations

from dataclasses import dataclass

from .assessment import Isolation, RelationResult, Stopping
from .judgement import Method
from .policy import Policy
from .suite import Suite


@dataclass(frozen=True)
class RunDeclaration:
    """What a run declares (a run span, a canary's suite, or a default for a canary without
    either): the run, its contract and policy, and its plan."""

    run_id: str
    suite: Suite
    policy: Policy
    planned_cases: int | None
    planned_trials: int | None
    isolation: Isolation | None
    """How it isolated its reruns; None when it does not say (its records may)."""
    quality_failed: tuple[str, ...] = ()
    relations: tuple[RelationResult, ...] = ()
    stopping: Stopping | None = None

    @classmethod
    def default(cls, run_id: str, suite: str | None, point: str | None) -> RunDeclaration:
        """A canary that declares nothing: the default policy, named by the `suite` and
        `point` its decision spans carry."""
        return cls(
            run_id=run_id,
            suite=Suite(name=suite or Suite.name, point=point or Suite.point),
            policy=Policy(),
            planned_cases=None,
            planned_trials=None,
            isolation=None,
        )

    @classmethod
    def of_suite(cls, run_id: str, suite: Suite) -> RunDeclaration:
        """A canary of a known suite, judged by its contract, policy and cases (its plan's size
        is not known)."""
        return cls(
            run_id=run_id,
            suite=suite,
            policy=suite.policy(),
            planned_cases=len(suite.cases),
            planned_trials=None,
            isolation=None,
        )

    @property
    def sequential(self) -> bool:
        """Judged by the sequential rule: its answer is that of the first round the rule
        decides, whenever and however its trials arrived (`engine.assess_in_rounds`)."""
        return self.policy.method is Method.SEQUENTIAL

    @property
    def case_ids(self) -> frozenset[str]:
        """The cases it names (none when only their number is known)."""
        return frozenset(case.id for case in self.suite.cases)

    @property
    def metric_routes(self) -> frozenset[str]:
        """The routes its metrics may name: its contract's."""
        contract = self.suite.contract
        return frozenset(contract.allowed | (contract.required or frozenset()))
