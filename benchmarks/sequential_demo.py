"""What a sequential run of the demo's flipping router costs, in calls, over seeded runs: the
figures docs/statistics.md quotes beside the fixed plan's.

The router's card_security route flips at random between two answers; each run draws its coin
from its seed, so the figures reproduce exactly.

    python benchmarks/sequential_demo.py [--runs 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import verdictgate
from verdictgate import Status

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
from payment_router import route  # noqa: E402  (examples/, on the path above)


def flipping_router(seed: int):
    coin = random.Random(seed)

    def decide(message: str) -> str:
        label = route(message)
        return (
            coin.choice(["card_security", "merchant_dispute"])
            if label == "card_security"
            else label
        )

    return decide


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    suite = verdictgate.load_suite(EXAMPLES / "payment_suite.json")
    fixed = verdictgate.plan_run(suite, verdictgate.Policy()).calls
    calls, rejected = [], 0
    for seed in range(runs):
        assessment = verdictgate.run(flipping_router(seed), suite, sequential=True)
        rejected += assessment.status is Status.REJECTED
        calls.append(assessment.trials.received)
    calls.sort()
    within = sum(c <= 0.15 * fixed for c in calls) / runs
    print(f"fixed plan: {fixed} calls")
    print(
        f"sequential, {runs} runs: rejected {rejected}, mean {statistics.fmean(calls):.0f} calls, "
        f"median {statistics.median(calls):.0f}, 90th percentile {calls[int(0.9 * runs) - 1]}, "
        f"at most {calls[-1]}; {within:.0%} within 15% of the fixed plan's calls"
    )


if __name__ == "__main__":
    main()
