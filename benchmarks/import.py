"""Benchmark `verdictgate assess --promptfoo` on a 1,000,000-row export beside AgentVerity.

Writes one promptfoo export (results version 3, indented by two spaces as `promptfoo eval -o`
writes it; rows modelled on a real recorded run: 1,000 tests over six routes, one route
flipping now and then), then runs `verdictgate assess --promptfoo` and `agentverity assess
--promptfoo` on the same file as child processes, reading wall time and peak memory from the
kernel (wait4).

    python benchmarks/import.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from assess import OUT, ROUTES, agentverity_command, measure

TESTS = 1000


def row(test: int, repeat: int, output: str) -> dict:
    text = ticket(test)
    return {
        "cost": 0,
        "gradingResult": {
            "pass": True, "score": 1, "reason": "All assertions passed", "namedScores": {},
            "tokensUsed": {"total": 0, "prompt": 0, "completion": 0, "cached": 0, "numRequests": 0},
            "componentResults": [{"pass": True, "score": 1, "reason": "Assertion passed",
                                  "assertion": {"type": "equals", "value": output}}],
        },
        "id": f"{test:08d}-{repeat:04d}-0000-0000-000000000000",
        "latencyMs": 200 + (test * 7 + repeat) % 100,
        "namedScores": {},
        "prompt": {"raw": text, "label": "{{ticket}}", "config": {}},
        "promptId": "4cf05d7e2584f59894b56192d86ecc4bb78e42fef311a9ae439299a50394b256",
        "promptIdx": 0,
        "provider": {"id": "file://router.py", "label": "payment-router"},
        "response": {"output": output, "cached": False},
        "score": 1,
        "success": True,
        "testCase": {"vars": {"ticket": text}, "assert": [{"type": "equals", "value": output}],
                     "options": {}, "metadata": {}},
        "testIdx": repeat * TESTS + test,
        "tokenUsage": {"prompt": 0, "completion": 0, "cached": 0, "total": 0, "numRequests": 1},
        "vars": {"ticket": text},
        "metadata": {},
        "failureReason": 0,
    }  # fmt: skip


def ticket(test: int) -> str:
    return f"Customer ticket number {test}: please route this payment question."


def write_suite() -> Path:
    """The reviewed cases, as an AgentVerity decision suite (both tools read it)."""
    path = OUT / "promptfoo-suite.json"
    cases = [
        {"input": ticket(test), "expected": ROUTES[test % len(ROUTES)]} for test in range(TESTS)
    ]
    contract = {"allowed": ROUTES, "required": ROUTES, "critical": []}
    path.write_text(
        json.dumps(
            {"schema": "agentverity.decision-suite/v1", "contract": contract, "cases": cases}
        )
    )
    return path


def generate(rows: int) -> Path:
    """Write the export once (rows are indented exactly as promptfoo indents them)."""
    path = OUT / f"promptfoo-{rows}.json"
    if path.exists():
        return path
    OUT.mkdir(exist_ok=True)
    rng = random.Random(11)
    repeats = rows // TESTS
    with open(path, "w") as stream:
        stream.write('{\n  "evalId": "eval-bench",\n  "results": {\n    "version": 3,\n')
        stream.write(
            '    "timestamp": "2026-11-30T00:00:00.000Z",\n    "prompts": [],\n    "results": [\n'
        )
        first = True
        for repeat in range(repeats):
            for test in range(TESTS):
                expected = ROUTES[test % len(ROUTES)]
                output = (
                    ROUTES[(test + 1) % len(ROUTES)]
                    if test % 50 == 0 and rng.random() < 0.2
                    else expected
                )
                text = json.dumps(row(test, repeat, output), indent=2)
                stream.write(("" if first else ",\n") + "      " + text.replace("\n", "\n      "))
                first = False
        stream.write(
            '\n    ],\n    "stats": {"successes": 0, "failures": 0}\n  },\n  "config": {}\n}\n'
        )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    path = generate(args.rows)
    suite = write_suite()
    common = ["assess", "--promptfoo", str(path), "--suite", str(suite)]
    vg_wall, vg_rss, vg_exit = measure(
        [sys.executable, "-m", "verdictgate", *common, "--format", "json"]
    )
    av_wall, av_rss, av_exit = measure([*agentverity_command(), *common])
    size = path.stat().st_size / 2**30
    print(
        f"promptfoo export: {args.rows:,} rows, {TESTS:,} tests, {size:.2f} GiB (indented as promptfoo writes it)"
    )
    print(f"{'tool':<32}{'wall s':>9}{'peak MiB':>10}{'exit':>6}")
    print(f"{'verdictgate assess --promptfoo':<32}{vg_wall:>9.2f}{vg_rss:>10.0f}{vg_exit:>6}")
    print(f"{'agentverity assess --promptfoo':<32}{av_wall:>9.2f}{av_rss:>10.0f}{av_exit:>6}")
    print(
        f"speed-up: {av_wall / vg_wall:.2f}x faster (target >= 3x); "
        f"verdictgate peak {vg_rss:.0f} MiB (target <= 300 MiB), {vg_rss / av_rss:.2f} of AgentVerity's"
    )


if __name__ == "__main__":
    main()
