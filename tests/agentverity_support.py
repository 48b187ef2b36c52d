"""AgentVerity, the predecessor tool, installed from PyPI into a private virtual environment on
first use (never a dependency of verdictgate), so tests can cross-check its numbers on the same
files instead of relying on files copied from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

AGENTVERITY_VERSION = "0.25.5"
VENV = Path(__file__).resolve().parents[1] / ".venv" / f"agentverity-{AGENTVERITY_VERSION}"
EVIDENCE = {
    "schema": "agentverity.evidence/v2",
    "isolation": "fresh-session",
    "layer": "verdict",
    "cases": [
        {"input": "approve me", "expected": "approve", "observations": ["approve"] * 6},
        {
            "input": "deny me",
            "expected": "deny",
            "observations": ["deny", "deny", "deny", "review"],
            "errors": 2,
        },
        {
            "input": "unsure",
            "expected": "review",
            "observations": [{"kind": "no_decision", "reason": "refused"}] * 2
            + [["lookup", "review"]] * 2,
        },
    ],
}
"""A small AgentVerity evidence file: observations, errors, no-decisions and a tool path."""


def agentverity() -> Path:
    """The agentverity CLI (installed by pip from the package registry the first time)."""
    binary = VENV / "bin" / "agentverity"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [
                str(VENV / "bin" / "pip"),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"agentverity=={AGENTVERITY_VERSION}",
            ],
            check=True,
        )
    return binary


def agentverity_report(*args: str, tmp: Path) -> dict:
    """`agentverity assess ARGS --json FILE`, read back."""
    out = tmp / "agentverity.json"
    result = subprocess.run(
        [str(agentverity()), "assess", *args, "--json", str(out)], capture_output=True, text=True
    )
    assert out.exists(), result.stderr
    return json.loads(out.read_text())
