"""How a live run is made: its size, pace and limits, its assertion tiers, and how it may stop
early. Data only, built once (by `verdictgate.run`'s keywords or the CLI's flags)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from ..decision_rules import DecisionRule
from ..flags import flag
from ..tiers.cascade import Judge
from ..tiers.invariants import Invariant
from ..tiers.relations import Relation
from ..tiers.semantic import SemanticCheck
from ..trial_model import Trial


@dataclass(frozen=True)
class RunOptions:
    """A run's settings (every field optional).

    Size and pace: `repeats` per case (default: sized from the tolerance), a `budget` of calls
    (a plan above it is refused before any call), `concurrency` calls in flight, a `timeout`
    per call (an overrun is an error trial), the `run_id` (default: a random one), a
    `progress` bar (None: on a terminal). Tiers, cheapest first: `invariants`, `semantic`
    (True: the suite's calibrated check), `judge(output, input) -> bool`; `quality_gate` calls
    each case once first and stops before repeats when one misses; `relations` are checked
    once per case. `decision` derives each decision from the agent framework's spans.
    Stopping early: `sequential` (round by round, at most `max_pairs` pairs a test), `curtail`
    (a fixed plan round by round), and `resume` (the trials of an undecided sequential run to
    continue).

    A field with a Flag is also a flag of the commands that run an agent (`verdictgate run`);
    `invariants`, `judge` and `resume` are given there by what names them (`--invariant`,
    `--judge`, `--resume`), and `progress` is left to the terminal.
    """

    repeats: int | None = flag(
        None, "Trials per case (default: sized from the tolerance).", type=int
    )
    budget: int | None = flag(
        None, "Hard cap on calls; a plan above it is refused before any call.", type=int
    )
    concurrency: int = flag(1, "Calls in flight at once.", type=int, show_default=True)
    timeout: float | None = flag(
        None, "Seconds per call; an overrun is an error trial.", type=float
    )
    run_id: str | None = flag(None, "Id of this run (default: a random one).")
    progress: bool | None = None
    quality_gate: bool = flag(
        False, "Call each case once first; stop before repeats if any misses its route."
    )
    invariants: Sequence[Invariant] = ()
    relations: Sequence[Relation | str] = flag(
        (),
        "A metamorphic relation to check (repeatable).",
        "--relation",
        choices=("whitespace", "case", "punctuation"),
    )
    judge: Judge | None = None
    semantic: SemanticCheck | bool = flag(
        False,
        "Compare each answer with its case's reference at the suite's calibrated threshold "
        "(needs verdictgate[semantic]).",
    )
    decision: str | DecisionRule | None = flag(
        None,
        "Derive each decision from the agent framework's spans: tools, toolset, agents, nodes "
        "or attribute:KEY (docs/frameworks.md).",
        metavar="RULE",
    )
    sequential: bool = flag(
        False,
        "Collect round by round and stop as soon as the sequential rule decides the run "
        "(docs/statistics.md).",
    )
    max_pairs: int | None = flag(
        None, "With --sequential: the most rerun pairs a test collects (default 15/t).", type=int
    )
    curtail: bool = flag(
        False,
        "Collect the plan round by round and stop as soon as the pooled or a targeted route's "
        "change rate could no longer be shown below its tolerance (--sequential with --budget "
        "does this too). It saves calls, but a plan stopped at its first flips never rejects: "
        "use --sequential for a verdict.",
    )
    resume: Sequence[Trial] = ()


class RunSettings(TypedDict, total=False):
    """The fields of RunOptions as keywords of `run` (`run(agent, suite, concurrency=4)`), each
    replacing the options' own; the same names and types as RunOptions (a test holds them so)."""

    repeats: int | None
    budget: int | None
    concurrency: int
    timeout: float | None
    run_id: str | None
    progress: bool | None
    quality_gate: bool
    invariants: Sequence[Invariant]
    relations: Sequence[Relation | str]
    judge: Judge | None
    semantic: SemanticCheck | bool
    decision: str | DecisionRule | None
    sequential: bool
    max_pairs: int | None
    curtail: bool
    resume: Sequence[Trial]
