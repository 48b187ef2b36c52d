"""PgBouncer (the Debian package's) in front of a test's PostgreSQL: started on a free loopback
port as the server's user, pooling every database of the server in session or transaction mode,
stopped when the test ends.

It trusts the server's user (listed in its auth file), and ignores the `options` startup
parameter a store sends, as docs/receiver.md advises: the session settings in it are then lost,
and each transaction sets its own bounds. `.ci/run` installs the package; elsewhere a test that
needs it skips (`components.unavailable`)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from components import free_port, unavailable
from postgres_support import USER

MODES = ("session", "transaction")
"""The pool modes a store must work through."""


class PgBouncer:
    """A running PgBouncer: `url(direct)` is a database's URL through it."""

    def __init__(self, port: int) -> None:
        self.port = port

    def url(self, direct: str) -> str:
        """The URL of the database `direct` names, through this pooler."""
        parts = urlsplit(direct)
        return f"{parts.scheme}://{parts.username}@127.0.0.1:{self.port}{parts.path}"


@contextmanager
def pgbouncer(server_url: str, mode: str) -> Iterator[PgBouncer]:
    """PgBouncer in pool `mode` in front of the server at `server_url` (a scratch cluster's)."""
    binary = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )
    if binary is None:
        unavailable("pgbouncer is not installed (Debian package pgbouncer)")
    server = urlsplit(server_url)
    scratch = Path(tempfile.mkdtemp(prefix="verdictgate-pgbouncer-"))
    port, log = free_port(), scratch / "pgbouncer.log"
    (scratch / "users.txt").write_text(f'"{server.username}" ""\n')
    (scratch / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={server.hostname} port={server.port}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {scratch / 'users.txt'}\npool_mode = {mode}\n"
        "ignore_startup_parameters = options\nmax_client_conn = 400\ndefault_pool_size = 40\n"
        f"logfile = {log}\n"
    )
    command = [binary, str(scratch / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        record = pwd.getpwnam(USER)
        for path in (scratch, *scratch.iterdir()):
            os.chown(path, record.pw_uid, record.pw_gid)
        command = ["runuser", "-u", USER, "--", *command]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_listening(port, process)
        yield PgBouncer(port)
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(scratch, ignore_errors=True)


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    """Return once the pooler accepts connections on `port` (its error if it exits first)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"pgbouncer did not start: {process.stderr and process.stderr.read()!r}"
            )
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("pgbouncer did not listen in 30 s")
