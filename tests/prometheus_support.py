"""Prometheus and Alertmanager for the alerting tests: the rules' folder and their tools."""

from __future__ import annotations

import subprocess
from pathlib import Path

from components import binary

RULES_DIR = Path(__file__).resolve().parents[1] / "collector-config" / "prometheus"


def run_tool(*command: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess:
    """Run promtool or amtool; the test fails with its output when it does."""
    done = subprocess.run(
        [binary(command[0]), *command[1:]], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done
