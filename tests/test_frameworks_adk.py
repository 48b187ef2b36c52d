"""Decisions from Google ADK's own spans, offline: a triage agent on a scripted model that
transfers to a specialist, run by `verdictgate.run` under `tools` and `agents`, and by a
harness whose spans go to `verdictgate serve`. ADK 2.13 requires OpenTelemetry 1.44 or earlier
and the dev environment's frameworks 1.45, so the agent runs with verdictgate in `.venv-adk`
(`make adk`; CI makes it: missing there, these tests fail). The trials must equal the scripted
paths, flips included, in process and through the receiver."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from components import free_port, unavailable
from framework_checks import decision_of, harness_output, stored_trials
from receiver_support import start_serve
from verdictgate import NoDecision

HERE = Path(__file__).parent
REPEATS = 6
ROUTES = {  # the routes adk_agent_process.SCRIPT gives each case's calls, in order
    "c0": ["billing"],
    "c1": ["support", "support", "billing", "support"],
    "c2": ["none"],
}
SPECIALIST_TOOL = {"billing": "refund", "support": "lookup"}


def adk_python() -> str:
    """The Python of the environment `make adk` makes (or VERDICTGATE_ADK_PYTHON)."""
    python = os.environ.get("VERDICTGATE_ADK_PYTHON") or str(HERE.parent / ".venv-adk/bin/python")
    if not os.access(python, os.X_OK):
        unavailable(f"Google ADK's environment is missing ({python}): run `make adk`")
    return python


def scripted(rule: str) -> dict[tuple[str, int], tuple]:
    """Each trial's decision as the script makes it under `rule`."""
    found = {}
    for case, routes in ROUTES.items():
        for index in range(REPEATS):
            route = routes[index % len(routes)]
            if route == "none":
                decision = NoDecision("no_tool_selected" if rule == "tools" else "no_handoff")
            elif rule == "tools":
                decision = ("transfer_to_agent", SPECIALIST_TOOL[route])
            else:
                decision = (route,)
            found[(case, index)] = (decision, None)
    return found


def agent_process(*args: str) -> str:
    return harness_output(adk_python(), "adk_agent_process.py", *args, timeout=300)


@pytest.mark.parametrize("rule", ["tools", "agents"])
def test_adk_in_process_trials_equal_the_scripted_paths(rule: str) -> None:
    printed = agent_process("in-process", rule, "local", str(REPEATS))
    trials = [json.loads(line) for line in printed.splitlines()]
    found = {(case, index): (decision_of(d), error) for case, index, d, error in trials}
    assert len(trials) == len(found) == len(ROUTES) * REPEATS
    assert found == scripted(rule)


@pytest.mark.parametrize("rule", ["tools", "agents"])
def test_adk_through_serve_trials_equal_the_scripted_paths(rule: str, tmp_path: Path) -> None:
    adk_python()
    store, port = tmp_path / "store.sqlite", free_port()
    receiver = start_serve(str(store), port, "--settle", "1s")
    try:
        agent_process("serve", rule, "remote", str(REPEATS), f"http://127.0.0.1:{port}")
        received = stored_trials(store, "remote", len(ROUTES) * REPEATS)
    finally:
        receiver.terminate()
        receiver.wait(10)
    assert received == scripted(rule)
