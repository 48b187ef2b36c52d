"""Benchmark `verdictgate assess` on 1,000,000 trial records beside `agentverity assess`.

Generates 5,000 cases x 200 trials once (verdictgate.trials/v1 JSON Lines, and the same
evidence as an agentverity.evidence/v2 file), then runs each tool's CLI as a child process and
reads its wall time and peak resident memory from the kernel (wait4). AgentVerity is installed
into its own virtual environment on first use; it is never a dependency of verdictgate.

    python benchmarks/assess.py [--cases 5000] [--trials 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
AGENTVERITY_VENV = OUT / "agentverity-venv"
AGENTVERITY_VERSION = "0.25.5"
ROUTES = [
    "card_security",
    "cash_withdrawal",
    "duplicate_charge",
    "merchant_dispute",
    "refund_delay",
    "transfer_delay",
]


def generate(cases: int, trials: int) -> tuple[Path, Path]:
    """Write the same evidence in both formats; 1 case in 20 flips to a neighbour route now and then."""
    rng = random.Random(7)
    jsonl = OUT / f"trials-{cases}x{trials}.jsonl"
    evidence = OUT / f"evidence-{cases}x{trials}.json"
    if jsonl.exists() and evidence.exists():
        return jsonl, evidence
    OUT.mkdir(exist_ok=True)
    av_cases = []
    with open(jsonl, "w") as stream:
        for case in range(cases):
            expected = ROUTES[case % len(ROUTES)]
            flip_to = ROUTES[(case + 1) % len(ROUTES)] if case % 20 == 0 else None
            case_id = f"sha256:{case:064x}"
            observations = []
            for index in range(trials):
                verdict = flip_to if flip_to and rng.random() < 0.1 else expected
                observations.append(verdict)
                stream.write(
                    f'{{"run": "bench", "suite": "payments", "case": "{case_id}", "trial": {index}, '
                    f'"outcome": "decision", "verdict": "{verdict}", "expected": "{expected}"}}\n'
                )
            av_cases.append(
                {
                    "input": f"synthetic case {case}",
                    "expected": expected,
                    "observations": observations,
                }
            )
    evidence.write_text(
        json.dumps(
            {
                "schema": "agentverity.evidence/v2",
                "layer": "verdict",
                "isolation": "fresh-session",
                "provenance": {"collected_by": "verdictgate benchmark"},
                "cases": av_cases,
            }
        )
    )
    return jsonl, evidence


def agentverity_command() -> list[str]:
    """The agentverity CLI, installed into a private venv on first use."""
    binary = AGENTVERITY_VENV / "bin" / "agentverity"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(AGENTVERITY_VENV)], check=True)
        subprocess.run(
            [
                str(AGENTVERITY_VENV / "bin" / "pip"),
                "install",
                "--quiet",
                f"agentverity=={AGENTVERITY_VERSION}",
            ],
            check=True,
        )
    return [str(binary)]


def measure(command: list[str]) -> tuple[float, float, int]:
    """Run a command; return (wall seconds, peak RSS MiB, exit code) of that child alone."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1, 3):
        raise SystemExit(
            f"{command[0]} failed ({process.returncode}): {process.stderr.read().decode()}"
        )
    return wall, usage.ru_maxrss / 1024, process.returncode


FLOOR = """
import sys
import msgspec

class Line(msgspec.Struct):
    run: str
    case: str
    trial: int
    verdict: str | None = None
    expected: str | None = None

decoder, carry, lines = msgspec.json.Decoder(Line), b"", 0
with open(sys.argv[1], "rb") as stream:
    while block := stream.read(1 << 20):
        data = carry + block
        cut = data.rfind(b"\\n") + 1
        lines += len(decoder.decode_lines(data[:cut]))
        carry = data[cut:]
print(lines)
"""
"""msgspec decoding the same lines alone, in 1 MiB chunks, into the fields assess reads: the
floor any Python reader of the file stands on."""


def best_of(commands: list[list[str]], repeat: int) -> list[tuple[float, float, int]]:
    """Each command's best wall time, largest peak memory and exit code over `repeat` rounds,
    the commands taking turns within each round (a machine that drifts favours none)."""
    runs: list[list[tuple[float, float, int]]] = [[] for _ in commands]
    for round_number in range(repeat):
        order = list(range(len(commands)))
        order = order[round_number % len(order) :] + order[: round_number % len(order)]
        for index in order:
            runs[index].append(measure(commands[index]))
    return [(min(r[0] for r in done), max(r[1] for r in done), done[0][2]) for done in runs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    records = args.cases * args.trials
    jsonl, evidence = generate(args.cases, args.trials)
    verdictgate = [
        sys.executable,
        "-m",
        "verdictgate",
        "assess",
        "--trials",
        str(jsonl),
        "--format",
        "json",
    ]
    agentverity = [*agentverity_command(), "assess", "--evidence", str(evidence)]
    floor = [sys.executable, "-c", FLOOR, str(jsonl)]
    (vg_wall, vg_rss, vg_exit), (av_wall, av_rss, av_exit), (floor_wall, floor_rss, _) = best_of(
        [verdictgate, agentverity, floor], args.repeat
    )
    print(
        f"evidence: {args.cases:,} cases x {args.trials} trials = {records:,} records "
        f"({jsonl.stat().st_size / 2**20:.0f} MiB JSONL); best of {args.repeat}"
    )
    print(f"{'tool':<24}{'wall s':>9}{'peak MiB':>10}{'exit':>6}")
    print(f"{'verdictgate assess':<24}{vg_wall:>9.2f}{vg_rss:>10.0f}{vg_exit:>6}")
    print(f"{'agentverity assess':<24}{av_wall:>9.2f}{av_rss:>10.0f}{av_exit:>6}")
    print(f"{'msgspec decoding alone':<24}{floor_wall:>9.2f}{floor_rss:>10.0f}{0:>6}")
    print(
        f"speed-up: {av_wall / vg_wall:.2f}x faster (issue 38: at least 8x); "
        f"memory: {vg_rss / av_rss:.2f} of agentverity's peak (at most 0.25); "
        f"{vg_wall / floor_wall:.2f}x the decoding floor (at most 2.5x)"
    )
    print(f"throughput: {records / vg_wall:,.0f} records/s")


if __name__ == "__main__":
    main()
