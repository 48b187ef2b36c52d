"""`verdictgate serve`: the receiver beside a collector, its flags checked and parsed once."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import USAGE_EXIT, InputError, VerdictgateError, cli_option
from ..flags import flag
from ..sequential.rule import sequential_policy
from ..stats import Method
from ..suite import Suite
from ..suite_file import load_suite
from .flag_options import takes

if TYPE_CHECKING:  # serve loads the receiver only when it runs
    from ..receiver.service import ServeConfig, Service

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
SIGNAL_POLL = 0.5
"""Seconds between the main thread's looks at whether a stop signal came: a signal the kernel
gives another thread (after the process was stopped and continued, say) runs its handler only
once the main thread wakes."""
_PATH = click.Path(dir_okay=False)


def parse_duration(value: str) -> float:
    """`90`, `90s`, `5m`, `1h`, `30d`, `500ms` -> seconds."""
    match = _DURATION.match(value.strip())
    if match is None:
        raise click.BadParameter(f"expected a duration like 30s, 5m, 1h or 30d, got {value!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def duration_option(context: click.Context, option: click.Parameter, value: str) -> float:
    """A click callback: an option's duration (`parse_duration`), in seconds."""
    return parse_duration(value)


def _listen(value: str, option: str) -> tuple[str, str]:
    """HOST:PORT split, or an InputError naming `option`."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise InputError(f"expected HOST:PORT, got {value!r}", field=option)
    return host, port


def _scrape_address(value: str | None) -> tuple[str, int] | None:
    """`--prometheus-listen`: HOST:PORT ([::1]:PORT for IPv6), or a bare PORT on the loopback
    interface."""
    if value is None:
        return None
    if ":" not in value and not value.isdigit():
        raise InputError(f"expected [HOST:]PORT, got {value!r}", field="--prometheus-listen")
    host, port = _listen(value if ":" in value else f"127.0.0.1:{value}", "--prometheus-listen")
    return host.removeprefix("[").removesuffix("]"), int(port)


def read_secret(path: str | None, option: str) -> str | None:
    """The secret in the file `option` names, stripped; None without one."""
    if path is None:
        return None
    try:
        secret = Path(path).read_text().strip()
    except OSError as error:
        raise InputError(f"cannot read ({error.strerror})", path=path, field=option) from None
    if not secret:
        raise InputError("is empty", path=path, field=option)
    return secret


def _canary_suites(paths: tuple[str, ...]) -> dict[str, Suite]:
    """The suites canaries are judged by, by name; two files of one name are refused."""
    suites: dict[str, Suite] = {}
    for path in paths:
        suite = load_suite(path)
        try:
            if (policy := suite.policy()).method is Method.SEQUENTIAL:
                sequential_policy(policy, suite)  # within the rule's reach
        except ValueError as error:
            raise click.BadParameter(f"{path}: {error}", param_hint="--canary-suite") from None
        if suite.name in suites:
            raise click.BadParameter(
                f"two suites named {suite.name!r}", param_hint="--canary-suite"
            )
        suites[suite.name] = suite
    return suites


@dataclass(frozen=True)
class ServeFlags:
    """`serve`'s flags as given, in --help order; `_serve_config` checks and parses them.
    `grace` is `--idle`'s value, under its old name (the parameter's name, which deployments'
    checks read)."""

    store_path: str = flag(
        "verdictgate-store.sqlite",
        "A SQLite file (WAL; one receiver), or postgresql://[user@]host[:port]/database to "
        "share one PostgreSQL with other replicas (a password from the URL or the PG* "
        "environment variables, never logged). A restart resumes every run; replicas take "
        "over a dead one's.",
        "--store",
        show_default=True,
    )
    grpc_listen: str = flag("127.0.0.1:4317", "OTLP/gRPC and the query API.", show_default=True)
    http_listen: str = flag(
        "127.0.0.1:4318",
        "OTLP/HTTP, the /v1/runs API and the pages for a browser (/, /runs/{id}).",
        show_default=True,
    )
    token_file: str | None = flag(None, "Require `Authorization: Bearer <token>`.", type=_PATH)
    tls_cert: str | None = flag(None, "PEM certificate chain (with --tls-key).", type=_PATH)
    tls_key: str | None = flag(None, "PEM private key (with --tls-cert).", type=_PATH)
    publish_endpoint: str | None = flag(
        None,
        "Publish admissions over OTLP/gRPC, e.g. back to the collector (http:// or https://). "
        "They wait in the store's outbox until delivered; ingest never waits for this target.",
        metavar="URL",
    )
    grace: str = flag(
        "30s",
        "Seconds without news after which a run is final (a canary's since its last trial, a "
        "declared run's since its run span or last trial; a run of framework trials is final "
        "only once complete and this idle). Longer than a sender's longest retry interval: "
        "time while the store is away does not count. --grace is its old name.",
        "--idle",
        "--grace",
        show_default=True,
        metavar="DURATION",
    )
    window: str | None = flag(
        None,
        "Also assess canary runs (no run span) every DURATION while they collect.",
        metavar="DURATION",
    )
    prometheus: str | None = flag(
        None,
        "Also serve the admission metrics for Prometheus to scrape (/metrics; a bare port "
        "listens on the loopback interface; needs verdictgate[prometheus]; docs/alerting.md).",
        "--prometheus-listen",
        metavar="[HOST:]PORT",
    )
    canary_suite_paths: tuple[str, ...] = flag(
        (),
        "Judge canary runs (no run span) whose spans name this suite by its contract, cases "
        'and policy (repeatable); with "method": "sequential" each is final as soon as the '
        "rule decides it (docs/receiver.md).",
        "--canary-suite",
        type=_PATH,
    )
    max_request_bytes: int = flag(
        16 << 20,
        "Largest request body, after decompression; a larger one is refused (413).",
        type=int,
        show_default=True,
    )
    max_trials_per_run: int = flag(
        1_000_000,
        "Trials one run may hold; spans beyond are rejected (OTLP partial success).",
        type=click.IntRange(min=1),
        show_default=True,
    )
    decoders: int | None = flag(
        None,
        "Processes that decode requests beside the store (default: one if there are 2+ cores).",
        type=int,
    )
    lease: str = flag(
        "15s",
        "With a PostgreSQL --store shared by replicas: how long this replica's heartbeat "
        "(which holds every run it decides) or its claim on an admission to deliver holds "
        "unless renewed. A dead replica's runs are taken over after about this long and a "
        "third; a write waits a third of it at most for a row another replica holds, and a "
        "transaction left idle a lease is ended by the server.",
        metavar="DURATION",
        show_default=True,
    )
    replica: str | None = flag(
        None,
        "This replica's name among those sharing a PostgreSQL --store (default: host, process "
        "and a random part, so a restarted replica's runs wait for its old heartbeat to "
        "lapse). A stable name, such as a StatefulSet pod's, takes its runs back at once "
        "after a restart; two live replicas must never share one.",
        metavar="NAME",
    )
    settle: str = flag(
        "5s",
        "How long a harness's verdictgate.trial span and the spans below it must be quiet "
        "before its trial is derived from them (docs/frameworks.md).",
        metavar="DURATION",
        show_default=True,
    )
    max_hold: str = flag(
        "2m",
        "A trial whose spans never go quiet is settled this long after its trial span came, "
        "from what has arrived (later spans are counted late).",
        metavar="DURATION",
        show_default=True,
    )
    max_held_spans: int = flag(
        500_000,
        "Framework spans held at most; beyond, the traces without a trial span quiet the "
        "longest are let go first (counted).",
        type=int,
        show_default=True,
    )
    max_open_runs: int = flag(
        100_000,
        "Open runs this replica decides at most (each holds about 3 KiB and its trials in "
        "memory); a request that would open more is refused with a retry hint until runs end.",
        type=click.IntRange(min=1),
        show_default=True,
    )
    retain: str | None = flag(
        None,
        "Delete runs finished longer ago than DURATION (e.g. 30d); default: keep every run.",
        metavar="DURATION",
    )
    metric_suites: tuple[str, ...] = flag(
        (),
        "A suite whose name metrics may carry (repeatable); others go to the overflow series "
        "(otel.metric.overflow=true). Default: the first --max-metric-suites suites seen.",
        "--metric-suite",
        metavar="NAME",
    )
    max_metric_suites: int = flag(
        50,
        "Distinct (suite, point) label pairs metrics carry when --metric-suite is not given.",
        type=click.IntRange(min=1),
        show_default=True,
    )


@click.command("serve")
@takes(ServeFlags, "flags")
def serve_command(flags: ServeFlags) -> None:
    """Receive decision spans beside a collector; assess and publish each run."""
    import logging

    logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.WARNING)
    from ..receiver.ingest.allocator import reuse_freed_memory
    from ..receiver.service import Service
    from ..receiver.store import is_store_error

    reuse_freed_memory()  # this process handles one large body after another, like its decoders
    try:
        service = Service(_serve_config(flags))
    except (VerdictgateError, OSError) as error:
        message = error.render(cli_option) if isinstance(error, VerdictgateError) else error
        click.echo(f"verdictgate: error: {message}", err=True)
        sys.exit(USAGE_EXIT)
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    service.start()
    _say_serving(service)
    while not stopped.wait(SIGNAL_POLL):  # a signal another thread took wakes no wait: look again
        pass
    service.stop()
    if service.config.publish_endpoint and not service.store.shared:
        try:
            waiting = service.store.outbox_size()
        except Exception as error:
            if not is_store_error(error):
                raise
            waiting = 0  # the store is away: what it holds waits there all the same
        if waiting:
            click.echo(
                f"verdictgate: stopped; {waiting} admissions wait in the outbox for the next start",
                err=True,
            )


def _serve_config(flags: ServeFlags) -> ServeConfig:
    """`serve`'s flags, checked and parsed once into a ServeConfig (durations, addresses,
    secrets and suite files read here; a bad one is an InputError naming its flag)."""
    from ..receiver.config import MIN_LEASE, ReceiverConfig
    from ..receiver.limits import Limits
    from ..receiver.server import Tls
    from ..receiver.service import ServeConfig

    cert, key, window, retain = flags.tls_cert, flags.tls_key, flags.window, flags.retain
    if (cert is None) != (key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    decoders = flags.decoders
    lease = parse_duration(flags.lease)
    if lease < MIN_LEASE:
        raise click.UsageError(
            f"--lease must be at least {MIN_LEASE:g}s (a replica renews it every third, "
            "between its ticks)"
        )
    return ServeConfig(
        store_path=flags.store_path,
        grpc_listen=":".join(_listen(flags.grpc_listen, "--grpc-listen")),
        http_listen=":".join(_listen(flags.http_listen, "--http-listen")),
        receiver=ReceiverConfig(
            idle=parse_duration(flags.grace),
            window=parse_duration(window) if window else None,
            max_trials_per_run=flags.max_trials_per_run,
            retain=parse_duration(retain) if retain else None,
            settle=parse_duration(flags.settle),
            lease=lease,
            replica=flags.replica,
            max_hold=parse_duration(flags.max_hold),
            max_held_spans=flags.max_held_spans,
            max_open_runs=flags.max_open_runs,
            canary_suites=_canary_suites(flags.canary_suite_paths),
            metric_suites=frozenset(flags.metric_suites) or None,
            max_metric_suites=flags.max_metric_suites,
        ),
        limits=Limits(
            max_request_bytes=flags.max_request_bytes,
            decoders=decoders if decoders is not None else min(1, (os.cpu_count() or 1) - 1),
        ),
        token=read_secret(flags.token_file, "--token-file"),
        tls=Tls(cert, key) if cert and key else None,
        publish_endpoint=flags.publish_endpoint,
        prometheus=_scrape_address(flags.prometheus),
    )


def _say_serving(service: Service) -> None:
    """One line on stderr: where the receiver listens, its store (and what opening it changed
    in its schema), where it publishes."""
    config, server, scrape = service.config, service.server, service.scrape
    assert config.grpc_listen is not None and config.http_listen is not None  # `serve` sets both
    replica = service.receiver
    publishing_to = (
        (
            f"; replica {replica.replica}, lease {replica.config.lease:g}s"
            if service.store.shared
            else ""
        )
        + (
            f"; publishing to {config.publish_endpoint} "
            f"({service.store.outbox_size()} admissions waiting)"
            if config.publish_endpoint
            else ""
        )
        + (
            f"; Prometheus metrics on {config.prometheus[0]}:{scrape.port}/metrics"
            if scrape is not None and config.prometheus is not None
            else ""
        )
    )
    click.echo(
        f"verdictgate: receiving OTLP on grpc {config.grpc_listen.rpartition(':')[0]}:"
        f"{server.grpc_port}, http {config.http_listen.rpartition(':')[0]}:{server.http_port}; "
        f"store {service.store.location}"
        + (f" (migrated: {'; '.join(service.store.migrated)})" if service.store.migrated else "")
        + publishing_to,
        err=True,
    )
