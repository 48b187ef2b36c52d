"""A Strands agent in another process, its framework spans and its harness's trial spans sent
through a real collector (rotel) to `verdictgate serve`: the trials the receiver derives equal
the ones derived in process. And a SIGKILL of the receiver mid-stream loses no acknowledged
trial."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import verdictgate
from collector_support import RetryingRelay, rotel_agent, start_collector
from components import free_port
from framework_agent_process import CASES, EXPECTED, SCRIPT
from framework_checks import stored_trials
from framework_support import strands_factory
from receiver_support import start_serve
from verdictgate import from_strands
from verdictgate.receiver.store import Store
from verdictgate.suite import Case, Contract, Suite

HERE = Path(__file__).parent
REPEATS = 6


def start_receiver(store: Path, port: int) -> subprocess.Popen:
    return start_serve(str(store), port, "--settle", "1s")


def agent_process(endpoint_port: int, run: str, pause: float = 0.0) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "framework_agent_process.py"),
            f"http://127.0.0.1:{endpoint_port}",
            run,
            str(REPEATS),
            str(pause),
        ],
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def in_process_trials() -> dict[tuple[str, int], tuple]:
    """The same agent and script, run by `verdictgate.run` in this process."""
    suite = Suite(
        "support",
        "support_router",
        tuple(Case(case, text, EXPECTED[text]) for text, case in CASES.items()),
        Contract(frozenset(EXPECTED.values())),
    )
    found: dict[tuple[str, int], tuple] = {}

    class Sink:
        def add(self, trial) -> None:
            found[(trial.case, trial.index)] = (trial.decision, trial.error_type)

    verdictgate.run(from_strands(strands_factory(SCRIPT)), suite, repeats=REPEATS, sink=Sink())
    return found


def test_a_strands_agent_in_another_process_through_rotel(tmp_path: Path) -> None:
    binary = rotel_agent()
    store, port = tmp_path / "store.sqlite", free_port()
    receiver = start_receiver(store, port)
    collector, collector_port = start_collector(binary, port, tmp_path / "rotel.log")
    try:
        agent = agent_process(collector_port, "remote-1")
        assert agent.wait(120) == 0, agent.stderr.read().decode()[-2000:]
        found = stored_trials(store, "remote-1", len(CASES) * REPEATS)
    finally:
        collector.terminate()
        collector.wait(10)
        receiver.terminate()
        receiver.wait(10)
    assert found == in_process_trials()
    reader = Store(store)
    assessment_counts = reader.evidence("remote-1")
    assert (assessment_counts.conflicts, assessment_counts.duplicates) == (0, 0)


def test_sigkill_of_the_receiver_loses_no_acknowledged_trial(tmp_path: Path) -> None:
    store, port = tmp_path / "store.sqlite", free_port()
    receiver = start_receiver(store, port)
    relay = RetryingRelay(port).__enter__()
    try:
        agent = agent_process(relay.port, "remote-2", pause=0.5)
        deadline = time.monotonic() + 60
        while relay.forwarded < 3 and time.monotonic() < deadline:  # the stream has begun
            time.sleep(0.05)
        assert agent.poll() is None  # ... and goes on
        receiver.send_signal(signal.SIGKILL)  # mid-stream: nothing flushed
        receiver.wait()
        time.sleep(0.5)  # the relay meets a closed port and keeps retrying
        receiver = start_receiver(store, port)
        assert agent.wait(120) == 0, agent.stderr.read().decode()[-2000:]
        found = stored_trials(store, "remote-2", len(CASES) * REPEATS)
    finally:
        relay.__exit__()
        receiver.terminate()
        receiver.wait(10)
    assert relay.retries > 0  # the kill really interrupted delivery
    assert found == in_process_trials()
