"""Publishing an assessment into a telemetry pipeline: admission span, evaluation event, metrics."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from opentelemetry import _logs, metrics, trace
from opentelemetry.trace import SpanKind

from ..assessment import Assessment
from . import conventions as names
from .admission_record import COUNTER, AdmissionRecord, InconclusiveStreaks, TrialTally
from .latest_admissions import LatestAdmissions


class Publisher:
    """Publishes assessments through whichever providers it is given (the globals by default).

    Metric attributes are limited to suite, point and contract routes (and the latest run's
    id on `verdictgate.admission.run`); any other route is folded into `_other`, and no case
    id ever becomes a metric attribute. The gauges show the latest admission of each suite and
    point alone (`LatestAdmissions`).
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        logger_provider: _logs.LoggerProvider | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(
            names.INSTRUMENTATION_SCOPE, tracer_provider=tracer_provider
        )
        self._logger = _logs.get_logger(
            names.INSTRUMENTATION_SCOPE, logger_provider=logger_provider
        )
        meter = metrics.get_meter(names.INSTRUMENTATION_SCOPE, meter_provider=meter_provider)
        self._latest = LatestAdmissions.on(meter)
        unit, description = COUNTER
        self._trials = meter.create_counter(names.METRIC_TRIALS, unit=unit, description=description)
        self._tally = TrialTally()
        self._streaks = InconclusiveStreaks()

    def publish(
        self, assessment: Assessment, contract_routes: AbstractSet[str], *, final: bool = True
    ) -> None:
        """Emit the admission span, the evaluation event in its context, and the metrics.

        A run published more than once (canary windows, then its final admission) adds to the
        trials counter only what it had not counted yet; `final` forgets it."""
        streak = self._streaks.after(assessment, final)
        self.emit(
            AdmissionRecord.of(
                assessment, contract_routes, self._tally, final=final, inconclusive_streak=streak
            )
        )

    def emit(self, publication: AdmissionRecord) -> None:
        """Emit a publication through this publisher's providers."""
        with self._tracer.start_as_current_span(
            names.ADMISSION_SPAN, kind=SpanKind.INTERNAL, attributes=publication.span_attributes
        ):
            self._logger.emit(
                event_name=names.EVALUATION_EVENT, attributes=publication.event_attributes
            )
        self._latest.replace(publication)
        for outcome, added in publication.trials_added.items():
            self._trials.add(added, {**publication.metric_base, names.OUTCOME: outcome})
