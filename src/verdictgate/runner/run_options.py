"""How a live run is made: its size, pace and limits, its assertion tiers, and how it may stop
early. Data only, built once (by `verdictgate.run`'s keywords or the CLI's flags)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from ..decision_rules import DecisionRule
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
    """

    repeats: int | None = None
    budget: int | None = None
    concurrency: int = 1
    timeout: float | None = None
    run_id: str | None = None
    progress: bool | None = None
    quality_gate: bool = False
    invariants: Sequence[Invariant] = ()
    relations: Sequence[Relation | str] = ()
    judge: Judge | None = None
    semantic: SemanticCheck | bool = False
    decision: str | DecisionRule | None = None
    sequential: bool = False
    max_pairs: int | None = None
    curtail: bool = False
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
