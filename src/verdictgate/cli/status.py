"""`verdictgate status`: a run's admission, asked of a receiver over gRPC."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from ..errors import USAGE_EXIT, InputError
from .receiver import duration_option, read_secret

if TYPE_CHECKING:  # gRPC loads only when status asks
    import grpc

    from ..v1.verdictgate_pb2 import Admission

FORMATS = click.Choice(["text", "json", "junit", "markdown", "html"])


def _unreachable(endpoint: str, details: str, tls_ca: str | None) -> str:
    """Why a receiver could not be reached, telling TLS failures apart."""
    if "handshake" in details.lower():
        if "WRONG_VERSION_NUMBER" in details:
            return f"TLS handshake with {endpoint} failed: it does not speak TLS (drop --tls-ca)"
        if "CERTIFICATE_VERIFY_FAILED" in details:
            return (
                f"TLS handshake with {endpoint} failed: its certificate is not signed by the CA "
                f"in --tls-ca {tls_ca}"
            )
        return f"TLS handshake with {endpoint} failed ({details.rpartition(': ')[0] or details})"
    if tls_ca is None and _speaks_tls(endpoint):
        return f"{endpoint} speaks TLS: give the CA certificate that signed it with --tls-ca FILE"
    return f"cannot reach a receiver at {endpoint}"


def _watch_until_final(
    watch: Callable[[float], Iterable[Admission]],
    wait: float,
    is_tls_failure: Callable[[str], bool],
    progress: Callable[[Admission], object] = lambda admission: None,
) -> Admission | None:
    """Follow a run's admission until it is final or `wait` seconds pass; the last admission
    seen (None if the run never appeared), each one not final told to `progress`. A receiver
    that is not up yet, restarts, or has too many watchers is tried again each second; a TLS
    failure is not (waiting cannot mend it)."""
    import time

    import grpc

    deadline = time.monotonic() + wait
    admission = None
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            for admission in watch(remaining):
                if admission.final:
                    return admission
                progress(admission)
            return admission
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return admission
            transient = code == grpc.StatusCode.RESOURCE_EXHAUSTED or (
                code == grpc.StatusCode.UNAVAILABLE and not is_tls_failure(error.details() or "")
            )
            if not transient:
                raise
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    return admission


def _is_tls_failure(endpoint: str, details: str, tls_ca: str | None) -> bool:
    """Whether an unavailable receiver failed its TLS handshake (or wants TLS we did not use)."""
    return "handshake" in details.lower() or (tls_ca is None and _speaks_tls(endpoint))


def _speaks_tls(endpoint: str) -> bool:
    """Whether a TLS handshake (unverified: only to tell what the port speaks) succeeds."""
    import socket
    import ssl

    host, _, port = endpoint.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host.strip("[]"), int(port)), timeout=5) as raw,
            context.wrap_socket(raw),
        ):
            return True
    except (OSError, ValueError):
        return False


@click.command("status")
@click.option("--endpoint", required=True, help="HOST:PORT of `verdictgate serve`, its gRPC port.")
@click.option("--run", "run_id", required=True, help="Run id.")
@click.option(
    "--wait",
    default="0",
    callback=duration_option,
    metavar="DURATION",
    help="How long to wait for the run to become final (30, 30s, 10m).",
)
@click.option(
    "--format",
    "fmt",
    type=FORMATS,
    default="text",
    show_default=True,
    help="Report format, as for `assess`.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="A file holding the receiver's bearer token.",
)
@click.option(
    "--tls-ca", type=click.Path(dir_okay=False), help="PEM roots to verify a TLS receiver."
)
@click.option(
    "--output", type=click.Path(dir_okay=False), help="Write the report here (else stdout)."
)
def status_command(
    endpoint: str,
    run_id: str,
    wait: float,
    fmt: str,
    token_file: str | None,
    tls_ca: str | None,
    output: str | None,
) -> None:
    """The admission of a run held by a receiver; same report and exit codes as `assess`.

    With --wait, a run that has not appeared yet is waited for too (a CI job may start this
    before its agents send anything)."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # one line of ours, not gRPC's handshake log
    import grpc

    metadata, roots = _credentials(token_file, tls_ca)
    channel = (
        grpc.secure_channel(endpoint, grpc.ssl_channel_credentials(roots))
        if roots
        else grpc.insecure_channel(endpoint)
    )
    try:
        admission = _admission(
            channel, _StatusRequest(endpoint, run_id, fmt, metadata, tls_ca), wait
        )
    except grpc.RpcError as error:
        _fail(_rpc_problem(error, endpoint, run_id, tls_ca))
    finally:
        channel.close()
    from .reporting import deliver

    try:
        deliver(admission.report, output)
    except InputError as error:
        _fail(str(error))
    sys.exit(admission.exit_code)


def _fail(problem: str) -> NoReturn:
    """`verdictgate: error: PROBLEM` on stderr, exit 2."""
    click.echo(f"verdictgate: error: {problem}", err=True)
    sys.exit(USAGE_EXIT)


def _credentials(
    token_file: str | None, tls_ca: str | None
) -> tuple[tuple[tuple[str, str], ...], bytes | None]:
    """The call metadata (the bearer token of `--token-file`) and the PEM roots of `--tls-ca`."""
    try:
        token = read_secret(token_file, "--token-file")
        roots = Path(tls_ca).read_bytes() if tls_ca else None
    except (InputError, OSError) as error:
        _fail(str(error))
    metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
    return metadata, roots


@dataclass(frozen=True)
class _StatusRequest:
    """Which run `status` asks a receiver about, how, and in what report format."""

    endpoint: str
    run_id: str
    fmt: str
    metadata: tuple[tuple[str, str], ...]
    tls_ca: str | None


def _admission(channel: grpc.Channel, request: _StatusRequest, wait: float) -> Admission:
    """The run's admission: at once, or, with `wait`, once it is final (or the wait is over)."""
    from ..receiver.transport.grpc_api import ADMISSION_SERVICE
    from ..v1 import verdictgate_pb2 as pb

    if wait <= 0:
        get_admission = channel.unary_unary(
            f"/{ADMISSION_SERVICE}/GetAdmission",
            request_serializer=pb.GetAdmissionRequest.SerializeToString,
            response_deserializer=pb.Admission.FromString,
        )
        return get_admission(
            pb.GetAdmissionRequest(run_id=request.run_id, format=request.fmt),
            metadata=request.metadata,
            timeout=30,
        )
    watch_admission = channel.unary_stream(
        f"/{ADMISSION_SERVICE}/WatchAdmission",
        request_serializer=pb.WatchAdmissionRequest.SerializeToString,
        response_deserializer=pb.Admission.FromString,
    )
    run_id, endpoint = request.run_id, request.endpoint
    click.echo(
        f"verdictgate: waiting up to {wait:g} s for run {run_id!r} at {endpoint} to be final",
        err=True,
    )
    admission = _watch_until_final(
        lambda timeout: watch_admission(
            pb.WatchAdmissionRequest(run_id=run_id, format=request.fmt),
            metadata=request.metadata,
            timeout=timeout,
        ),
        wait,
        lambda details: _is_tls_failure(endpoint, details, request.tls_ca),
        lambda seen: click.echo(
            f"verdictgate: run {run_id!r} is collecting: {seen.trials_received} of "
            f"{seen.trials_expected or '?'} trials, {seen.status} so far",
            err=True,
        ),
    )
    if admission is None:
        _fail(f"no run {run_id!r} appeared at {endpoint} within {wait:g} s")
    return admission


def _rpc_problem(error: grpc.RpcError, endpoint: str, run_id: str, tls_ca: str | None) -> str:
    """What a failed call to the receiver says to the user."""
    import grpc

    return {
        grpc.StatusCode.NOT_FOUND: f"unknown run {run_id!r}",
        grpc.StatusCode.UNAVAILABLE: _unreachable(endpoint, error.details() or "", tls_ca),
        grpc.StatusCode.UNAUTHENTICATED: f"the receiver wants a valid --token-file: {error.details()}",
    }.get(error.code(), f"{error.code().name}: {error.details()}")
