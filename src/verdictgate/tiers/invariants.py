"""Invariants: cheap, deterministic properties every valid output holds, checked in process."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from ..trial_model import Answer


class Severity(str, Enum):
    """What a broken invariant does: `block` rejects the run, `warn` is reported."""

    BLOCK = "block"
    WARN = "warn"


@dataclass(frozen=True)
class Invariant:
    """A named check `check(output, input) -> bool`; a `block` failure rejects the run, a `warn`
    failure is reported. Only the name ever leaves the process."""

    name: str
    check: Callable[[Answer, Answer], bool]
    severity: Severity | str = "block"

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "severity", Severity(self.severity))
        except ValueError:
            raise ValueError(f"severity must be block or warn, got {self.severity!r}") from None


def evaluate(
    invariants: Iterable[Invariant], output: object, given: str | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(failed blocking names, failed warning names); a check that raises has failed."""
    failed: list[str] = []
    warned: list[str] = []
    for invariant in invariants:
        try:
            held = bool(invariant.check(output, given))
        except Exception:
            held = False
        if not held:
            (failed if invariant.severity is Severity.BLOCK else warned).append(invariant.name)
    return tuple(failed), tuple(warned)
