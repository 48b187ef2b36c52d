"""A nightly canary: an instrumented payment router whose admission reaches a collector.

    python examples/otel_canary.py --endpoint http://localhost:4317   # an OpenTelemetry Collector
    python examples/otel_canary.py                                     # no collector: print only
    python examples/otel_canary.py --prometheus-port 9464 --every 3600 # hourly, scraped by Prometheus

The router is instrumented once with `@decision_point`; it would run the same way in
production, where the spans cost nothing extra. The canary sets a trial scope around each call,
declares the run with `evaluation_run`, and the EvidenceProcessor on the tracer provider
assesses the run on its worker thread when that span ends, then publishes the `verdictgate.admission` span, the
`gen_ai.evaluation.result` event and the metrics through the same providers. With a Prometheus
port, a `PrometheusMetricReader` on the same MeterProvider serves those metrics for Prometheus
to scrape (docs/alerting.md): run the canary every hour and `VerdictgateCanarySilent` pages
when it stops.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
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
    endpoint: str | None, processor: verdictgate.EvidenceProcessor, prometheus_port: int | None
) -> tuple[TracerProvider, MeterProvider, LoggerProvider, Callable[[], None]]:
    """Global SDK providers: the EvidenceProcessor first (so the admission it publishes at
    shutdown still reaches the exporting processor after it), then OTLP export and a Prometheus
    scrape endpoint when asked; the last item stops the scrape endpoint."""
    resource = Resource.create({"service.name": "payment-router-canary"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(processor)
    readers: list = []
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
    stop_scrape = lambda: None  # noqa: E731
    if prometheus_port is not None:  # the prometheus extra: pip install -e ".[prometheus]"
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        readers.append(PrometheusMetricReader())
        server, _ = start_http_server(prometheus_port, addr="127.0.0.1")
        stop_scrape = server.shutdown
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    _logs.set_logger_provider(logger_provider)
    return tracer_provider, meter_provider, logger_provider, stop_scrape


def canary(
    endpoint: str | None = None,
    *,
    prometheus_port: int | None = None,
    runs: int = 1,
    every: float = 0.0,
    after_run: Callable[[verdictgate.Assessment], None] = lambda assessment: None,
) -> verdictgate.Assessment:
    """Run every suite case as often as the policy needs through the router, `runs` times
    `every` seconds apart (`after_run` sees each admission); return the last admission."""
    admitted: list[verdictgate.Assessment] = []
    processor = verdictgate.EvidenceProcessor(
        verdictgate.Publisher(), on_assessment=admitted.append
    )
    tracer_provider, meter_provider, logger_provider, stop_scrape = configure(
        endpoint, processor, prometheus_port
    )
    suite = verdictgate.load_suite(SUITE)
    policy = verdictgate.Policy.with_tolerance(suite.tolerance)
    plan = verdictgate.plan_run(suite, policy)  # repeats per case, sized from the tolerance
    for number in range(runs):
        if number:
            time.sleep(every)
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
        processor.force_flush()  # the run span ended: its admission is published
        after_run(admitted[-1])
    tracer_provider.shutdown()  # every span exported
    meter_provider.shutdown()
    logger_provider.shutdown()
    stop_scrape()
    return admitted[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--endpoint", help="OTLP/gRPC endpoint of a collector, e.g. http://localhost:4317"
    )
    parser.add_argument(
        "--prometheus-port", type=int, help="Serve the admission metrics on this loopback port."
    )
    parser.add_argument("--every", type=float, help="Run again every SECONDS, until stopped.")
    args = parser.parse_args()

    def report(assessment: verdictgate.Assessment) -> None:
        print(f"{assessment.run.id}: {assessment.status.value} — {assessment.headline}", flush=True)

    runs = 1 if args.every is None else 1_000_000_000
    canary(args.endpoint, prometheus_port=args.prometheus_port, runs=runs,
           every=args.every or 0.0, after_run=report)  # fmt: skip


if __name__ == "__main__":
    main()
