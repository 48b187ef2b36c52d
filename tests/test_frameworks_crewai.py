"""Decisions from CrewAI's spans, offline: crewAI 1.15 records each crew on a tracer provider
of its own, its trace started from an empty context; `from_crewai` and
`crewai_below_current_span` place them below the trial. A crew whose scripted model calls the
script's tools, run by `verdictgate.run` and by a harness whose spans go to `verdictgate serve`.
CrewAI requires openai<3, mcp<2 and pydantic<2.13, so it runs with verdictgate in
`.venv-crewai` (`make crewai`; CI makes it: missing there, these tests fail). The trials must
equal the scripted paths, flips included, in process and through the receiver."""

from __future__ import annotations

import json
import os
from pathlib import Path

from components import free_port, unavailable
from framework_checks import decision_of, harness_output, stored_trials
from receiver_support import start_serve

HERE = Path(__file__).parent
REPEATS = 4
ROUTES = {  # the tool paths crewai_agent_process.SCRIPT gives each case's calls, in order
    "c0": [("refund",)],
    "c1": [("escalate",), ("escalate",), ("escalate",), ("refund",)],
    "c2": [("lookup", "refund"), ("lookup",)],
}
SCRIPTED = {
    (case, index): (routes[index % len(routes)], None)
    for case, routes in ROUTES.items()
    for index in range(REPEATS)
}


def agent_process(*args: str) -> str:
    """Run crewai_agent_process.py with `args` in CrewAI's environment; its output."""
    python = os.environ.get("VERDICTGATE_CREWAI_PYTHON") or str(
        HERE.parent / ".venv-crewai/bin/python"
    )
    if not os.access(python, os.X_OK):
        unavailable(f"CrewAI's environment is missing ({python}): run `make crewai`")
    return harness_output(python, "crewai_agent_process.py", *args, timeout=600)


def test_crewai_in_process_trials_equal_the_scripted_paths() -> None:
    trials = [
        json.loads(line) for line in agent_process("in-process", "local", str(REPEATS)).splitlines()
    ]
    found = {(case, index): (decision_of(d), error) for case, index, d, error in trials}
    assert len(trials) == len(found) == len(SCRIPTED)
    assert found == SCRIPTED


def test_crewai_through_serve_trials_equal_the_scripted_paths(tmp_path: Path) -> None:
    store, port = tmp_path / "store.sqlite", free_port()
    receiver = start_serve(str(store), port, "--settle", "1s")
    try:
        agent_process("serve", "remote", str(REPEATS), f"http://127.0.0.1:{port}")
        received = stored_trials(store, "remote", len(SCRIPTED))
    finally:
        receiver.terminate()
        receiver.wait(10)
    assert received == SCRIPTED
