"""A client nobody here wrote: the OpenTelemetry JS SDK's three OTLP trace exporters
(OTLP/HTTP JSON, OTLP/HTTP protobuf, OTLP/gRPC), with and without gzip, send decision spans
and framework-shaped spans (a harness's trial span with `invoke_agent` and `execute_tool` spans
below) to `serve`, which stores the same trials from each."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from js_support import js_client
from receiver_support import running_server
from verdictgate import Trial
from verdictgate.clock import ManualClock
from verdictgate.otel import conventions as names
from verdictgate.otel.spans import trial_attributes
from verdictgate.receiver.config import DEFAULT_SETTLE

TRANSPORTS = ["http-json", "http-proto", "grpc"]
ROUTES = ["approve", "deny", "review"]
TOOLS = [["lookup"], ["lookup", "refund"]]


def decisions(run: str) -> tuple[list, dict]:
    """Decision spans of 3 cases x 4 trials (one a no-decision error), each its own trace, and
    the trials they must become."""
    plan, expected = [], {}
    for case in range(3):
        for index in range(4):
            trial = Trial(f"c{case}", index, ROUTES[case], run, ROUTES[case])
            if case == 2 and index == 3:
                trial = Trial(f"c{case}", index, None, run, ROUTES[case], error_type="Timeout")
            name = names.decision_span_name("js_router")
            plan.append([{"name": name, "attributes": trial_attributes(trial), "parent": None}])
            expected[(trial.case, trial.index)] = (trial.decision, trial.error_type)
    return plan, expected


def framework_trials(run: str) -> tuple[list, dict]:
    """Framework trials: 2 cases x 2 trials, each a trace of a trial span, its agent span and
    the tools the agent called; the trials they must become."""
    plan, expected = [], {}
    for case in range(2):
        for index in range(2):
            spans = [
                {
                    "name": names.TRIAL_SPAN,
                    "parent": None,
                    "attributes": {
                        names.RUN_ID: run,
                        names.CASE_ID: f"f{case}",
                        names.TRIAL: index,
                        names.DECISION_RULE: "tools",
                        names.SUITE: "js",
                    },
                },
                {
                    "name": "invoke_agent support",
                    "parent": 0,
                    "attributes": {
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": "support",
                    },
                },
            ]
            spans += [
                {
                    "name": f"execute_tool {tool}",
                    "parent": 1,
                    "attributes": {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": tool,
                    },
                }
                for tool in TOOLS[case]
            ]
            plan.append(spans)
            expected[(f"f{case}", index)] = (tuple(TOOLS[case]), None)
    return plan, expected


def stored(server, run: str) -> dict:
    return {
        (t.case, t.index): (t.decision, t.error_type)
        for t in server.receiver.store.evidence(run).trials()
    }


def wait_until(condition, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.05)


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_javascript_sdk_reaches_serve_and_gives_the_right_trials(
    tmp_path, transport, compression
):
    node, script = js_client()
    clock = ManualClock(1_000.0)
    run = f"js-{transport}-{compression}"
    plan, expected = decisions(run)
    framework_plan, framework_expected = framework_trials(f"{run}-fw")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan + framework_plan))
    with running_server(clock=clock) as server:
        endpoint = (
            f"http://127.0.0.1:{server.grpc_port}"
            if transport == "grpc"
            else f"http://127.0.0.1:{server.http_port}/v1/traces"
        )
        sent = subprocess.run(
            [node, str(script), transport, compression, endpoint, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert stored(server, run) == expected
        clock.advance(DEFAULT_SETTLE + 0.1)  # the framework trials' spans have been quiet
        wait_until(lambda: len(stored(server, f"{run}-fw")) == len(framework_expected))
        assert stored(server, f"{run}-fw") == framework_expected
