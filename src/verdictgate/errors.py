"""Errors a user can cause; each renders as one clear line naming file, line and field."""

from __future__ import annotations

USAGE_EXIT = 2
"""Exit code for bad flags and unreadable or malformed input."""


class VerdictgateError(Exception):
    """Base of every error verdictgate raises on purpose."""


class InputError(VerdictgateError):
    """Malformed or unreadable input: `file:line: field: problem`."""

    def __init__(
        self,
        problem: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.problem = problem
        self.path = path
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ":".join(
            part for part in (self.path, str(self.line) if self.line else None) if part
        )
        parts = [where] if where else []
        if self.field:
            parts.append(f"field {self.field}")
        parts.append(self.problem)
        return ": ".join(parts)


class PlanError(VerdictgateError):
    """A run that cannot be afforded or sized; refused before any call."""
