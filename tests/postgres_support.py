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
import signal
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg

from components import free_port, unavailable
from verdictgate.receiver.store import Store, is_store_error

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
def postgresql(fsync: bool = False) -> Iterator[str]:
    """A fresh PostgreSQL cluster; yields its URL (`postgresql://postgres@127.0.0.1:PORT/postgres`,
    trust authentication on loopback only). Without `fsync` (tests) a commit is not flushed to
    disk; benchmarks keep it."""
    with cluster(fsync) as server:
        yield server.url


class Cluster:
    """A PostgreSQL cluster of a test's own, which the test may stop and start again."""

    def __init__(self, data: Path, log: Path, options: str, url: str) -> None:
        self.url, self._data, self._log, self._options = url, data, log, options
        self._pg_ctl = server_binary("pg_ctl")

    def start(self) -> None:
        started = subprocess.run(
            _as_server_user(
                [
                    self._pg_ctl,
                    "-D",
                    str(self._data),
                    "-l",
                    str(self._log),
                    "-o",
                    self._options,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if started.returncode != 0:
            server_log = self._log.read_text() if self._log.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {started.stderr}\n{server_log}")

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The server frozen while the block runs (SIGSTOP on the postmaster, then on each of its
        processes): its socket takes connections into the backlog and answers nothing; thawed
        (SIGCONT) after, whatever the block raised."""
        postmaster = int((self._data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)  # first: it forks nothing more
        children = [pid for pid in _processes() if _parent(pid) == postmaster]
        try:
            for pid in children:
                os.kill(pid, signal.SIGSTOP)
            yield
        finally:
            for pid in children:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            os.kill(postmaster, signal.SIGCONT)

    def log(self) -> str:
        """What the server logged so far."""
        return self._log.read_text(errors="replace") if self._log.exists() else ""

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`immediate`: as a crash does, no checkpoint, every session cut)."""
        subprocess.run(
            _as_server_user([self._pg_ctl, "-D", str(self._data), "-m", mode, "-w", "stop"]),
            capture_output=True,
            timeout=120,
        )


def _processes() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _parent(pid: int) -> int | None:
    """A process's parent, from /proc (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])


@contextmanager
def cluster(fsync: bool = False) -> Iterator[Cluster]:
    """A fresh PostgreSQL cluster, started (see `postgresql`), stopped and removed after."""
    initdb = server_binary("initdb")
    scratch = Path(tempfile.mkdtemp(prefix="verdictgate-pg-"))
    data, log = scratch / "data", scratch / "server.log"
    if os.geteuid() == 0:
        record = pwd.getpwnam(USER)
        os.chown(scratch, record.pw_uid, record.pw_gid)
    port = free_port()
    subprocess.run(
        _as_server_user(
            [initdb, "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"]
        ),
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = (
        f"-p {port} -k {scratch} -c listen_addresses=127.0.0.1 -c max_connections=400"
        f" -c fsync={'on' if fsync else 'off'}"
    )
    server = Cluster(data, log, options, f"postgresql://{USER}@127.0.0.1:{port}/postgres")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def refused(call) -> bool:
    """Whether a call failed for the store (a sender is told to retry)."""
    try:
        call()
    except Exception as error:
        if not is_store_error(error):
            raise
        return True
    return False


@contextmanager
def store_away(maker: StoreMaker, name: str) -> Iterator[None]:
    """The store of that name refuses exports while the block runs: PostgreSQL's database
    closed to connections and its sessions ended (every call fails), a SQLite file in another
    connection's exclusive transaction (every write fails, after waiting 5 s for the lock)."""
    location = maker.location(name)
    if maker.kind == "postgresql":
        admin = location.rpartition("/")[0] + "/postgres"
        database = location.rpartition("/")[2]
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"ALTER DATABASE {database} WITH ALLOW_CONNECTIONS false")
            connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (database,),
            )
        try:
            yield
        finally:
            with psycopg.connect(admin, autocommit=True) as connection:
                connection.execute(f"ALTER DATABASE {database} WITH ALLOW_CONNECTIONS true")
        return
    other = sqlite3.connect(location, timeout=0, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # in WAL mode, every write waits (5 s) and fails
    try:
        yield
    finally:
        other.execute("COMMIT")
        other.close()


class StoreMaker:
    """Makes the stores of one test, on one kind of store, and closes them after it.

    `make()` is a new, empty store (SQLite `:memory:`, or a fresh PostgreSQL database);
    `make(name)` the store of that name, the same one every time it is named (a SQLite file in
    the test's directory, or a PostgreSQL database), so that a test can reopen it."""

    def __init__(self, kind: str, directory: Path, server_url: str | None) -> None:
        self.kind = kind
        self._directory = directory
        self._server_url = server_url
        self._databases: dict[str, str] = {}
        self._made: list[Store] = []

    def location(self, name: str | Path | None = None) -> str:
        """Where the store of that name is (a new one each call without a name)."""
        if self._server_url is None:
            return ":memory:" if name is None else str(self._directory / Path(name).name)
        key = str(name) if name is not None else f"anonymous-{len(self._databases)}"
        if key not in self._databases:
            database = f"t_{uuid.uuid4().hex}"
            with psycopg.connect(self._server_url, autocommit=True) as connection:
                connection.execute(f"CREATE DATABASE {database}")
            self._databases[key] = self._server_url.rpartition("/")[0] + "/" + database
        return self._databases[key]

    def __call__(self, name: str | Path | None = None, **options: int) -> Store:
        store = Store(self.location(name), **options)
        self._made.append(store)
        return store

    def close(self) -> None:
        for store in self._made:
            store.close()
