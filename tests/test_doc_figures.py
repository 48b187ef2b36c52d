"""Every statistical figure README.md and docs/statistics.md quote is computed here, by exact
sums or by the project's own exact passes, and must appear in the text as computed: a change
to a rule that moves a figure fails this test until the docs say the new one."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from binomial_sums import (
    boundaries,
    by_method,
    false_rejection_of_family,
    looked_at_every_pair,
    pmf,
    sequential_false_rejection_bound,
    worst_errors,
)
from conftest import report_of
from verdictgate.level_thresholds import stochastic_threshold
from verdictgate.sequential.design import default_max_pairs, sequential_design
from verdictgate.stats import ALPHA, Method, Stability, pairs_needed, sequential_evalues

ROOT = Path(__file__).resolve().parents[1]
STATISTICS = (ROOT / "docs" / "statistics.md").read_text()
README = (ROOT / "README.md").read_text()
EXACT, WILSON = Method.EXACT, Method.WILSON


def pct(value: float, digits: int = 3) -> str:
    """A probability as the docs write it: 0.0770 -> `7.70%`, 0.02499976 -> `2.49998%`."""
    return f"{value * 100:#.{digits}g}%".replace(".%", "%")


def in_text(text: str, phrase: str) -> None:
    """The phrase, with any run of whitespace matching a line break or a space."""
    pattern = r"\s+".join(map(re.escape, phrase.split()))
    assert re.search(pattern, text), f"the docs do not say {phrase!r}"


def test_the_default_rules_worst_errors() -> None:
    quoted = []
    for t in (0.05, 0.01, 0.10):
        (det, _), (stoch, _) = worst_errors(EXACT, t, 1000)
        quoted += [pct(det, 6 if t == 0.05 else 5), pct(stoch, 5)]
    in_text(STATISTICS, f'at most {quoted[0]} and its false "stochastic" at most {quoted[1]}')
    in_text(STATISTICS, f"({quoted[2]} and {quoted[3]} at t = 0.01, {quoted[4]} and {quoted[5]}")


def test_wilsons_errors() -> None:
    (det_05, at_05), (stoch_05, at_stoch) = worst_errors(WILSON, 0.05, 1000)
    (_, _), (stoch_01, _) = worst_errors(WILSON, 0.01, 1000)
    (det_10, at_10), _ = worst_errors(WILSON, 0.10, 1000)
    assert at_stoch == 3
    in_text(
        STATISTICS,
        f"up to {pct(stoch_05)} of the time (1 flip in 3 pairs at t = 0.05; "
        f"{pct(stoch_01)} at t = 0.01)",
    )
    in_text(
        STATISTICS,
        f"reaches {pct(det_05)} (n = {at_05}, t = 0.05) and {pct(det_10)} (n = {at_10}, t = 0.10)",
    )
    assert pairs_needed(0.10, method=WILSON) == 35
    in_text(STATISTICS, f"at its tolerance {pct(0.9**35, 4)} of the time")
    in_text(README, f'whose false "stochastic" reaches {pct(stoch_05)} (3 pairs)')


def test_the_pairs_plan_asks_for(cli) -> None:
    def planned(tolerance: str, *method: str) -> int:
        stdout = cli("plan", "--tolerance", tolerance, *method).stdout
        return int(stdout.split(" pairs at ")[0].removeprefix("with no flip, "))

    default = [planned(t) for t in ("0.05", "0.01", "0.10")]
    wilson = [planned(t, "--method", "wilson") for t in ("0.05", "0.01", "0.10")]
    assert default == [pairs_needed(t) for t in (0.05, 0.01, 0.10)]
    for text in (README, STATISTICS):
        in_text(
            text,
            f"`plan` at 5%, 1% and 10% asks for {default[0]}, {default[1]} and {default[2]} pairs",
        )
    in_text(README, f"{wilson[0]}, {wilson[1]} and {wilson[2]})")


def test_the_family_of_routes() -> None:
    alone = false_rejection_of_family(6, 12, 0.05, EXACT, ALPHA)
    together = false_rejection_of_family(6, 12, 0.05, EXACT, ALPHA / 7)
    assert pairs_needed(0.05) == 72 == 6 * 12  # the default plan's pairs for six routes
    in_text(STATISTICS, f"would be falsely rejected {pct(alone)} of the time")
    in_text(STATISTICS, f"{pct(together)} for those six routes")
    worst = max(
        false_rejection_of_family(m, n, t, EXACT, ALPHA / (m + 1))
        for m in range(2, 13)
        for n in range(1, 151)
        for t in (0.01, 0.05, 0.10)
    )
    in_text(STATISTICS, f"at most {pct(worst)} over 2 to 12 routes of 1 to 150 pairs")
    wilson_pairs = math.ceil(pairs_needed(0.05, method=WILSON) / 6)
    wilson_together = false_rejection_of_family(6, wilson_pairs, 0.05, WILSON, ALPHA / 7)
    wilson_alone = false_rejection_of_family(6, wilson_pairs, 0.05, WILSON, ALPHA)
    in_text(
        STATISTICS,
        f"six Wilson routes of {wilson_pairs} pairs each are still falsely "
        f"rejected {pct(wilson_together)} of the time judged together "
        f"({pct(wilson_alone)} alone)",
    )


def test_peeking_and_the_sequential_design() -> None:
    _, *exact = looked_at_every_pair(lambda x, n: by_method(EXACT)(x, n, 0.05), 0.05, 300)
    _, *wilson = looked_at_every_pair(lambda x, n: by_method(WILSON)(x, n, 0.05), 0.05, 300)
    in_text(
        STATISTICS,
        f'gives {pct(exact[0])} false "deterministic" and {pct(exact[1])} '
        f'false "stochastic" (Wilson: {pct(wilson[0])} and {pct(wilson[1])})',
    )
    flaky, at_t = sequential_design(0.05, 0.2), sequential_design(0.05, 0.05)
    in_text(
        STATISTICS,
        f"certified at {pairs_needed(0.05, method=Method.SEQUENTIAL)} pairs "
        f"(t = 0.05) instead of {pairs_needed(0.05)}",
    )
    in_text(
        STATISTICS,
        f"4t after {flaky.expected_pairs:.1f} pairs on average, against a fixed "
        f"plan's {pairs_needed(0.05)}",
    )
    in_text(
        STATISTICS,
        f'"deterministic" {pct(at_t.deterministic)} of the time and '
        f'"stochastic" {pct(at_t.stochastic)}',
    )
    in_text(STATISTICS, f"runs to its cap {at_t.undecided:.0%} of the time")


@pytest.mark.parametrize("method", [EXACT, WILSON])
def test_what_curtailment_costs(method) -> None:
    """A 4t agent on the plan sized for zero flips: the whole plan rejects it by the fixed rule;
    curtailed, it stops at the first flip and is judged there by the sequential rule."""
    n = pairs_needed(0.05, method=method)
    fixed = math.fsum(pmf(n, 0.2)[boundaries(by_method(method), 0.05, n)[-1][1] :])
    curtailed = math.fsum(
        0.8 ** (k - 1) * 0.2
        for k in range(1, n + 1)
        if sequential_evalues(1, k, 0.05).stochastic >= 1 / ALPHA
    )
    assert curtailed == 0.0
    if method is EXACT:
        in_text(
            STATISTICS,
            f"rejected 0% of the time curtailed, against {pct(fixed)} by the whole fixed plan",
        )
    else:
        in_text(STATISTICS, f"(Wilson's {n}-pair plan: {pct(fixed)})")


def test_the_design_table_and_the_suites_price(cli) -> None:
    """`plan`'s table of the sequential design at 5%, and `plan --suite`'s calls, as quoted."""
    designs = [sequential_design(0.05, p) for p in (0.0, 0.0125, 0.05, 0.1, 0.2)]
    rows = {
        "expected pairs": [f"{d.expected_pairs:.1f}" for d in designs],
        "P(deterministic)": [f"{d.deterministic:.2%}" for d in designs],
        "P(stochastic)": [f"{d.stochastic:.2%}" for d in designs],
    }
    for name, cells in rows.items():
        in_text(STATISTICS, f"| sequential, {name} | " + " | ".join(cells) + " |")
    in_text(
        README,
        f"| {pairs_needed(0.05, method=Method.SEQUENTIAL)} pairs | "
        f"{round(designs[-1].expected_pairs)} pairs on average |",
    )
    suite = report_of(cli("plan", "--suite", "examples/payment_suite.json", "--format", "json"))
    certify, fixed = suite["suite"]["sequential"]["calls_to_certify"], suite["suite"]["calls"]
    in_text(
        README,
        f"needs {certify:,} calls to qualify an agent that never flips, against the "
        f"fixed plan's {fixed}",
    )
    in_text(
        STATISTICS,
        f"{certify:,} calls to qualify an agent that never flips (the fixed plan: {fixed})",
    )


def test_a_route_among_six_at_the_threshold_tuned_to_its_level() -> None:
    """A 4t route among six (2.5% / 7, the first level of Holm's step-down): the expected pairs
    to reject it, with the threshold tuned to its level and with Ville's 1 / level, beside the
    floor no valid test at that level beats on average (Wald's bound)."""
    level, t, p = ALPHA / 7, 0.05, 0.2
    tuned = sequential_design(t, p, level=level)
    threshold = stochastic_threshold(t, level, 1)

    def by_ville(flips: int, pairs: int) -> Stability:
        evalues = sequential_evalues(flips, pairs, t)
        if evalues.deterministic >= 1 / ALPHA:
            return Stability.DETERMINISTIC
        return Stability.STOCHASTIC if evalues.stochastic >= 1 / level else Stability.UNDECIDED

    ville, *_ = looked_at_every_pair(by_ville, p, default_max_pairs(t))
    floor = math.log(1 / level) / (p * math.log(p / t) + (1 - p) * math.log((1 - p) / (1 - t)))
    assert tuned.expected_pairs <= 1.1 * floor  # issue 38's bound
    in_text(STATISTICS, f"is {threshold:.1f} instead of {1 / level:.0f}")
    in_text(
        STATISTICS,
        f"rejected after **{tuned.expected_pairs:.1f} pairs** on average instead of {ville:.1f}, "
        f"**{tuned.expected_pairs / floor:.2f}x** the {floor:.1f} pairs",
    )
    alone, perfect = sequential_design(t, p), sequential_design(t, 0.0, level=level)
    in_text(STATISTICS, f"Alone it still takes {alone.expected_pairs:.1f}")
    in_text(STATISTICS, f"qualifies at {perfect.expected_pairs:.0f} pairs)")


def test_a_sequential_run_of_many_routes_is_falsely_rejected_within_the_bound() -> None:
    bounds = [
        sequential_false_rejection_bound(routes, t, ALPHA / (routes + 1))
        for routes in (2, 6, 12)
        for t in (0.01, 0.05, 0.10)
    ]
    in_text(STATISTICS, f"at most {pct(max(bounds))} (an exact bound, below;")
    low, high = pct(min(bounds))[:-1], pct(max(bounds))
    in_text(STATISTICS, f"{low}\N{EN DASH}{high} for those runs")
