"""The live runner: call an agent on every case, repeatedly, and assess what came back."""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from .agent import Agent, InvalidReturn, decision_from_return, from_callable
from .assessment import Assessment, RunInfo
from .engine import assess
from .errors import PlanError
from .evidence import Evidence
from .fingerprint import fingerprint_mode
from .plan import RunPlan, plan_run
from .policy import Policy
from .suite import Case, Suite
from .trial import Trial


class TrialSink(Protocol):
    """Where the runner records each trial (evidence in memory, or a telemetry pipeline)."""

    def add(self, trial: Trial) -> None: ...


@dataclass(frozen=True)
class Call:
    """One planned call: a case and its trial index."""

    case: Case
    index: int


class _Timeout(Exception):
    pass


def planned_calls(suite: Suite, plan: RunPlan) -> list[Call]:
    """Calls in trial-index order across cases, so an interrupted run still holds whole rounds."""
    calls = [Call(case, index) for case in suite.cases for index in range(plan.repeats[case.id])]
    return sorted(calls, key=lambda call: call.index)


def run(
    agent: Agent | Callable[[str], Any],
    suite: Suite,
    policy: Policy | None = None,
    *,
    repeats: int | None = None,
    budget: int | None = None,
    concurrency: int = 1,
    timeout: float | None = None,
    run_id: str | None = None,
    sink: TrialSink | None = None,
    progress: bool | None = None,
) -> Assessment:
    """Call `agent` on every suite case as often as the policy needs, then assess the trials.

    The plan is sized and checked against `budget` before any call. An exception or a timeout
    becomes an error trial. `sink` also receives every trial (the evidence is always kept).
    """
    agent = from_callable(agent)
    policy = policy or Policy.with_tolerance(suite.tolerance)
    without_input = [case.id for case in suite.cases if case.input is None]
    if without_input:
        raise PlanError(f"cases without an input cannot be run: {', '.join(without_input[:3])}")
    if concurrency < 1:
        raise PlanError(f"--concurrency must be at least 1, got {concurrency}")
    plan = plan_run(suite, policy, repeats=repeats, budget=budget)
    run_id = run_id or uuid.uuid4().hex
    evidence = Evidence()
    calls = planned_calls(suite, plan)

    def record(trial: Trial) -> None:
        evidence.add(trial)
        if sink is not None:
            sink.add(trial)

    with _progress_bar(len(calls), progress) as advance:
        if agent.is_async:
            asyncio.run(_run_async(agent, calls, run_id, concurrency, timeout, record, advance))
        else:
            _run_threads(agent, calls, run_id, concurrency, timeout, record, advance)
    info = RunInfo(
        id=run_id,
        suite=suite.name,
        point=suite.point,
        isolation=agent.isolation,
        fingerprints=fingerprint_mode(case.id for case in suite.cases),
    )
    return assess(evidence, suite, policy, run=info, planned_trials=plan.calls)


def _trial(
    call: Call, run_id: str, answer: Any = None, error: BaseException | None = None
) -> Trial:
    """The trial for one finished call: its decision, or an error named by its type."""
    if error is None:
        try:
            decision = decision_from_return(answer)
        except InvalidReturn:
            return Trial(
                call.case.id, call.index, None, run_id, call.case.expected, "invalid_return"
            )
        return Trial(call.case.id, call.index, decision, run_id, call.case.expected)
    error_type = (
        "timeout" if isinstance(error, (_Timeout, asyncio.TimeoutError)) else type(error).__name__
    )
    return Trial(call.case.id, call.index, None, run_id, call.case.expected, error_type)


def _call_with_timeout(function: Callable[[str], Any], text: str, timeout: float | None) -> Any:
    """Call in this thread, or, with a timeout, in a daemon thread abandoned when it overruns."""
    if timeout is None:
        return function(text)
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["answer"] = function(text)
        except BaseException as error:  # recorded as the trial's error, never lost
            outcome["error"] = error

    worker = threading.Thread(target=target, daemon=True, name="verdictgate-call")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise _Timeout()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["answer"]


def _run_threads(agent: Agent, calls, run_id, concurrency, timeout, record, advance) -> None:
    def one(call: Call) -> Trial:
        try:
            answer = _call_with_timeout(agent.instance(), call.case.input, timeout)
        except Exception as error:
            return _trial(call, run_id, error=error)
        return _trial(call, run_id, answer)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="verdictgate") as pool:
        for future in as_completed([pool.submit(one, call) for call in calls]):
            record(future.result())
            advance()


async def _run_async(agent: Agent, calls, run_id, concurrency, timeout, record, advance) -> None:
    limit = asyncio.Semaphore(concurrency)

    async def one(call: Call) -> None:
        async with limit:
            try:
                answer = await asyncio.wait_for(agent.instance()(call.case.input), timeout)
            except Exception as error:
                trial = _trial(call, run_id, error=error)
            else:
                trial = _trial(call, run_id, answer)
        record(trial)
        advance()

    await asyncio.gather(*(one(call) for call in calls))


@contextmanager
def _progress_bar(total: int, enabled: bool | None) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr when it is a terminal (or when asked); else a no-op."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("trials", total=total)
        yield lambda: bar.advance(task)
