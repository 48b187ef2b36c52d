"""The framework examples, run as the docs run them: `verdictgate run` in a process of its own,
the decision read from the framework's spans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SUITE = "examples/support_tools_suite.json"


def verdictgate_run(*args: str) -> tuple[int, dict]:
    result = subprocess.run(
        [sys.executable, "-m", "verdictgate", "run", "--suite", SUITE, "--format", "json", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def block_card_flips(report: dict) -> int:
    return next(r["flips"] for r in report["stability"]["routes"] if r["route"] == "block_card")


@pytest.mark.parametrize(
    "agent",
    [
        ("examples/strands_router.py", "--decision", "tools", "--isolation", "fresh-instance"),
        ("examples/langgraph_router.py",),
    ],
)
def test_a_stable_router_qualifies_and_a_flipping_one_is_rejected(agent: tuple[str, ...]) -> None:
    path, *options = agent
    code, report = verdictgate_run("--agent", f"{path}:stable_router", *options)
    assert (code, report["status"]) == (0, "qualified")
    assert report["stability"]["pooled"]["flips"] == 0
    code, report = verdictgate_run("--agent", f"{path}:flipping_router", *options)
    assert (code, report["status"]) == (1, "rejected")
    assert block_card_flips(report) == report["stability"]["pooled"]["flips"] > 0
