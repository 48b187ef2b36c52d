"""Crash test: the receiver is killed with SIGKILL while a collector keeps sending; after a
restart every run's counts are exact — nothing lost, nothing counted twice.

The collector here is a relay with the delivery the Collector's `otlp` exporter gives with
`retry_on_failure` (max_elapsed_time 0) and a `sending_queue` (see collector-config/gateway.yaml):
every request is retried until it is acknowledged. rotel 0.0.1a15 was tried first and drops a
batch whose request was in flight when the receiver died ("Exporting failed, dropping data",
broken pipe), so it cannot show at-least-once delivery; the rotel end-to-end test covers the
normal path.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from test_collector_e2e import free_port
from verdictgate import Contract, Policy, Suite, decision, evaluation_run, trial
from verdictgate.receiver.ingest import TRACE_SERVICE
from verdictgate.receiver.store import Store

RUNS, CASES, TRIALS = 12, 4, 20


def start_receiver(store: str, port: int, *options: str) -> subprocess.Popen:
    """`verdictgate serve` in a process of its own, with `options`, once it listens."""
    process = subprocess.Popen(
        [sys.executable, "-m", "verdictgate", "serve", "--store", store,
         "--grpc-listen", f"127.0.0.1:{port}", "--http-listen", f"127.0.0.1:{free_port()}",
         "--idle", "600s", *options],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        import socket

        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.05)
    raise RuntimeError("the receiver did not start")


class RetryingRelay:
    """Receives OTLP/gRPC trace exports and forwards each, in order, until acknowledged."""

    def __init__(self, forward_to: int) -> None:
        self.queue: queue.Queue[bytes] = queue.Queue()
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
        self._thread = threading.Thread(target=self._forward, daemon=True)

    def _receive(self, body: bytes, context) -> ExportTraceServiceResponse:
        self.queue.put(body)
        return ExportTraceServiceResponse()

    def _forward(self) -> None:
        channel = grpc.insecure_channel(self._target)
        export = channel.unary_unary(f"/{TRACE_SERVICE}/Export", request_serializer=None,
                                     response_deserializer=ExportTraceServiceResponse.FromString)  # fmt: skip
        while not self._stop.is_set():
            try:
                body = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            while not self._stop.is_set():
                try:
                    export(body, timeout=5)
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


def send_runs(collector_port: int, done: threading.Event) -> None:
    """Emit RUNS runs of decision spans through the official OTLP exporter, steadily."""
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector_port}", insecure=True),
            schedule_delay_millis=20,
            max_export_batch_size=64,
        )
    )
    suite = Suite("crash", "gate", (), Contract({"approve", "deny"}))
    for run_number in range(RUNS):
        run_id = f"crash-{run_number}"
        with evaluation_run(run_id=run_id, suite=suite, policy=Policy(), planned_trials=CASES * TRIALS,
                            tracer_provider=provider):  # fmt: skip
            for index in range(TRIALS):
                for case in range(CASES):
                    with (
                        trial(run=run_id, case=f"c{case}", index=index, expected="approve"),
                        decision("gate", tracer_provider=provider) as recorder,
                    ):
                        recorder.record("approve")
                time.sleep(0.01)
    provider.shutdown()
    done.set()


def test_sigkill_while_a_collector_keeps_sending(tmp_path):
    store = str(tmp_path / "store.sqlite")
    port = free_port()
    receiver = start_receiver(store, port)
    relay = RetryingRelay(port).__enter__()
    done = threading.Event()
    sender = threading.Thread(target=send_runs, args=(relay.port, done), daemon=True)
    try:
        sender.start()
        time.sleep(1.0)
        receiver.send_signal(signal.SIGKILL)  # mid-stream, no chance to flush anything
        receiver.wait()
        time.sleep(0.5)  # the collector meets a closed port and keeps retrying
        receiver = start_receiver(store, port)
        assert done.wait(120), "the sender did not finish"
        expected = RUNS * CASES * TRIALS
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = Store(store).runs()
            if sum(run.received for run in runs) >= expected and len(runs) == RUNS:
                break
            time.sleep(0.25)
    finally:
        relay.__exit__()
        receiver.terminate()
        receiver.wait(10)
    reopened = Store(store)
    runs = reopened.runs()
    assert relay.retries > 0  # the kill really interrupted delivery
    assert len(runs) == RUNS
    for run in runs:
        evidence = reopened.evidence(run.run_id)
        assert run.received == CASES * TRIALS, run.run_id  # nothing lost
        assert (
            sum(len(case.slots) for case in evidence.cases.values()) == CASES * TRIALS
        )  # nothing twice
        assert evidence.conflicts == 0
        assert run.final and run.planned_trials == CASES * TRIALS
