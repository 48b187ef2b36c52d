"""Crash test: the receiver is killed with SIGKILL while a collector keeps sending; after a
restart every run's counts are exact — nothing lost, nothing counted twice.

The collector here is a relay (`collector_support.RetryingRelay`) with the delivery the
Collector's `otlp` exporter gives with `retry_on_failure` (max_elapsed_time 0) and a
`sending_queue` (see collector-config/gateway.yaml): every request is retried until it is
acknowledged. rotel 0.0.1a15 was tried first and drops a batch whose request was in flight when
the receiver died ("Exporting failed, dropping data", broken pipe), so it cannot show
at-least-once delivery; the rotel end-to-end test covers the normal path.
"""

from __future__ import annotations

import signal
import threading
import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from collector_support import RetryingRelay
from components import free_port
from receiver_support import start_serve
from verdictgate import Contract, Policy, Suite, decision, evaluation_run, trial
from verdictgate.receiver.store import Store

RUNS, CASES, TRIALS = 12, 4, 20


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
        with evaluation_run(
            run_id=run_id,
            suite=suite,
            policy=Policy(),
            planned_trials=CASES * TRIALS,
            tracer_provider=provider,
        ):
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
    receiver = start_serve(store, port)
    relay = RetryingRelay(port).__enter__()
    done = threading.Event()
    sender = threading.Thread(target=send_runs, args=(relay.port, done), daemon=True)
    try:
        sender.start()
        time.sleep(1.0)
        receiver.send_signal(signal.SIGKILL)  # mid-stream, no chance to flush anything
        receiver.wait()
        time.sleep(0.5)  # the collector meets a closed port and keeps retrying
        receiver = start_serve(store, port)
        assert done.wait(120), "the sender did not finish"
        expected = RUNS * CASES * TRIALS
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the relay has delivered every span it took
            runs = Store(store).runs()
            arrived = sum(run.received for run in runs) >= expected and len(runs) == RUNS
            if arrived and relay.delivered_all() and all(run.final for run in runs):
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
