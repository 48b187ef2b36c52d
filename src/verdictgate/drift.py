"""Drift across builds: change rate and pass rate after minus before, with Newcombe intervals."""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .assessment import Assessment
from .errors import InputError
from .stats import difference_interval

if TYPE_CHECKING:
    from .baseline import Baseline
from .wire_types import JsonObject, JsonValue


@dataclass(frozen=True)
class Counts:
    """What one build showed: changes among rerun pairs, and evaluator passes among judged trials."""

    flips: int
    pairs: int
    passed: int
    judged: int


@dataclass(frozen=True)
class Summary:
    """A build's counts, pooled and per route."""

    pooled: Counts
    routes: Mapping[str, Counts]


@dataclass(frozen=True)
class Difference:
    """after - before, with its interval; `interval` is None when a side has nothing to count."""

    before: tuple[int, int]
    after: tuple[int, int]
    interval: tuple[float, float, float] | None

    @property
    def comparable(self) -> bool:
        return self.interval is not None

    def shown(self, higher_is_worse: bool) -> str:
        """`worse` or `better` when the interval lies wholly on one side of zero, else
        `no change shown` (or `not comparable`)."""
        if self.interval is None:
            return "not comparable"
        _, low, high = self.interval
        if low > 0:
            return "worse" if higher_is_worse else "better"
        if high < 0:
            return "better" if higher_is_worse else "worse"
        return "no change shown"


@dataclass(frozen=True)
class RouteDrift:
    route: str
    targeted: bool
    change: Difference
    pass_rate: Difference

    @property
    def regressed(self) -> bool:
        return _worse(self.change, self.pass_rate)


@dataclass(frozen=True)
class Comparison:
    """Pooled and per-route drift; a regression is a difference wholly on the bad side, pooled
    or on a route with a declared target (other routes are reported, not gated)."""

    change: Difference
    pass_rate: Difference
    routes: tuple[RouteDrift, ...]

    @property
    def regression(self) -> bool:
        return _worse(self.change, self.pass_rate) or any(
            route.regressed for route in self.routes if route.targeted
        )


def _worse(change: Difference, pass_rate: Difference) -> bool:
    return change.shown(higher_is_worse=True) == "worse" or pass_rate.shown(False) == "worse"


def summary_of(assessment: Assessment) -> Summary:
    """The counts of an assessment."""
    passes = assessment.passes
    return Summary(
        Counts(assessment.pooled.flips, assessment.pooled.pairs, passes.passed, passes.judged),
        {
            route.route: Counts(
                route.change.flips, route.change.pairs, *passes.routes.get(route.route, (0, 0))
            )
            for route in assessment.routes
        },
    )


def summary_document(summary: Summary) -> JsonObject:
    """The counts as JSON (kept in snapshots so a later build can be compared)."""

    def counts(c: Counts) -> dict[str, int]:
        return {"flips": c.flips, "pairs": c.pairs, "passed": c.passed, "judged": c.judged}

    return {
        "pooled": counts(summary.pooled),
        "routes": {r: counts(c) for r, c in summary.routes.items()},
    }


def summary_from_document(document: Mapping[str, JsonValue]) -> Summary:
    """The inverse of summary_document (a KeyError or TypeError when malformed)."""
    return Summary(
        Counts(**document["pooled"]),
        {route: Counts(**c) for route, c in document["routes"].items()},
    )


def counts_of(build: Assessment | Baseline | Summary) -> Summary:
    """A build's counts: an assessment's, or those a baseline keeps (InputError for a baseline
    made before snapshots kept them)."""
    if isinstance(build, Assessment):
        return summary_of(build)
    if isinstance(build, Summary):
        return build
    if build.counts is None:
        message = "the baseline has no counts (made by an older version)"
        raise InputError(message, field="evidence.counts")
    return build.counts


def compare(
    before: Assessment | Baseline | Summary,
    after: Assessment | Baseline | Summary,
    targets: Set[str] = frozenset(),
    confidence: float = 0.95,
) -> Comparison:
    """Every route either build has, and the pooled rates, after minus before; a build is an
    assessment or a loaded baseline. `targets` are the routes whose drift is a regression (a
    contract's targeted routes: `suite.contract.targets`)."""
    before, after = counts_of(before), counts_of(after)

    def drift(b: Counts, a: Counts) -> tuple[Difference, Difference]:
        flips = (b.flips, b.pairs), (a.flips, a.pairs)
        passed = (b.passed, b.judged), (a.passed, a.judged)
        change = Difference(*flips, difference_interval(*flips, confidence))
        passes = Difference(*passed, difference_interval(*passed, confidence))
        return change, passes

    empty = Counts(0, 0, 0, 0)
    routes = tuple(
        RouteDrift(
            route,
            route in targets,
            *drift(before.routes.get(route, empty), after.routes.get(route, empty)),
        )
        for route in sorted(set(before.routes) | set(after.routes))
    )
    return Comparison(*drift(before.pooled, after.pooled), routes)


def comparison_document(comparison: Comparison) -> JsonObject:
    """`verdictgate.compare/v1`: `regression`, `pooled` (change rate), `pooled_pass_rate`, routes."""

    def difference(d: Difference) -> JsonObject:
        value, low, high = d.interval if d.interval else (None, None, None)
        return {
            "before": list(d.before),
            "after": list(d.after),
            "comparable": d.comparable,
            "difference": value,
            "diff_low": low,
            "diff_high": high,
        }

    return {
        "schema": "verdictgate.compare/v1",
        "regression": comparison.regression,
        "pooled": difference(comparison.change),
        "pooled_pass_rate": difference(comparison.pass_rate),
        "routes": [
            {
                "route": r.route,
                "targeted": r.targeted,
                "regressed": r.regressed,
                "change_rate": difference(r.change),
                "pass_rate": difference(r.pass_rate),
            }
            for r in comparison.routes
        ],
    }
