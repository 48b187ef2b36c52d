"""Each option is declared once, as a dataclass field with a Flag: a command's click options are
the flagged fields of the dataclasses it takes (both ways) and the few it declares itself, and
the command receives those dataclasses whole."""

from __future__ import annotations

from dataclasses import dataclass, fields

import click
import pytest
from click.testing import CliRunner

from verdictgate.cli.agent_run import AGENT_REQUIRED, AgentRun
from verdictgate.cli.flag_options import flagged, takes
from verdictgate.cli.main import main
from verdictgate.cli.policy_flags import PolicyFlags
from verdictgate.cli.receiver import ServeFlags
from verdictgate.cli.reporting import Output
from verdictgate.cli.sources import Sources
from verdictgate.flags import flag
from verdictgate.importers import SOURCES
from verdictgate.runner.run_options import RunOptions

COMMANDS = {
    "run": ((AgentRun, PolicyFlags, Output), {"suite_path"}),
    "snapshot": (
        (AgentRun, PolicyFlags),
        {"trials_path", "suite_path", "accept_reference", "output", "fmt"},
    ),
    "check": ((AgentRun, Output), {"snapshot_path", "trials_path", "suite_path"}),
    "assess": (
        (Sources, PolicyFlags, Output),
        {"trials_path", "suite_path", "isolation", "sequential"},
    ),
    "convert": ((Sources,), {"trials_path", "target", "suite_path", "output"}),
    "serve": ((ServeFlags,), set()),
}
"""Each command: the dataclasses it takes, and the parameters of the options it declares itself."""
CHANGED = {("run", "agent_spec"): AGENT_REQUIRED}
"""A Flag a command replaces: `run` needs `--agent`."""


def options(command: str) -> dict[str, click.Option]:
    return {
        param.name: param
        for param in main.commands[command].params
        if isinstance(param, click.Option) and param.name is not None
    }


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_commands_options_are_its_dataclasses_fields_and_its_own(command: str) -> None:
    taken, own = COMMANDS[command]
    declared = {field.name for cls in taken for field, _ in flagged(cls)}
    assert own.isdisjoint(declared)
    assert set(options(command)) == declared | own


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_flagged_field_is_the_option_its_flag_says(command: str) -> None:
    given = options(command)
    required = [
        arg for option in given.values() if option.required for arg in (option.opts[0], "x")
    ]
    parsed = main.commands[command].make_context(command, required).params
    for cls in COMMANDS[command][0]:
        for field, found in flagged(cls):
            found = CHANGED.get((command, field.name), found)
            option = given[field.name]
            names = found.names or (f"--{field.name.replace('_', '-')}",)
            assert [*option.opts, *option.secondary_opts] == list(names), field.name
            assert (option.help, option.metavar) == (found.help, found.metavar), field.name
            assert option.required is found.required, field.name
            assert option.is_flag is isinstance(field.default, bool), field.name
            assert option.multiple is isinstance(field.default, tuple), field.name
            if not option.required:
                assert parsed[field.name] == field.default, field.name


def test_every_run_option_is_a_flag_of_run_or_given_by_what_names_it() -> None:
    """RunOptions' fields are `run`'s flags, but for the objects a flag names by FILE:NAME (or a
    trials file) and the progress bar, which the terminal decides."""
    named_by = {"invariants": "invariant_specs", "judge": "judge_spec", "resume": "resume_path"}
    given = options("run")
    for field in fields(RunOptions):
        if field.name != "progress":
            assert named_by.get(field.name, field.name) in given, field.name
    flagged_here = {field.name for field, _ in flagged(RunOptions)}
    assert flagged_here.isdisjoint(named_by) and "progress" not in flagged_here


def test_the_evidence_sources_are_the_importers() -> None:
    assert [field.name for field in fields(Sources)] == [*SOURCES, "reading"]


@dataclass(frozen=True)
class _Example:
    count: int = flag(1, "How many.", type=int)
    names: tuple[str, ...] = flag((), "A name (repeatable).", "--name")
    loud: bool = flag(False, "Say it loud.")


def test_a_command_receives_its_flags_as_one_dataclass() -> None:
    received: list[_Example] = []

    @click.command()
    @takes(_Example, "example")
    def command(example: _Example) -> None:
        received.append(example)

    runner = CliRunner()
    assert (
        runner.invoke(command, ["--count", "3", "--name", "a", "--name", "b", "--loud"]).exit_code
        == 0
    )
    assert runner.invoke(command, []).exit_code == 0
    assert received == [_Example(3, ("a", "b"), True), _Example()]
