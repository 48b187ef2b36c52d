"""Run by test_frameworks_privacy.py in a process of its own (Strands reads its conventions
once per process): every framework with content capture on, every verdictgate output
collected. Prints JSON: what verdictgate exported and stored, and what the frameworks emitted."""

from __future__ import annotations

import io
import json
import os
import sys

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"  # content attributes

from opentelemetry import trace
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

import verdictgate
from framework_support import (
    SECRET_INPUT,
    langgraph_factory,
    openai_agents_factory,
    strands_factory,
)
from verdictgate import from_langgraph, from_openai_agents, from_strands
from verdictgate.reports.json_report import report_document
from verdictgate.suite import Case, Contract, Suite
from verdictgate.trials_file import TrialWriter

framework_spans = InMemorySpanExporter()
framework_provider = TracerProvider()
framework_provider.add_span_processor(SimpleSpanProcessor(framework_spans))
trace.set_tracer_provider(framework_provider)  # the frameworks' spans, to show content was on

agents = {
    "strands": (from_strands(strands_factory({SECRET_INPUT: [["refund"]]})), "refund"),
    "langgraph": (from_langgraph(langgraph_factory({SECRET_INPUT: ["billing"]})), "billing"),
    "openai_agents": (
        from_openai_agents(openai_agents_factory({SECRET_INPUT: ["billing"]})),
        "billing",
    ),
}
exported: list[str] = []
for name, (agent, route) in agents.items():
    spans, metrics, logs = (
        InMemorySpanExporter(),
        InMemoryMetricReader(),
        InMemoryLogRecordExporter(),
    )
    telemetry = verdictgate.Telemetry(span_exporter=spans, metric_reader=metrics, log_exporter=logs)
    suite = Suite(name, "router", (Case("c0", SECRET_INPUT, route),), Contract(frozenset({route})))
    stored = io.BytesIO()
    assessment = verdictgate.run(
        agent, suite, repeats=2, telemetry=telemetry, sink=TrialWriter(stored, name, "router")
    )
    telemetry.flush()
    exported += [span.to_json() for span in spans.get_finished_spans()]
    exported.append(metrics.get_metrics_data().to_json())
    exported += [record.to_json() for record in logs.get_finished_logs()]
    exported.append(stored.getvalue().decode())
    exported.append(json.dumps(report_document(assessment)))
    telemetry.shutdown()

json.dump(
    {
        "exported": exported,
        "framework": [span.to_json() for span in framework_spans.get_finished_spans()],
    },
    sys.stdout,
)
