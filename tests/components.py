"""Programs some tests run for real (Prometheus, Alertmanager, Chromium): Debian packages that
`.ci/run` installs, so that those tests run in CI; elsewhere they skip when one is missing."""

from __future__ import annotations

import os
import shutil
import socket

import pytest


def binary(name: str) -> str:
    """The path of a program the test needs: a failure in CI (it must run there), else a skip."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (Debian packages: see .ci/run)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run installs it")
        pytest.skip(message)
    return path


def free_port() -> int:
    """A loopback port free right now (for servers that cannot report the one they took)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
