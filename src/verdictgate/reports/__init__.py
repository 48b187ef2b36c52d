"""Renderers: every output format drawn from one Assessment.

Internal: the public API is what `verdictgate` exports. Its modules may be imported (the tests
do), but they can change between releases.
"""

from __future__ import annotations

from collections.abc import Callable

from ..assessment import Assessment
from ..errors import InputError
from .html import render_html
from .json_report import render_json
from .junit import render_junit
from .markdown import render_markdown


def render_text(assessment: Assessment, *, color: bool = False, width: int = 110) -> str:
    """The terminal report (rich loads on first use: the other formats never pay for it)."""
    from .text import render_text as render

    return render(assessment, color=color, width=width)


RENDERERS: dict[str, Callable[[Assessment], str]] = {
    "text": render_text,
    "json": render_json,
    "junit": render_junit,
    "markdown": render_markdown,
    "html": render_html,
}
"""Format name -> renderer; the CLI's `--format` choices."""


def render(assessment: Assessment, format: str = "text") -> str:
    """The report of an assessment in `format`: text, json (`verdictgate.report/v1`), junit,
    markdown or html; every format is drawn from the same assessment."""
    renderer = RENDERERS.get(format)
    if renderer is None:
        raise InputError(
            f"unknown format {format!r}: one of {', '.join(RENDERERS)}", arguments=("format",)
        )
    return renderer(assessment)


__all__ = [
    "RENDERERS",
    "render",
    "render_html",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_text",
]
