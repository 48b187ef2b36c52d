"""Every error verdictgate raises on purpose; each renders as one clear line naming file, line
and field.

    VerdictgateError            anything verdictgate refuses (`except VerdictgateError`)
    ├── InputError              malformed or unreadable input: `file:line: field: problem`
    │   ├── InvalidDecision     a value that is not a decision (also a ValueError)
    │   │   └── LabelOutOfBounds    a label no source may carry: past the caps, a NUL, a lone
    │   │                           surrogate (a fault of the file, not of the agent)
    │   └── TrialIndexError     a trial index outside 0..MAX_TRIAL_INDEX (also a ValueError)
    ├── PlanError               a run that cannot be afforded or sized, refused before any call
    ├── SnapshotRefused         evidence that does not support a baseline
    ├── SemanticUnavailable     the semantic tier asked for without its model installed
    └── MissingVerdict          a framework's structured output without the verdict's field
                                (raised in an agent's call: the trial is an error of this type)

An error about an argument names it by its Python name (`budget`); the CLI renders the same
error with its option (`--budget`), so the library never speaks in command-line flags."""

from __future__ import annotations

from collections.abc import Callable

USAGE_EXIT = 2
"""Exit code for bad flags and unreadable or malformed input."""

Namer = Callable[[str], str]
"""How an argument is named: as a Python parameter, or as a CLI option."""


def python_name(argument: str) -> str:
    return argument


def cli_option(argument: str) -> str:
    """`max_p95_ms` -> `--max-p95-ms`."""
    return "--" + argument.replace("_", "-")


class VerdictgateError(Exception):
    """Base of every error verdictgate raises on purpose. `problem` may name the `arguments`
    it is about as `{argument}` placeholders; without one, the first argument leads it."""

    def __init__(self, problem: str, *, arguments: tuple[str, ...] = ()) -> None:
        self.problem = problem
        self.arguments = arguments
        super().__init__(problem)

    def _placed(self) -> bool:
        """Whether the problem names its arguments in place (`{argument}`)."""
        return any("{" + argument + "}" in self.problem for argument in self.arguments)

    def _problem(self, name: Namer) -> str:
        """The problem with each `{argument}` named by `name` (other braces left alone)."""
        text = self.problem
        for argument in self.arguments:
            text = text.replace("{" + argument + "}", name(argument))
        return text

    def render(self, name: Namer = python_name) -> str:
        """The one line that describes the error, arguments named by `name`."""
        if self.arguments and not self._placed():
            return f"{name(self.arguments[0])}: {self._problem(name)}"
        return self._problem(name)

    def __str__(self) -> str:
        return self.render(python_name)


class InputError(VerdictgateError):
    """Malformed or unreadable input: `file:line: field: problem`."""

    def __init__(
        self,
        problem: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
        arguments: tuple[str, ...] = (),
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        super().__init__(problem, arguments=arguments)

    def render(self, name: Namer = python_name) -> str:
        where = ":".join(
            part for part in (self.path, str(self.line) if self.line else None) if part
        )
        parts = [where] if where else []
        if self.field:
            parts.append(f"field {self.field}")
        elif self.arguments and not self._placed():
            parts.append(f"field {name(self.arguments[0])}")
        parts.append(self._problem(name))
        return ": ".join(parts)


class PlanError(VerdictgateError):
    """A run that cannot be afforded or sized; refused before any call."""


class InvalidDecision(InputError, ValueError):
    """A value that is not a decision (an empty label, a path with a non-string step, ...)."""


class LabelOutOfBounds(InvalidDecision):
    """A label, tool path or reason no source may carry: longer than MAX_LABEL characters or
    MAX_PATH_STEPS steps, or holding a NUL or a lone surrogate (no store keeps either). An
    importer refuses the file for it, naming where, rather than count an agent's error."""


class TrialIndexError(InputError, ValueError):
    """A trial index outside 0..MAX_TRIAL_INDEX."""


class SnapshotRefused(VerdictgateError):
    """The evidence does not support a baseline (not qualified, or not approved)."""


class SemanticUnavailable(VerdictgateError):
    """The semantic tier was asked for, but its model is not installed."""


class StoreError(VerdictgateError):
    """The receiver's store could not be opened as configured (an unreadable location, a server
    that does not answer, a database that cannot keep every label, a driver or SQLite too old):
    a fault of the deployment, never a verdict about an agent."""


class ExtraMissing(VerdictgateError):
    """A part of verdictgate asked for needs an optional dependency that is not installed."""


class MissingVerdict(VerdictgateError):
    """A framework's structured output has no such field: the trial is an error of this type."""
