"""A nightly canary: an instrumented payment router whose admission reaches a collector.

    python examples/otel_canary.py --endpoint http://localhost:4317   # an OpenTelemetry Collector
    python examples/otel_canary.py                                     # no collector: print only

The router is instrumented once with `@decision_point`; it would run the same way in
production, where the spans cost nothing extra. The canary sets a trial scope around each call,
declares the run with `evaluation_run`, and the EvidenceProcessor on the tracer provider
assesses the run on its worker thread when that span ends, then publishes the `verdictgate.admission` span, the
`gen_ai.evaluation.result` event and the metrics through the same providers.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

from opentelemetry import _logs, metrics, trace
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import verdictgate

SUITE = Path(__file__).with_name("payment_suite.json")


@verdictgate.decision_point("payment_router")
def route(message: str) -> str:
    """The decision point: the production router, instrumented once."""
    text = message.lower()
    for keywords, label in [
        (("twice", "two identical"), "duplicate_charge"),
        (("refund",), "refund_delay"),
        (("recognise", "without permission"), "card_security"),
        (("atm", "cash machine"), "cash_withdrawal"),
        (("transfer",), "transfer_delay"),
    ]:
        if any(keyword in text for keyword in keywords):
            return label
    return "merchant_dispute"


def configure(
    endpoint: str | None, processor: verdictgate.EvidenceProcessor
) -> tuple[TracerProvider, MeterProvider, LoggerProvider]:
    """Global SDK providers: the EvidenceProcessor first (so the admission it publishes at
    shutdown still reaches the exporting processor after it), then OTLP export when asked."""
    resource = Resource.create({"service.name": "payment-router-canary"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(processor)
    readers = []
    logger_provider = LoggerProvider(resource=resource)
    if endpoint:
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True))
        )
        readers.append(
            PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint, insecure=True))
        )
        logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(OTLPLogExporter(endpoint=endpoint, insecure=True))
        )
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    _logs.set_logger_provider(logger_provider)
    return tracer_provider, meter_provider, logger_provider


def canary(endpoint: str | None = None) -> verdictgate.Assessment:
    """Run every suite case as often as the policy needs through the router; return the admission."""
    admitted: list[verdictgate.Assessment] = []
    processor = verdictgate.EvidenceProcessor(
        verdictgate.Publisher(), on_assessment=admitted.append
    )
    tracer_provider, meter_provider, logger_provider = configure(endpoint, processor)

    suite = verdictgate.load_suite(SUITE)
    policy = verdictgate.Policy.with_tolerance(suite.tolerance)
    plan = verdictgate.plan_run(suite, policy)  # repeats per case, sized from the tolerance
    run_id = f"canary-{uuid.uuid4().hex[:8]}"
    with verdictgate.evaluation_run(
        run_id=run_id,
        suite=suite,
        policy=policy,
        planned_trials=plan.calls,
        isolation=verdictgate.Isolation.FRESH_SESSION,
    ):
        for case in suite.cases:
            for index in range(plan.repeats[case.id]):
                with verdictgate.trial(
                    run=run_id, case=case.id, index=index, expected=case.expected
                ):
                    route(case.input)
    tracer_provider.shutdown()  # the admission is published, then every span exported
    meter_provider.shutdown()
    logger_provider.shutdown()
    return admitted[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--endpoint", help="OTLP/gRPC endpoint of a collector, e.g. http://localhost:4317"
    )
    args = parser.parse_args()
    assessment = canary(args.endpoint)
    print(f"{assessment.run.id}: {assessment.status.value} — {assessment.headline}")


if __name__ == "__main__":
    main()
