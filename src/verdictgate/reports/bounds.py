"""Bounded reports: a run with thousands of labels or cases still gets a report of a few hundred
rows. Every renderer draws from `bounded(assessment)`; what it leaves out is counted in
`Omitted`, which the reports state (the JSON report's `omitted` object), never silently.

Every label in it (routes, decisions, case ids, error types, names) longer than 160 characters
is shortened as `shown` does, so a report stays small whatever labels a sender chose; the run's
own id, suite and point are kept whole, and so are the reasons, headline and next steps (their
messages shorten the labels they name).

Kept first: the rows that explain the status (flipping, errored and failing cases; stochastic
and targeted routes; the most frequent labels). Counts by label keep their top entries and fold
the rest into one `(other)` entry, so their totals still add up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, TypeVar

from ..assessment import Assessment, CaseResult, RouteStability
from ..shown import shown
from ..stats import Stability

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

MAX_LABELS = 100
"""Most routes, labels and names a report lists in one table or list."""
MAX_CASES = 1000
"""Most cases a report lists."""
OTHER = "(other)"
"""The entry that holds what a bounded count by label left out."""

T = TypeVar("T")


@dataclass
class Omitted:
    """How many entries each bounded part of a report left out (only parts that lost some)."""

    counts: dict[str, int] = field(default_factory=dict)

    def sentence(self) -> str | None:
        """What was left out, in words (None when nothing was)."""
        if not self.counts:
            return None
        parts = ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in self.counts.items())
        return f"Not listed (the report is bounded): {parts}."

    def keep(
        self, name: str, items: Sequence[T], limit: int, rank: Callable[[T], SupportsRichComparison]
    ) -> tuple[T, ...]:
        """The `limit` highest-ranked items, in their original order."""
        if len(items) <= limit:
            return tuple(items)
        self.counts[name] = self.counts.get(name, 0) + len(items) - limit
        chosen = sorted(range(len(items)), key=lambda n: rank(items[n]))[:limit]
        return tuple(items[n] for n in sorted(chosen))

    def first(self, name: str, items: Sequence[T], limit: int = MAX_LABELS) -> tuple[T, ...]:
        """The first `limit` items."""
        if len(items) > limit:
            self.counts[name] = self.counts.get(name, 0) + len(items) - limit
        return tuple(items[:limit])

    def top(self, name: str, counts: Mapping[str, int], limit: int = MAX_LABELS) -> dict[str, int]:
        """The `limit` - 1 largest counts and one OTHER entry holding the rest."""
        if len(counts) <= limit:
            return dict(counts)
        ranked = sorted(  # a label that is itself named OTHER is folded with the rest
            ((label, n) for label, n in counts.items() if label != OTHER), key=lambda item: -item[1]
        )
        self.counts[name] = len(counts) - (limit - 1)
        rest = sum(n for _, n in ranked[limit - 1 :]) + counts.get(OTHER, 0)
        return {**dict(ranked[: limit - 1]), OTHER: rest}


def _case_rank(case: CaseResult) -> tuple[bool, bool, bool]:
    failing = case.pass_rate is not None and case.pass_rate.passed < case.pass_rate.judged
    return (not case.flips, not case.errors, not failing)


def _route_rank(route: RouteStability) -> tuple[bool, bool, int]:
    return (route.change.result is not Stability.STOCHASTIC, not route.targeted, -route.cases)


def bounded(a: Assessment) -> tuple[Assessment, Omitted]:
    """The assessment with every list and count by label bounded; what was left out."""
    o = Omitted()
    routes = o.keep("routes", a.routes, MAX_LABELS, _route_rank)
    routes = tuple(replace(r, flip_pairs=o.first("route_flip_pairs", r.flip_pairs)) for r in routes)
    c = a.coverage
    coverage = replace(
        c,
        required=o.first("required", c.required),
        intended=o.top("intended", c.intended),
        observed=o.first("observed", c.observed),
        missing_intended=o.first("missing_intended", c.missing_intended),
        missing_observed=o.first("missing_observed", c.missing_observed),
        unknown=o.first("unknown", c.unknown),
        under_cased=o.first("under_cased", c.under_cased),
        critical_missing=o.first("critical_missing", c.critical_missing),
    )
    passes = a.passes
    unreliable = set(passes.unreliable_routes())
    judged = tuple(passes.routes)
    kept = o.keep("pass_rate_routes", judged, MAX_LABELS, lambda route: route not in unreliable)
    kept_routes = set(kept)
    passes = replace(
        passes,
        routes={route: n for route, n in passes.routes.items() if route in kept_routes},
        route_rates={r: rate for r, rate in passes.route_rates.items() if r in kept_routes},
    )
    result = replace(
        a,
        routes=routes,
        flip_pairs=o.first("flip_pairs", a.flip_pairs),
        coverage=coverage,
        cases=o.keep("cases", a.cases, MAX_CASES, _case_rank),
        passes=passes,
        trials=replace(a.trials, error_types=o.top("error_types", a.trials.error_types)),
        invariants=replace(
            a.invariants,
            failed=o.top("invariants_failed", a.invariants.failed),
            warned=o.top("invariants_warned", a.invariants.warned),
        ),
        next_steps=o.first("next_steps", a.next_steps, 20),
        case_names=replace(  # the judged scheme, naming the most cases, comes first
            a.case_names, schemes=o.first("case_name_schemes", a.case_names.schemes)
        ),
    )
    labelled = {
        f.name: _shortened(getattr(result, f.name))
        for f in dataclasses.fields(result)
        if f.name not in _KEPT_WHOLE
    }
    shortened = replace(result, **labelled)
    return replace(  # messages shorten the labels they name; this guards against a missed one
        shortened,
        reasons=tuple(replace(r, message=shown(r.message, MAX_PROSE)) for r in result.reasons),
        headline=shown(result.headline, MAX_PROSE),
        next_steps=tuple(shown(step, MAX_PROSE) for step in result.next_steps),
    ), o


_KEPT_WHOLE = frozenset({"run", "reasons", "headline", "next_steps"})
"""What `bounded` does not shorten as labels: the run's identity, and the prose."""
MAX_PROSE = 4000
"""The longest reason, headline or next step a report shows (a message naming its labels
shortened is far below it)."""


def _shortened(value: T) -> T:
    """`value` with every string in it, dictionary keys included, as `shown` shows it."""
    if isinstance(value, str):
        return shown(value)  # type: ignore[return-value]
    if isinstance(value, Enum) or value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, tuple):
        return tuple(_shortened(item) for item in value)  # type: ignore[return-value]
    if isinstance(value, list):
        return [_shortened(item) for item in value]  # type: ignore[return-value]
    if isinstance(value, dict):
        return {_shortened(k): _shortened(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, frozenset):
        return frozenset(_shortened(item) for item in value)  # type: ignore[return-value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: _shortened(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init
        }
        return replace(value, **changes)
    return value
