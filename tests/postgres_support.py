"""A real PostgreSQL for tests: the Debian package's server, started by an unprivileged user
in a scratch directory on a free loopback port, stopped when the session ends.

`.ci/run` installs the package; elsewhere a test that needs it skips, naming what is missing
(`components.unavailable`). As root (CI containers), the server runs as the `postgres` user
the package creates, as PostgreSQL refuses to run as root."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from components import free_port, unavailable

USER = "postgres"
"""The server's user when the tests run as root (the Debian package creates it)."""


def server_binary(name: str) -> str:
    """`initdb` or `pg_ctl`: on PATH, else in the Debian package's versioned directory."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        unavailable(f"PostgreSQL's {name} is not installed (Debian package postgresql)")
    return found


def _as_server_user(command: list[str]) -> list[str]:
    """The command as the server's user: itself, unless running as root."""
    if os.geteuid() != 0:
        return command
    try:
        pwd.getpwnam(USER)
    except KeyError:
        unavailable(f"running as root, and there is no {USER!r} user to run PostgreSQL as")
    return ["runuser", "-u", USER, "--", *command]


@contextmanager
def postgresql() -> Iterator[str]:
    """A fresh PostgreSQL cluster; yields its URL (`postgresql://postgres@127.0.0.1:PORT/postgres`,
    trust authentication on loopback only)."""
    initdb, pg_ctl = server_binary("initdb"), server_binary("pg_ctl")
    scratch = Path(tempfile.mkdtemp(prefix="verdictgate-pg-"))
    data, log = scratch / "data", scratch / "server.log"
    if os.geteuid() == 0:
        record = pwd.getpwnam(USER)
        os.chown(scratch, record.pw_uid, record.pw_gid)
    port = free_port()
    run = _as_server_user
    subprocess.run(
        run([initdb, "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"]),
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = f"-p {port} -k {scratch} -c listen_addresses=127.0.0.1 -c fsync=off"
    started = subprocess.run(
        run([pg_ctl, "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if started.returncode != 0:
        server_log = log.read_text() if log.exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {started.stderr}\n{server_log}")
    try:
        yield f"postgresql://{USER}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(scratch, ignore_errors=True)
