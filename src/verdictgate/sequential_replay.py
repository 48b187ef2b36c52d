"""Where a sequential run would have stopped: stored trials replayed round by round.

A round holds one rerun pair of every case (trials 2k and 2k + 1). After each complete round
the trials so far are judged under the sequential rule, whose answers stay valid however often
they are looked at; the replay stops at the first round that decides the run, and says how many
calls the rest of the trials cost that a sequential run would not have made.

Only the stability tests are sequential: a round decides the run when it qualifies, or when a
change rate is shown above its tolerance. A rejection for another reason part-way (a required
route not yet observed after a round or two) is no stopping point: more rounds may change it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from .admission import RULES
from .assessment import Assessment, Status, Stopping
from .trial_model import Trial

STABILITY_REJECTIONS = frozenset(
    rule.code.value
    for rule in RULES
    if rule.effect is Status.REJECTED and rule.check.startswith("stability.")
)
"""Reason codes of a change rate shown above its tolerance: the sequential tests' rejections."""


def decides(assessment: Assessment) -> bool:
    """Whether a sequential run may stop at this judgement: it qualifies, or a sequential test
    rejects it."""
    if assessment.status is Status.QUALIFIED:
        return True
    return assessment.status is Status.REJECTED and any(
        reason.code in STABILITY_REJECTIONS for reason in assessment.reasons
    )


def replay(
    trials: Sequence[Trial], judge: Callable[[list[Trial]], Assessment]
) -> tuple[Assessment, int]:
    """Judge the trials round by round with `judge` (which must judge by the sequential rule);
    the first decided assessment, or the last one when no round decides, with where it stopped
    (`stopping`: the calls the trials held), and the rounds judged."""
    if not trials:
        raise ValueError("no trials to replay")
    rounds = max(trial.index for trial in trials) // 2 + 1
    for round_number in range(1, rounds + 1):
        assessment = judge([trial for trial in trials if trial.index < 2 * round_number])
        if decides(assessment) or round_number == rounds:
            return replace(assessment, stopping=Stopping(len(trials), False)), round_number
    raise AssertionError("unreachable: the last round returns")
