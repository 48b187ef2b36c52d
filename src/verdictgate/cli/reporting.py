"""How a command answers: one-line errors, and its report in the format and place its
`--format` and `--output` say."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, ParamSpec, TypeVar

import click

from ..assessment import Assessment
from ..errors import USAGE_EXIT, InputError, VerdictgateError, cli_option
from ..flags import flag
from ..reports import RENDERERS, render_html, render_text
from ..reports.json_report import report_document
from ..wire_types import JsonObject

if TYPE_CHECKING:
    from ..baseline import Regression

FORMATS = click.Choice(sorted(RENDERERS))
_P = ParamSpec("_P")
_R = TypeVar("_R")


def fail(message: str) -> NoReturn:
    click.echo(f"verdictgate: error: {message}", err=True)
    sys.exit(USAGE_EXIT)


def handles_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Turn every error a user can cause into one line on stderr and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except VerdictgateError as error:
            fail(error.render(cli_option))

    return wrapper


@dataclass(frozen=True)
class Output:
    """`--format` and `--output`: how and where a command's report is written."""

    fmt: str = flag(
        "text",
        "Report format; all are rendered from the same assessment.",
        "--format",
        type=FORMATS,
        show_default=True,
    )
    output: str | None = flag(None, "Write the report here.", type=click.Path(dir_okay=False))

    def emit(
        self,
        assessment: Assessment,
        extra: JsonObject | None = None,
        regression: Regression | None = None,
    ) -> None:
        """Write the assessment's report here (see `emit`)."""
        emit(assessment, self.fmt, self.output, extra, regression)


def emit(
    assessment: Assessment,
    fmt: str,
    output: str | None,
    extra: JsonObject | None = None,
    regression: Regression | None = None,
) -> None:
    """Write the report in `fmt` to the output file or stdout; `extra` fields join the JSON
    report, and what changed against a baseline (`regression`) the HTML one."""
    if fmt == "json" and extra:
        text = json.dumps({**report_document(assessment), **extra}, indent=2) + "\n"
    elif fmt == "html":
        text = render_html(assessment, regression)
    elif fmt == "text" and output is None:
        text = render_text(assessment, color=sys.stdout.isatty())
    else:
        text = RENDERERS[fmt](assessment)
    deliver(text, output)


def deliver(report: str, output: str | None) -> None:
    """Write a rendered report to `output`, saying where on stderr, or to stdout without one."""
    if output is None:
        click.echo(report, nl=False)
        return
    try:
        Path(output).write_text(report, encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write report ({error.strerror})", path=output) from None
    click.echo(f"verdictgate: report written to {output}", err=True)
