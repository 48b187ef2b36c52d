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


def missing(name: str) -> str | None:
    """Why a program some steps of a test run cannot run here (None when it is installed): a
    failure in CI, where it must run; elsewhere the caller skips those steps by this name."""
    if shutil.which(name) is not None:
        return None
    message = f"{name} is not installed (Debian packages: see .ci/run)"
    if os.environ.get("CI"):
        pytest.fail(message + "; .ci/run installs it")
    return message


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


def listening_hosts(port: int) -> set[str]:
    """The addresses a TCP socket of this machine listens on at `port`, from /proc/net/tcp and
    tcp6 (hex, as the kernel writes them: 0100007F is 127.0.0.1, 00000000 every address)."""
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as rows:
            for row in list(rows)[1:]:
                local, state = row.split()[1], row.split()[3]
                address, _, hex_port = local.partition(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    if len(address) == 8:
                        hosts.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1]))
                    else:
                        words = bytes.fromhex(address)
                        raw = b"".join(words[i : i + 4][::-1] for i in range(0, 16, 4))
                        hosts.add(socket.inet_ntop(socket.AF_INET6, raw))
    return hosts
