"""The Assessment: one immutable answer that every report, span and snapshot is rendered from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from .case_names import Naming
from .policy import Policy
from .sequential.rule import PopulationVerdict
from .stats import ChangeRate, PassRate, Quantiles, Reliability, Stability
from .trial_model import Isolation as Isolation  # a run's isolation is part of its RunInfo


class Status(str, Enum):
    """The admission answer for a run."""

    QUALIFIED = "qualified"
    REJECTED = "rejected"
    INCONCLUSIVE = "inconclusive"

    @property
    def exit_code(self) -> int:
        """The CLI exit code: 0 qualified, 1 rejected, 3 inconclusive."""
        return {"qualified": 0, "rejected": 1, "inconclusive": 3}[self.value]


@dataclass(frozen=True)
class Reason:
    """One machine code and its plain-language message."""

    code: str
    """A reason code: the value of an `admission.ReasonCode`."""
    message: str


class RelationStatus(str, Enum):
    """What a metamorphic relation showed."""

    VIOLATED = "violated"
    ERRORED = "errored"
    HELD = "held"
    NOT_EXERCISED = "not_exercised"


@dataclass(frozen=True)
class RelationResult:
    """Per relation, the routes whose cases kept (held) or changed (violated) their decision,
    and those where the check could not be made (errored): the transform or the agent raised,
    or the case's first answer was an error. Each route is in at most one list: violated wins,
    then errored; a route is held only when every case checked on it held.

    A relation that changed no input was not exercised: it proves nothing, so it never counts
    as held. An errored check is a fault, not a verdict: it is neither violated nor vacuous.
    """

    name: str
    violated: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    errored: tuple[str, ...] = ()

    @property
    def status(self) -> RelationStatus:
        """Violated, errored, held or not exercised, in that order of precedence."""
        if self.violated:
            return RelationStatus.VIOLATED
        if self.errored:
            return RelationStatus.ERRORED
        return RelationStatus.HELD if self.held else RelationStatus.NOT_EXERCISED


@dataclass(frozen=True)
class RunInfo:
    """What was run: ids, the decision point, isolation and how case ids were derived."""

    id: str = "run"
    suite: str = "suite"
    point: str = "decision"
    isolation: Isolation = Isolation.UNKNOWN
    fingerprints: str = "case-ids"
    """`keyed` (HMAC), `unkeyed` (plain SHA-256) or `case-ids` (explicit ids)."""


@dataclass(frozen=True)
class TrialCounts:
    """How many trials were planned and received, and how they ended."""

    expected: int
    received: int
    decisions: int
    no_decisions: int
    errors: int
    conflicts: int
    duplicates: int
    error_types: Mapping[str, int]
    late: int = 0
    """Records that reached a receiver after the run was final: counted, never assessed."""
    ambiguous_order: int = 0
    """Trials whose decided path was ordered across spans that started in the same instant
    (canonically: `decision_rules`), so its order there was not observed."""

    @property
    def missing(self) -> int:
        """Planned trials that were not received."""
        return max(0, self.expected - self.received)


@dataclass(frozen=True)
class RouteStability:
    """The change rate of the cases intended for one route, judged at the route's tolerance."""

    route: str
    cases: int
    change: ChangeRate
    targeted: bool
    flip_pairs: tuple[FlipPair, ...] = ()
    ambiguous_pairs: int = 0
    """Its pairs equal only up to the order of tied steps: left out of `change` (`ties`)."""
    worst_case: ChangeRate | None = None
    """Its test with its ambiguous pairs counted as flips, judged with the run's other tests so
    counted (`WorstCase`); None when no pair of the run was ambiguous."""


@dataclass(frozen=True)
class WorstCase:
    """The claim's tests with every rerun pair equal only up to the order of tied steps counted
    as a flip (a case's as flips of that case): a run is qualified only if these would qualify
    it too, so pairs whose order the telemetry did not show never hide flips. Each route's is on
    its row (`RouteStability.worst_case`)."""

    pooled: ChangeRate
    population: PopulationVerdict


@dataclass(frozen=True)
class FlipPair:
    """Two decisions a rerun pair flipped between, and how often."""

    routes: tuple[str, str]
    count: int


@dataclass(frozen=True)
class Coverage:
    """Which contract decisions the cases intend and the trials reached."""

    declared: bool
    required: tuple[str, ...]
    intended: Mapping[str, int]
    observed: tuple[str, ...]
    missing_intended: tuple[str, ...]
    missing_observed: tuple[str, ...]
    unknown: tuple[str, ...]
    under_cased: tuple[str, ...]
    critical_missing: tuple[str, ...]
    minimum_cases: Mapping[str, int]
    unordered: tuple[str, ...] = ()
    """Required routes not reached but by tied paths that may as well be another allowed
    decision: neither shown reached nor missing."""

    @property
    def satisfied(self) -> bool:
        return not (
            self.missing_intended
            or self.missing_observed
            or self.unknown
            or self.under_cased
            or self.unordered
        )


@dataclass(frozen=True)
class Dominance:
    """The most common first decision across cases, and whether the probes collapsed onto it."""

    verdict: str | None
    share: float
    cases: int
    collapsed: bool


@dataclass(frozen=True)
class CaseResult:
    """One case: its route, how many trials and pairs, and its stable verdict if it has one."""

    case: str
    run: str | None
    """The run it was seen in; None for a suite case that received no trial."""
    route: str | None
    trials: int
    errors: int
    pairs: int
    flips: int
    verdict: str | None
    """The decision every decided trial agreed on; None when they disagree or none decided."""
    passed: int = 0
    judged: int = 0
    """Trials an evaluator judged, and passed."""
    pass_rate: PassRate | None = None
    """Its pass rate against the required rate, when one is required and a trial was judged."""
    ambiguous_pairs: int = 0
    """Pairs equal only up to the order of tied steps: not among `pairs` (`ties`)."""


@dataclass(frozen=True)
class PassCounts:
    """How many trials an evaluator judged, and passed: pooled and per route."""

    passed: int
    judged: int
    routes: Mapping[str, tuple[int, int]]
    """route -> (passed, judged), for routes with judged trials."""
    route_rates: Mapping[str, PassRate] = field(default_factory=dict)
    """route -> its pass rate against the required rate, when one is required."""
    skipped: int = 0
    """Trials whose expensive tiers (semantic, judge) were skipped: a cheaper one failed."""

    def unreliable_routes(self) -> tuple[str, ...]:
        """Routes whose pass rate is shown below the required rate."""
        return tuple(
            route
            for route, rate in self.route_rates.items()
            if rate.result is Reliability.UNRELIABLE
        )


@dataclass(frozen=True)
class InvariantCounts:
    """How many trials broke each invariant: blocking ones reject the run, warnings are reported."""

    failed: Mapping[str, int]
    warned: Mapping[str, int]


@dataclass(frozen=True)
class Stopping:
    """A run that could stop before its plan: sequential, or curtailed when nothing left to
    collect could qualify it."""

    sized_for: int
    """The calls the run was sized for: its plan, or its cap (or budget) when sequential."""
    curtailed: bool
    """It stopped because no outcome of the calls left could qualify it."""

    def describe(self, used: int) -> str:
        """How it stopped, `used` calls in."""
        avoided = f"{used} of at most {self.sized_for} calls ({self.sized_for - used} not made)"
        if self.curtailed:
            return f"curtailed after {avoided}: no outcome of the rest could qualify the run"
        if used < self.sized_for:
            return f"decided after {avoided}"
        return f"every one of the {self.sized_for} calls made"


@dataclass(frozen=True)
class Findings:
    """What the evidence shows, before the admission rule turns it into an answer."""

    run: RunInfo
    policy: Policy
    trials: TrialCounts
    pooled: ChangeRate
    routes: tuple[RouteStability, ...]
    flip_pairs: tuple[FlipPair, ...]
    ambiguous_pairs: int
    """Rerun pairs equal only up to the order of steps whose spans started in the same
    instant: neither agreements nor flips, left out of every change rate (`ties`)."""
    coverage: Coverage
    dominance: Dominance
    cases: tuple[CaseResult, ...]
    passes: PassCounts
    pass_rate: PassRate | None
    """The pooled pass rate judged against the policy's required rate, when one is required."""
    invariants: InvariantCounts
    latency: Quantiles | None
    """Quantiles quantiles of the trials that recorded one (None when none did)."""
    tool_calls: Quantiles | None
    """Tools called per trial, for tool-path decisions (the same quantile statistics)."""
    in_progress: bool
    """The run is still collecting trials (a receiver's answer before the run is final)."""
    quality_failed: tuple[str, ...]
    """Cases whose first answer missed their expected route; the run stopped before repeats."""
    relations: tuple[RelationResult, ...]
    """The metamorphic relations the run checked, and where each held or broke."""
    declaration_conflict: bool
    """A second run span declared the run differently (the first declaration was kept)."""
    population: PopulationVerdict
    """The claim about new inputs, with the case as the unit (gating under that claim)."""
    stopping: Stopping | None
    """How a run that could stop early did: None for a run that could not."""
    family_tests: int
    """How many tests' stochastic sides were judged together (`family`): the claim's and every
    route's with pairs (a route whose test is the pooled one counts once)."""
    case_names: Naming
    """How the cases the case-level verdict counts are named, and the scheme it was judged on
    when names that no trial links may be one input (`case_names`)."""
    worst_case: WorstCase | None
    """The claim's tests with every ambiguous pair counted as a flip; None when none was."""

    @property
    def how_stopped(self) -> str | None:
        """How a run that could stop early stopped, in words (None for one that could not):
        its calls are the trials it set out to make when it stopped."""
        return None if self.stopping is None else self.stopping.describe(self.trials.expected)

    @property
    def cases_without_repeats(self) -> int:
        """Cases that received a trial but fewer than two, so they form no rerun pair."""
        return sum(1 for case in self.cases if 0 < case.trials - case.errors < 2)

    def routes_with(self, result: Stability) -> tuple[str, ...]:
        """Names of the routes judged `result`."""
        return tuple(route.route for route in self.routes if route.change.result is result)


@dataclass(frozen=True)
class Assessment(Findings):
    """The answer for one run: status, every reason, a headline and what to do next."""

    status: Status
    reasons: tuple[Reason, ...]
    headline: str
    next_steps: tuple[str, ...]

    @property
    def reason_codes(self) -> tuple[str, ...]:
        """The machine codes of every reason, as plain strings."""
        return tuple(reason.code for reason in self.reasons)
