"""What the sequential rule costs a route judged among others (Holm's step-down), beside the
floor no valid test can beat: issue 38's figures, each computed exactly, in one run.

A route flipping at 4t among six, with the pooled change rate seven tests, is the first of
Holm's step-down, held to 2.5% / 7: the expected pairs to reject it with the threshold tuned to
that level (`level_thresholds.stochastic_threshold`), beside Wald's bound log(1 / level) / KL(4t || t);
the pairs to qualify a perfectly repeatable agent; and both wrong answers at a change rate of
exactly t: "deterministic" (the rule alone) and "stochastic" for a whole run (the sum over its
tests of each one's chance of ever being stochastic at its level, summed by the exact binomial
code of the tests, written apart from verdictgate's statistics).

    python benchmarks/sequential_family.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from binomial_sums import sequential_false_rejection_bound
from verdictgate.level_thresholds import stochastic_threshold
from verdictgate.sequential.design import sequential_design
from verdictgate.stats import ALPHA

TOLERANCE, ROUTES = 0.05, 6


def main() -> None:
    t, flaky = TOLERANCE, 4 * TOLERANCE
    level = ALPHA / (ROUTES + 1)
    divergence = flaky * math.log(flaky / t) + (1 - flaky) * math.log((1 - flaky) / (1 - t))
    floor = math.log(1 / level) / divergence
    tuned = sequential_design(t, flaky, level=level)
    alone = sequential_design(t, flaky)
    perfect = sequential_design(t, 0.0, level=level)
    at_t = sequential_design(t, t, level=level)
    print(f"t = {t}, {ROUTES} routes and their pooled test: the first held to {level:.5f}")
    threshold = stochastic_threshold(t, level, 1)
    print(f"  threshold tuned to the level: E_st >= {threshold:.1f} (Ville's: {1 / level:.0f})")
    print(
        f"  a route flipping at 4t: rejected after {tuned.expected_pairs:.1f} pairs on average, "
        f"{tuned.expected_pairs / floor:.2f}x the floor of {floor:.1f} (issue 38: at most 1.1x);"
        f" alone {alone.expected_pairs:.1f}"
    )
    print(f"  a perfect agent qualifies at {perfect.expected_pairs:.0f} pairs (at most 76)")
    print(f'  at exactly t, the rule says "deterministic" {at_t.deterministic:.3%} of the time')
    for routes in (2, 6, 12):
        bounds = [
            sequential_false_rejection_bound(routes, tolerance, ALPHA / (routes + 1))
            for tolerance in (0.01, 0.05, 0.10)
        ]
        print(
            f"  a run of {routes:2} routes all at t = 0.01, 0.05, 0.10: falsely rejected at most "
            + ", ".join(f"{bound:.3%}" for bound in bounds)
            + " (exact bound; at most 2.5%)"
        )


if __name__ == "__main__":
    main()
