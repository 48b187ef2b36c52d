"""Test support for a collector between a sender and `verdictgate serve`: rotel (a real OTLP
collector, from the dev extra) and a relay that retries every request until acknowledged."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sysconfig
import threading
import time
from collections.abc import Mapping
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from components import free_port
from verdictgate.receiver.ingest.exports import TRACE_SERVICE


def rotel_agent() -> str:
    """The rotel-agent binary of the rotel package; a skip where it has none."""
    rotel = pytest.importorskip(
        "rotel",
        reason="rotel 0.0.1a15 (a Rust OTLP collector) ships wheels for CPython 3.10 to 3.13 on Linux only",
    )
    binary = Path(rotel.__file__).with_name("rotel-agent")
    if not binary.exists():
        pytest.skip("the rotel package has no rotel-agent binary on this platform")
    return str(binary)


def with_libpython(environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` with this Python's libpython on the loader's path: rotel-agent embeds the
    CPython its wheel is for, which a pyenv build keeps in its own lib/ (Debian's python3 in
    the loader's default path)."""
    paths = [sysconfig.get_config_var("LIBDIR"), environment.get("LD_LIBRARY_PATH", "")]
    return {**environment, "LD_LIBRARY_PATH": os.pathsep.join(path for path in paths if path)}


def start_collector(binary: str, forward_to: int, log: Path) -> tuple[subprocess.Popen, int]:
    """rotel receiving OTLP/gRPC on a free port and exporting to verdictgate on `forward_to`."""
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "start",
            "--otlp-grpc-endpoint",
            f"127.0.0.1:{port}",
            "--otlp-http-endpoint",
            f"127.0.0.1:{free_port()}",
            "--exporter",
            "otlp",
            "--otlp-exporter-endpoint",
            f"http://127.0.0.1:{forward_to}",
            "--batch-timeout",
            "10ms",
            "--otlp-exporter-retry-max-elapsed-time",
            "120s",
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=with_libpython(os.environ),
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process, port
        if process.poll() is not None:
            raise RuntimeError(f"rotel exited: {log.read_text()}")
        time.sleep(0.05)
    process.kill()
    raise RuntimeError("rotel did not start listening")


class RetryingRelay:
    """Receives OTLP/gRPC trace exports and forwards each, in order, until acknowledged: the
    delivery the Collector's `otlp` exporter gives with `retry_on_failure` (max_elapsed_time 0)
    and a `sending_queue`."""

    def __init__(self, forward_to: int) -> None:
        self.queue: queue.Queue[bytes] = queue.Queue()
        self.received = 0
        self.forwarded = 0
        self.retries = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.unary_unary_rpc_method_handler(
            self._receive,
            request_deserializer=None,
            response_serializer=lambda m: m.SerializeToString(),
        )
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(TRACE_SERVICE, {"Export": handler}),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self._target = f"127.0.0.1:{forward_to}"
        self._stop = threading.Event()
        self._counting = threading.Lock()
        self._thread = threading.Thread(target=self._forward, daemon=True)

    def _receive(self, body: bytes, context) -> ExportTraceServiceResponse:
        with self._counting:
            self.received += 1
        self.queue.put(body)
        return ExportTraceServiceResponse()

    def delivered_all(self) -> bool:
        """Whether every request acknowledged to the sender has been acknowledged downstream."""
        with self._counting:
            return self.forwarded == self.received

    def _forward(self) -> None:
        channel = grpc.insecure_channel(self._target)
        export = channel.unary_unary(
            f"/{TRACE_SERVICE}/Export",
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        while not self._stop.is_set():
            try:
                body = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            while not self._stop.is_set():
                try:
                    export(body, timeout=5)
                    with self._counting:
                        self.forwarded += 1
                    break
                except grpc.RpcError:
                    self.retries += 1
                    time.sleep(0.1)

    def __enter__(self) -> RetryingRelay:
        self.server.start()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.server.stop(grace=None)
