"""An OTLP/gRPC endpoint as a publish target: each signal of a staged admission (its span, its
event, its metrics) encoded once as export requests and sent until each is accepted, each call
within its own deadline, a signal that fails never stopping the others."""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlparse

import grpc
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
)
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.util.re import parse_env_headers

from ...errors import InputError
from ...otel import conventions as names
from ...otel.admission_record import COUNTER, GAUGES, AdmissionRecord, publishing_resource
from ...wire_types import AttributeValue
from .forwarder import LOGS, METRICS, TRACES

logger = logging.getLogger(__name__)

ExportResponse = (
    trace_service_pb2.ExportTraceServiceResponse
    | logs_service_pb2.ExportLogsServiceResponse
    | metrics_service_pb2.ExportMetricsServiceResponse
)
"""What an OTLP export answers, of one signal or another."""

RETRYABLE = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)
"""OTLP's retryable codes, and the two an operator fixes (a token, a permission): admissions
wait for those rather than being dropped."""
MAX_REQUEST_BYTES = 1 << 20
"""Largest export request sent: an admission's metrics beyond it go in several requests, well
under the Collector's default limit of 4 MiB a request."""
KEPT_REQUESTS = 1024
"""(entry, signal) pairs whose requests are kept while they wait to be sent (a pair sent is let
go): far more than ever wait at once (the entries being delivered, and one for each stalled
signal)."""
SIGNAL_NAMES = {TRACES: "traces", LOGS: "logs", METRICS: "metrics"}
EXHAUSTED_ATTEMPTS = 5
"""Attempts at one request that the target answers RESOURCE_EXHAUSTED without saying when to
come back (OTLP: retryable only with RetryInfo) before it is set aside, so the entries after it
flow."""


def any_value(value: AttributeValue) -> AnyValue:
    """A Python attribute value as an OTLP AnyValue."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, (list, tuple)):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    return AnyValue(string_value=str(value))


def _key_values(attributes: Mapping[str, AttributeValue]) -> list[KeyValue]:
    """OTLP key-values; a None value is left out, as the SDK leaves it out."""
    return [
        KeyValue(key=key, value=any_value(value))
        for key, value in attributes.items()
        if value is not None
    ]


@dataclass
class _Requests:
    """The requests of one signal of an entry still to send, and the RESOURCE_EXHAUSTED
    answers in a row to the one at the front."""

    messages: list[Message]
    exhausted: int = 0


class OtlpTarget:
    """An OTLP/gRPC endpoint (`http://` plain, `https://` TLS with the system's roots or
    `OTEL_EXPORTER_OTLP_CERTIFICATE`; headers from `OTEL_EXPORTER_OTLP_HEADERS`). Each attempt
    sends the bytes the publication made the first time, so a retry repeats the same span id;
    the trials counter is cumulative from the target's start, so a repeat never adds twice.
    Each export call has its own deadline (`timeout` seconds)."""

    def __init__(self, endpoint: str, *, timeout: float = 5.0) -> None:
        url = urlparse(endpoint)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise InputError(
                f"expected http://HOST:PORT or https://HOST:PORT, got {endpoint!r}",
                arguments=("publish_endpoint",),
            )
        self.endpoint = endpoint
        self._timeout = timeout
        if url.scheme == "https":
            roots = None
            if certificate := os.environ.get("OTEL_EXPORTER_OTLP_CERTIFICATE"):
                with open(certificate, "rb") as stream:
                    roots = stream.read()
            self._channel = grpc.secure_channel(url.netloc, grpc.ssl_channel_credentials(roots))
        else:
            self._channel = grpc.insecure_channel(url.netloc)
        headers = parse_env_headers(os.environ.get("OTEL_EXPORTER_OTLP_HEADERS", ""), liberal=True)
        self._metadata = [(key.lower(), value) for key, value in headers.items()]
        self._exports = {
            TRACES: trace_service_pb2_grpc.TraceServiceStub(self._channel).Export,
            LOGS: logs_service_pb2_grpc.LogsServiceStub(self._channel).Export,
            METRICS: metrics_service_pb2_grpc.MetricsServiceStub(self._channel).Export,
        }
        self._resource = Resource(attributes=_key_values(publishing_resource()))
        self._scope = InstrumentationScope(name=names.INSTRUMENTATION_SCOPE)
        self._started_ns = time.time_ns()
        self._totals: dict[tuple[object, ...], int] = {}
        self._requests: OrderedDict[tuple[int, int], _Requests] = OrderedDict()
        """The export requests of the (entry, signal) pairs begun lately, each made once, those
        accepted taken off the front (a done pair keeps none): a signal tried again, after the
        entries behind it, sends the same bytes, and its trials are counted once."""
        self.set_aside = 0
        """Requests refused for good or set aside after EXHAUSTED_ATTEMPTS (logged each)."""

    def deliver(
        self, seq: int, publication: AdmissionRecord, pending: int
    ) -> tuple[int, str | None]:
        done, failures = 0, []
        for signal, name in SIGNAL_NAMES.items():
            if not pending & signal:
                continue
            requests = self._requests_of(seq, signal, publication)
            failure = None
            while requests.messages and failure is None:
                failure = self._send(signal, requests, publication.run_id)
            if failure is None:
                done |= signal
                self._requests.pop((seq, signal), None)  # sent: never encoded again
            else:
                failures.append(f"{name}: {failure}")
        return done, "; ".join(failures) or None

    def _requests_of(self, seq: int, signal: int, publication: AdmissionRecord) -> _Requests:
        """The requests of one signal of an entry, made when first asked for."""
        key = (seq, signal)
        requests = self._requests.get(key)
        if requests is not None:
            self._requests.move_to_end(key)
        else:
            requests = self._requests[key] = _Requests(self._encode(publication, signal))
            while len(self._requests) > KEPT_REQUESTS:
                self._requests.popitem(last=False)
        return requests

    def _send(self, signal: int, requests: _Requests, run_id: str) -> str | None:
        """Export the request at the front, within its own deadline, taking it off when it is
        done with (accepted, or refused for good and logged); else why it must be tried
        again."""
        request = requests.messages[0]
        try:
            response = self._exports[signal](
                request, timeout=self._timeout, metadata=self._metadata
            )
        except grpc.RpcError as error:
            code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
            details = error.details() if hasattr(error, "details") else ""
            why = f"{code.name}: {(str(details or '').splitlines() or [''])[0]}"
            if code is grpc.StatusCode.RESOURCE_EXHAUSTED and not _retry_info(error):
                requests.exhausted += 1
                if requests.exhausted < EXHAUSTED_ATTEMPTS:
                    return why
            elif code in RETRYABLE:  # RESOURCE_EXHAUSTED with RetryInfo: the target will be back
                return why
            self.set_aside += 1
            logger.error(
                "verdictgate: %s refused part of run %s's admission for good (%s, %d bytes); "
                "set aside so the admissions after it are delivered",
                self.endpoint,
                run_id,
                code.name,
                request.ByteSize(),
            )
        else:
            rejected = _rejected(response)
            if rejected:
                logger.warning(
                    "verdictgate: %s rejected %d items of run %s's admission",
                    self.endpoint,
                    rejected,
                    run_id,
                )
        requests.messages.pop(0)
        requests.exhausted = 0
        return None

    def close(self) -> None:
        self._channel.close()

    def _encode(self, publication: AdmissionRecord, signal: int) -> list[Message]:
        """The export requests of one signal of a publication: its span, its event, or its
        metrics in as many requests as keep each within MAX_REQUEST_BYTES."""
        when = publication.time_unix_nano
        trace_id, span_id = bytes.fromhex(publication.trace_id), bytes.fromhex(publication.span_id)
        if signal == TRACES:
            span = trace_pb2.Span(
                trace_id=trace_id,
                span_id=span_id,
                name=names.ADMISSION_SPAN,
                kind=trace_pb2.Span.SpanKind.SPAN_KIND_INTERNAL,
                start_time_unix_nano=when,
                end_time_unix_nano=when,
                attributes=_key_values(publication.span_attributes),
            )
            return [
                trace_service_pb2.ExportTraceServiceRequest(
                    resource_spans=[
                        trace_pb2.ResourceSpans(
                            resource=self._resource,
                            scope_spans=[trace_pb2.ScopeSpans(scope=self._scope, spans=[span])],
                        )
                    ]
                )
            ]
        if signal == LOGS:
            record = logs_pb2.LogRecord(
                time_unix_nano=when,
                observed_time_unix_nano=when,
                event_name=names.EVALUATION_EVENT,
                attributes=_key_values(publication.event_attributes),
                trace_id=trace_id,
                span_id=span_id,
                flags=1,  # sampled, as the admission span was
            )
            return [
                logs_service_pb2.ExportLogsServiceRequest(
                    resource_logs=[
                        logs_pb2.ResourceLogs(
                            resource=self._resource,
                            scope_logs=[
                                logs_pb2.ScopeLogs(scope=self._scope, log_records=[record])
                            ],
                        )
                    ]
                )
            ]
        return [self._metrics_request(chunk) for chunk in _chunks(self._metrics(publication))]

    def _metrics_request(
        self, metrics: list[metrics_pb2.Metric]
    ) -> metrics_service_pb2.ExportMetricsServiceRequest:
        return metrics_service_pb2.ExportMetricsServiceRequest(
            resource_metrics=[
                metrics_pb2.ResourceMetrics(
                    resource=self._resource,
                    scope_metrics=[metrics_pb2.ScopeMetrics(scope=self._scope, metrics=metrics)],
                )
            ]
        )

    def _metrics(self, publication: AdmissionRecord) -> list[metrics_pb2.Metric]:
        """Gauges as they stood at the admission; the trials counter as a cumulative sum."""
        when = publication.time_unix_nano
        by_name: dict[str, list[metrics_pb2.NumberDataPoint]] = {}
        for name, value, attributes in publication.gauges:
            point = metrics_pb2.NumberDataPoint(
                attributes=_key_values(attributes), time_unix_nano=when
            )
            if isinstance(value, int):
                point.as_int = value
            else:
                point.as_double = value
            by_name.setdefault(name, []).append(point)
        metrics = [
            metrics_pb2.Metric(
                name=name,
                unit=GAUGES[name][0],
                description=GAUGES[name][1],
                gauge=metrics_pb2.Gauge(data_points=points),
            )
            for name, points in by_name.items()
        ]
        counted = []
        for outcome, added in publication.trials_added.items():
            stream = (*sorted(publication.metric_base.items()), outcome)  # the series it adds to
            self._totals[stream] = self._totals.get(stream, 0) + added
            attributes = {**publication.metric_base, names.OUTCOME: outcome}
            counted.append(
                metrics_pb2.NumberDataPoint(
                    attributes=_key_values(attributes),
                    start_time_unix_nano=min(self._started_ns, when),
                    time_unix_nano=when,
                    as_int=self._totals[stream],
                )
            )
        if counted:
            unit, description = COUNTER
            metrics.append(
                metrics_pb2.Metric(
                    name=names.METRIC_TRIALS,
                    unit=unit,
                    description=description,
                    sum=metrics_pb2.Sum(
                        data_points=counted,
                        aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE,
                        is_monotonic=True,
                    ),
                )
            )
        return metrics


def _rejected(response: ExportResponse) -> int:
    """Items an OTLP partial success says were rejected."""
    if not response.HasField("partial_success"):
        return 0
    partial = response.partial_success
    for field in ("rejected_spans", "rejected_log_records", "rejected_data_points"):
        if hasattr(partial, field):
            return int(getattr(partial, field))
    return 0


def _chunks(metrics: list[metrics_pb2.Metric]) -> list[list[metrics_pb2.Metric]]:
    """The metrics in groups of MAX_REQUEST_BYTES at most: a metric with more points than fit is
    split into several metrics of the same name, each with some of its points (a single point
    larger than that goes alone)."""
    budget = MAX_REQUEST_BYTES - (4 << 10)  # the resource and scope around them
    chunks: list[list[metrics_pb2.Metric]] = []
    current: list[metrics_pb2.Metric] = []
    size = 0
    for metric in metrics:
        points = _points(metric)
        bare = _with_points(metric, []).ByteSize() + 8
        start = 0
        while start < len(points):
            end, part = start + 1, bare + points[start].ByteSize() + 8
            while end < len(points) and size + part + points[end].ByteSize() + 8 <= budget:
                part += points[end].ByteSize() + 8
                end += 1
            if current and size + part > budget:  # it does not fit beside what is there
                chunks.append(current)
                current, size = [], 0
                continue
            current.append(_with_points(metric, points[start:end]))
            size += part
            start = end
    return [*chunks, current] if current else chunks


def _points(metric: metrics_pb2.Metric) -> list[metrics_pb2.NumberDataPoint]:
    return list(metric.gauge.data_points if metric.HasField("gauge") else metric.sum.data_points)


def _with_points(
    metric: metrics_pb2.Metric, points: list[metrics_pb2.NumberDataPoint]
) -> metrics_pb2.Metric:
    """A copy of the metric holding only `points`."""
    copy = metrics_pb2.Metric()
    copy.CopyFrom(metric)
    data = copy.gauge if copy.HasField("gauge") else copy.sum
    del data.data_points[:]
    data.data_points.extend(points)
    return copy


def _retry_info(error: grpc.RpcError) -> bool:
    """Whether a refusal carries RetryInfo (`grpc-status-details-bin`): OTLP's sign that the
    target expects the request again, as a busy one does."""
    trailers = (
        # (key, value) pairs (named tuples), which grpc's stub types as objects with two fields
        cast("tuple[tuple[str, str | bytes], ...]", error.trailing_metadata())
        if hasattr(error, "trailing_metadata")
        else None
    )
    for key, value in trailers or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            try:
                status = status_pb2.Status.FromString(value)
            except DecodeError:
                return False
            kind = error_details_pb2.RetryInfo.DESCRIPTOR.full_name
            return any(detail.type_url.endswith("/" + kind) for detail in status.details)
    return False
