"""Programs some tests run for real (Prometheus, Alertmanager, Chromium): Debian packages that
`.ci/run` installs, so that those tests run in CI; elsewhere they skip when one is missing."""

from __future__ import annotations

import os
import shutil
import socket
from typing import NoReturn

import pytest


def unavailable(message: str) -> NoReturn:
    """A component the test needs is missing: a failure in CI (it must run there), else a
    skip that names it."""
    if os.environ.get("CI"):
        pytest.fail(message + "; .ci/run installs it")
    pytest.skip(message)


def binary(name: str) -> str:
    """The path of a program the test needs (see `unavailable` when it is missing)."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed (Debian packages: see .ci/run)")
    return path


def free_port() -> int:
    """A loopback port free right now (for servers that cannot report the one they took)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
