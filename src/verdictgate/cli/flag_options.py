"""Click options made from dataclass fields: each field with a Flag (`verdictgate.flags`) is
one option, and the command receives the dataclass whole in their place. Also `--suite` and
`--trials`, declared here once for every command that takes them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import Field, field, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..flags import Flag, flag_of
from ..suite import Suite
from ..suite_file import load_suite

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

OptionValue = Any  # boundary: click, a value it parsed from the command line (as its option's
# type made it) or one it passes on to a command or to its own calls
_R = TypeVar("_R")
_F = TypeVar("_F", bound=Callable[..., object])
GROUP = "verdictgate.flag_group"
"""The metadata key of a field whose dataclass's flags join its holder's (`group`)."""
_PATH = click.Path(dir_okay=False)


def group(cls: Callable[[], _R]) -> _R:
    """A field holding a `cls` whose flags are its holder's too (RunOptions in AgentRun)."""
    made: _R = field(default_factory=cls, metadata={GROUP: cls})
    return made


def flagged(cls: type[DataclassInstance]) -> Iterator[tuple[Field[object], Flag]]:
    """Each field of `cls` (and of the dataclasses it groups) with its Flag, in order."""
    for declared in fields(cls):
        if (found := flag_of(declared)) is not None:
            yield declared, found
        elif (inner := declared.metadata.get(GROUP)) is not None:
            yield from flagged(inner)


def click_option(declared: Field[object], found: Flag) -> Callable[[_F], _F]:
    """The click option of a field: `--field-name` unless its Flag names it, the field's
    name as the parameter's (a bool field is an on/off flag, a tuple field a repeatable one);
    only the settings that differ from click's own are passed."""
    default = declared.default
    settings: dict[str, OptionValue] = {"help": found.help}
    if isinstance(default, bool):
        settings["is_flag"] = True
    elif isinstance(default, tuple):
        settings["multiple"] = True
    if default is not None and default is not False and default != ():
        settings["default"] = default
    if found.choices:
        settings["type"] = click.Choice(found.choices)
    elif found.type is not None:
        settings["type"] = found.type
    if found.metavar is not None:
        settings["metavar"] = found.metavar
    if found.show_default:
        settings["show_default"] = True
    if found.required:
        settings["required"] = True
    names = found.names or (f"--{declared.name.replace('_', '-')}",)
    return click.option(*names, declared.name, **settings)


def takes(
    cls: type[DataclassInstance], parameter: str, **changed: Flag
) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """A command's options from the Flags of `cls`, in field order (a field's Flag replaced by
    `changed`'s of its name); the command receives one `cls` as `parameter` in their place."""
    options = [
        click_option(declared, changed.get(declared.name, found))
        for declared, found in flagged(cls)
    ]

    def decorate(command: Callable[..., _R]) -> Callable[..., _R]:
        @functools.wraps(command)
        def wrapper(*args: OptionValue, **kwargs: OptionValue) -> _R:
            kwargs[parameter] = built(cls, kwargs)
            return command(*args, **kwargs)

        decorated: Callable[..., _R] = wrapper
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return decorate


def built(cls: type[DataclassInstance], values: dict[str, OptionValue]) -> OptionValue:
    """A `cls` of the option values its fields name, taken out of `values`."""
    given: dict[str, OptionValue] = {}
    for declared in fields(cls):
        if flag_of(declared) is not None and declared.name in values:
            given[declared.name] = values.pop(declared.name)
        elif (inner := declared.metadata.get(GROUP)) is not None:
            given[declared.name] = built(inner, values)
    return cls(**given)


def with_flag(cls: type[DataclassInstance], name: str, **settings: OptionValue) -> Flag:
    """The Flag of `cls`'s field `name`, some of its settings replaced."""
    found = next(found for declared, found in flagged(cls) if declared.name == name)
    return replace(found, **settings)


def suite_option(help: str, *, required: bool = False) -> Callable[[_F], _F]:
    """`--suite FILE` (the `suite_path` parameter), with what the command does with it."""
    return click.option("--suite", "suite_path", required=required, type=_PATH, help=help)


def trials_option(help: str) -> Callable[[_F], _F]:
    """`--trials FILE` (the `trials_path` parameter), with what the command does with it."""
    return click.option("--trials", "trials_path", type=_PATH, help=help)


def suite_from(path: str | None) -> Suite | None:
    """The suite `--suite` names, if given."""
    return None if path is None else load_suite(path)
