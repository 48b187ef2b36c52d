"""The receiver's finisher: a run's decisions in order, runs side by side, so one run's slow
assessment holds neither a request nor another run's admission."""

from __future__ import annotations

import threading

from verdictgate.declaration import RunDeclaration
from verdictgate.evidence import Evidence
from verdictgate.lifecycle import Final, FinalReason, Interim
from verdictgate.receiver.publishing.finisher import Finisher


def interim(run: str) -> Interim:
    return Interim(run, Evidence(), RunDeclaration.default(run, None, None))


def final(run: str) -> Final:
    return Final(run, FinalReason.IDLE, Evidence(), RunDeclaration.default(run, None, None), False)


def test_a_slow_run_holds_neither_the_caller_nor_another_run() -> None:
    release, slow_started, done = threading.Event(), threading.Event(), []

    def do(decision) -> None:
        if decision.run_id == "big" and isinstance(decision, Interim):
            slow_started.set()
            assert release.wait(10)
        done.append((decision.run_id, type(decision).__name__))

    finisher = Finisher(do, workers=2)
    finisher.put(interim("big"))  # returns at once, however long the work takes
    finisher.put(final("big"))
    assert slow_started.wait(10)
    finisher.put(final("small"))
    assert not finisher.flush(0.2)  # "big" still holds its window
    assert done == [("small", "Final")]  # admitted while "big" was being assessed
    release.set()
    assert finisher.flush(10)
    assert done == [("small", "Final"), ("big", "Interim"), ("big", "Final")]  # in its order
    finisher.stop()


def test_a_failure_is_logged_and_the_next_decision_is_done(caplog) -> None:
    done = []

    def do(decision) -> None:
        if decision.run_id == "bad":
            raise RuntimeError("boom")
        done.append(decision.run_id)

    finisher = Finisher(do)
    finisher.put(final("bad"))
    finisher.put(final("good"))
    assert finisher.flush(10) and done == ["good"]
    assert any("run bad cannot be assessed" in r.getMessage() for r in caplog.records)
    finisher.stop()
    finisher.put(final("after"))  # a stopped finisher takes nothing more
    assert finisher.flush(1) and done == ["good"]
