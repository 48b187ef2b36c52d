"""A dataclass field's command-line flag as data: its names, help, type and metavar, kept in
the field's metadata so one declaration serves both the library's keywords and the CLI's
options. Free of click: the CLI reads it (`cli/flag_options.py`)."""

from __future__ import annotations

from dataclasses import Field, dataclass, field
from typing import Any, TypeVar

_T = TypeVar("_T")
FLAG = "verdictgate.flag"
"""The metadata key of a field's Flag."""

ClickType = Any  # boundary: what `click.option(type=...)` takes (int, float, a click type)


@dataclass(frozen=True)
class Flag:
    """How a field is given on the command line: its flag names (default: `--field-name`),
    help, value type and metavar, the choices it takes, and whether --help shows its default.
    A bool field is an on/off flag, a tuple field a repeatable one; the default is the field's.
    `required` is left to the command that needs it (`verdictgate run` needs `--agent`)."""

    help: str
    names: tuple[str, ...] = ()
    type: ClickType = None
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    show_default: bool = False
    required: bool = False


def flag(
    default: _T,
    help: str,
    *names: str,
    type: ClickType = None,
    metavar: str | None = None,
    choices: tuple[str, ...] = (),
    show_default: bool = False,
) -> _T:
    """A dataclass field with `default`, given on the command line as its Flag says."""
    declared = Flag(help, names, type, metavar, choices, show_default)
    made: _T = field(default=default, metadata={FLAG: declared})
    return made


def flag_of(declared: Field[object]) -> Flag | None:
    """The Flag a dataclass field carries, if it has one."""
    found = declared.metadata.get(FLAG)
    return found if isinstance(found, Flag) else None
