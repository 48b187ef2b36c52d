"""Prometheus and Alertmanager for the alerting tests: the Debian binaries, which `.ci/run`
installs, so that these tests run in CI; elsewhere they skip when a binary is missing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

RULES_DIR = Path(__file__).resolve().parents[1] / "collector-config" / "prometheus"


def binary(name: str) -> str:
    """The path of a binary the test needs: a failure in CI (it must run there), else a skip."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (Debian: prometheus, prometheus-alertmanager)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run installs it")
        pytest.skip(message)
    return path


def run_tool(*command: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess:
    """Run promtool or amtool; the test fails with its output when it does."""
    done = subprocess.run(
        [binary(command[0]), *command[1:]], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def free_port() -> int:
    """A loopback port free right now (for servers that cannot report the one they took)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
