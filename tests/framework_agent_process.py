"""An agent process for test_frameworks_receiver.py: a Strands agent called by its harness, each
call inside a `verdictgate.trial` span, every span exported over OTLP/gRPC to argv[1], twice
(two batch processors of different sizes: each span arrives in two different requests), in
small batches so that one trial's spans arrive in several requests.

    python framework_agent_process.py ENDPOINT RUN REPEATS [PAUSE_SECONDS]
"""

from __future__ import annotations

import sys
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import verdictgate
from framework_support import strands_factory

SCRIPT = {
    "I was charged twice": [["refund"]],
    "Your service is a disgrace": [["escalate"], ["escalate"], ["escalate"], ["refund"]],
    "Where is my order?": [["lookup", "refund"], ["lookup"]],
}
EXPECTED = {
    "I was charged twice": "refund",
    "Your service is a disgrace": "escalate",
    "Where is my order?": "lookup",
}
CASES = {text: f"c{n}" for n, text in enumerate(SCRIPT)}


def main(endpoint: str, run: str, repeats: int, pause: float = 0.0) -> None:
    provider = TracerProvider()
    for batch in (3, 7):
        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
        provider.add_span_processor(
            BatchSpanProcessor(exporter, max_export_batch_size=batch, schedule_delay_millis=5)
        )
    trace.set_tracer_provider(provider)  # Strands records through the global provider
    factory = strands_factory(SCRIPT)
    for index in range(repeats):
        for text, case in CASES.items():
            with verdictgate.trial_span(
                run=run,
                case=case,
                index=index,
                decision="tools",
                expected=EXPECTED[text],
                suite="support",
            ):
                factory()(text)
            time.sleep(pause)  # a steady stream, for a test that interrupts it
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]) if sys.argv[4:] else 0.0)
