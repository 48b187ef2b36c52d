"""The evidence policy: how much change is tolerated and how sure the answer must be."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .judgement import DEFAULT_METHOD, MAX_SEQUENTIAL_TOLERANCE, Method

PRECISION_PRESETS: dict[str, float] = {"cheap": 0.10, "balanced": 0.05, "strict": 0.01}
"""Named tolerances for the change rate between reruns."""

DEFAULT_TOLERANCE = PRECISION_PRESETS["balanced"]


class PassWhen(str, Enum):
    """What makes a trial pass, for the pass rate (`Policy.pass_rate`)."""

    EVALUATOR = "evaluator"
    """An evaluator passed it: a tier, an importer's `success`, a trials file's `passed`."""
    EXPECTED = "expected"
    """It decided its case's expected decision: a stable but wrong route fails every trial."""

    @property
    def rate_name(self) -> str:
        """What the reports call the pooled pass rate of trials passed this way."""
        return "pass rate" if self is PassWhen.EVALUATOR else "pass rate (expected decisions)"


class Claim(str, Enum):
    """What a qualified run promises: about the cases tested, or about new inputs."""

    TESTED = "tested"
    """The tested cases would reach the same decisions again (pairs pooled across cases)."""
    POPULATION = "population"
    """New inputs like the tested ones would (the case is the unit: it needs many cases)."""


@dataclass(frozen=True)
class Policy:
    """Tolerated change rate, confidence of every interval, and the dominance threshold."""

    tolerance: float = DEFAULT_TOLERANCE
    confidence: float = 0.95
    dominance_threshold: float = 0.9
    pass_rate: float | None = None
    """The pass rate trials must be shown to exceed, when one is required."""
    pass_when: PassWhen = PassWhen.EVALUATOR
    """What makes a trial pass for that rate: an evaluator's verdict, or its expected decision."""
    max_p95_ms: float | None = None
    """The 95th-percentile latency trials must be shown to stay under, when one is set."""
    max_p95_tool_calls: float | None = None
    """The 95th-percentile tools called per trial must be shown to stay under, when one is set."""
    method: Method = DEFAULT_METHOD
    """How a change rate is judged: the exact rule (the default), Wilson's interval, or the
    sequential rule (valid however often it is looked at)."""
    claim: Claim = Claim.TESTED
    """Which verdict gates the status: the pooled one (tested cases) or the case-level one."""

    def __post_init__(self) -> None:
        if not 0.0 < self.tolerance < 1.0:
            raise ValueError(f"tolerance must be between 0 and 1 (exclusive), got {self.tolerance}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(
                f"confidence must be between 0 and 1 (exclusive), got {self.confidence}"
            )
        if self.max_p95_ms is not None and not self.max_p95_ms > 0:
            raise ValueError(f"a latency threshold must be positive, got {self.max_p95_ms}")
        if self.max_p95_tool_calls is not None and not self.max_p95_tool_calls > 0:
            raise ValueError(
                f"a tool-call threshold must be positive, got {self.max_p95_tool_calls}"
            )
        if self.method is Method.SEQUENTIAL and not self.tolerance < MAX_SEQUENTIAL_TOLERANCE:
            raise ValueError(
                f"the sequential rule needs a tolerance below {MAX_SEQUENTIAL_TOLERANCE}, got "
                f"{self.tolerance}"
            )
        if self.pass_rate is not None and not 0.0 < self.pass_rate < 1.0:
            raise ValueError(f"a required pass rate must be between 0 and 1, got {self.pass_rate}")
        if not 0.0 < self.dominance_threshold <= 1.0:
            raise ValueError(
                f"dominance threshold must be in (0, 1], got {self.dominance_threshold}"
            )

    @classmethod
    def with_tolerance(
        cls,
        tolerance: float | None,
        pass_rate: float | None = None,
        pass_when: PassWhen | None = None,
    ) -> Policy:
        """The default policy at this tolerance (the default tolerance when None), requiring
        `pass_rate` when given, of trials that pass as `pass_when` says (an evaluator's verdict
        when None)."""
        return cls(
            tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance,
            pass_rate=pass_rate,
            pass_when=pass_when or PassWhen.EVALUATOR,
        )

    @classmethod
    def preset(cls, name: str) -> Policy:
        """The policy for a named precision: cheap, balanced or strict."""
        return cls(tolerance=PRECISION_PRESETS[name])
