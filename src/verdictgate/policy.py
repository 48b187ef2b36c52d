"""The evidence policy: how much change is tolerated and how sure the answer must be."""

from __future__ import annotations

from dataclasses import dataclass

PRECISION_PRESETS: dict[str, float] = {"cheap": 0.10, "balanced": 0.05, "strict": 0.01}
"""Named tolerances for the change rate between reruns."""

DEFAULT_TOLERANCE = PRECISION_PRESETS["balanced"]


@dataclass(frozen=True)
class Policy:
    """Tolerated change rate, confidence of every interval, and the dominance threshold."""

    tolerance: float = DEFAULT_TOLERANCE
    confidence: float = 0.95
    dominance_threshold: float = 0.9

    def __post_init__(self) -> None:
        if not 0.0 < self.tolerance < 1.0:
            raise ValueError(f"tolerance must be between 0 and 1 (exclusive), got {self.tolerance}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(
                f"confidence must be between 0 and 1 (exclusive), got {self.confidence}"
            )
        if not 0.0 < self.dominance_threshold <= 1.0:
            raise ValueError(
                f"dominance threshold must be in (0, 1], got {self.dominance_threshold}"
            )

    @classmethod
    def with_tolerance(cls, tolerance: float | None) -> Policy:
        """The default policy at this tolerance (the default tolerance when None)."""
        return cls() if tolerance is None else cls(tolerance=tolerance)

    @classmethod
    def preset(cls, name: str) -> Policy:
        """The policy for a named precision: cheap, balanced or strict."""
        return cls(tolerance=PRECISION_PRESETS[name])
