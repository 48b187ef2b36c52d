"""What the harness processes of the frameworks that run in venvs of their own (ADK, CrewAI)
share: the suite of their script's cases, and each trial printed as one JSON line for the
test that started them."""

from __future__ import annotations

import json
from collections.abc import Callable

import verdictgate
from verdictgate import NoDecision
from verdictgate.suite import Case, Contract, Suite


def scripted_suite(cases: dict[str, str], expected_route: Callable[[str], str]) -> Suite:
    """The suite of a script's inputs (`cases`: input text to case id), each expecting its
    first route."""
    return Suite(
        "support",
        "support_router",
        tuple(Case(case, text, expected_route(text)) for text, case in cases.items()),
        Contract(frozenset(expected_route(text) for text in cases)),
    )


def as_json(decision: object) -> object:
    """A decision as a printed line holds it."""
    if isinstance(decision, NoDecision):
        return {"no_decision": decision.reason}
    return list(decision) if isinstance(decision, tuple) else decision


class Printed:
    """A sink that prints each trial as `[case, index, decision, error_type]`."""

    def add(self, trial: verdictgate.Trial) -> None:
        line = [trial.case, trial.index, as_json(trial.decision), trial.error_type]
        print(json.dumps(line), flush=True)
