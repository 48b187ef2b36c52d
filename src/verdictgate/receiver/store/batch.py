"""What one write brings to the store (`Batch`), and the caps it is held to (`WriteCaps`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...otel.framework_traces import FrameworkSpan, TrialMark
from ...otel.span_decoding import DeclaredRun
from ...trial_model import Trial
from .held_spans import SettledTrials

Labels = Mapping[str, tuple[str | None, str | None]]
"""Per run, the (suite, point) its trials came under."""
DueTrace = tuple[str, float, float]
"""A trace whose due trials a write settles: its id, quiet since, held since."""


@dataclass(frozen=True)
class Batch:
    """A request's contents, whole: decision spans' trials, run spans' declarations (decoded at
    the door), the (suite, point) each run's trials came under, harnesses' trial `marks` and
    framework `spans`; or the trials a due trace settles (derived by the receiver from what
    `Store.held_trace` read): new ones in `trials`, those settled before and derived again
    since a span came late in `again`, and the trial spans they settle (`settled`)."""

    trials: Sequence[Trial] = ()
    declarations: Sequence[DeclaredRun] = ()
    labels: Labels = field(default_factory=dict)
    marks: Sequence[TrialMark] = ()
    spans: Sequence[FrameworkSpan] = ()
    again: Sequence[Trial] = ()
    settled: SettledTrials = ()


@dataclass(frozen=True)
class WriteCaps:
    """What a write may hold: trials a run takes at most (`max_trials`), framework spans held
    at most (`max_held_spans`, the traces quiet the longest let go beyond it); None for no cap."""

    max_trials: int | None = None
    max_held_spans: int | None = None


NO_CAPS = WriteCaps()
"""A write held to no cap."""
