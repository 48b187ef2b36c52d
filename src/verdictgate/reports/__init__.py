"""Renderers: every output format drawn from one Assessment."""

from __future__ import annotations

from collections.abc import Callable

from ..assessment import Assessment
from .json_report import render_json
from .junit import render_junit
from .markdown import render_markdown
from .text import render_text

RENDERERS: dict[str, Callable[[Assessment], str]] = {
    "text": render_text,
    "json": render_json,
    "junit": render_junit,
    "markdown": render_markdown,
}
"""Format name -> renderer; the CLI's `--format` choices."""

__all__ = ["RENDERERS", "render_json", "render_junit", "render_markdown", "render_text"]
