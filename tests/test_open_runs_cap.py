"""Open runs cost memory in proportion to what they hold, up to a stated cap (issue 35): past
`max_open_runs` a request that would open another run is refused with a retry hint (its spans
are retried, never lost), while a request for a run already open, or one the replica does not
decide, is taken; once runs end, new ones are taken again."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from receiver_support import request, running_server, stable_run
from verdictgate.clock import ManualClock
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.ingest.fair_gate import Busy
from verdictgate.receiver.store import LOCAL

IDLE = 30.0


def ingest(receiver: Receiver, run: str, trials: int = 2) -> None:
    spans = stable_run(run, cases=1, trials=trials)
    receiver.ingest(extract_protobuf(request(spans).SerializeToString()))


def test_past_the_cap_a_new_run_waits_and_open_ones_go_on(new_store) -> None:
    clock = ManualClock(1_000.0)
    config = ReceiverConfig(idle=IDLE, replica=LOCAL, max_open_runs=3)
    receiver = Receiver(new_store(), None, config, clock=clock)
    for run in ("a", "b", "c"):
        ingest(receiver, run)
    with pytest.raises(Busy, match="--max-open-runs"):
        ingest(receiver, "d")
    assert receiver.store.run("d") is None  # nothing of the refused request was taken
    ingest(receiver, "a", trials=4)  # an open run goes on
    assert receiver.store.run("a").received == 4
    clock.advance(IDLE + 1)
    receiver.tick()  # a, b and c end
    assert receiver.flush()
    for run in ("d", "e", "f"):  # room again, up to the cap
        ingest(receiver, run)
    assert receiver.store.run("f") is not None
    ingest(receiver, "c", trials=6)  # a run already final costs nothing: counted late
    assert receiver.store.run("c").late == 6
    with pytest.raises(Busy):
        ingest(receiver, "g")


def test_a_request_refused_at_the_cap_gets_a_retry_hint_over_http() -> None:
    clock = ManualClock(1_000.0)
    config = ReceiverConfig(idle=IDLE, replica=LOCAL, max_open_runs=1)
    with running_server(clock=clock, config=config) as server:
        for run, expected in (("a", 200), ("b", 429)):
            body = request(stable_run(run, cases=1, trials=2)).SerializeToString()
            posted = urllib.request.Request(
                f"http://127.0.0.1:{server.http_port}/v1/traces",
                body,
                {"Content-Type": "application/x-protobuf"},
            )
            try:
                with urllib.request.urlopen(posted, timeout=30) as answer:
                    status, retry_after = answer.status, None
            except urllib.error.HTTPError as error:
                status, retry_after = error.code, error.headers.get("Retry-After")
            assert status == expected, run
        assert retry_after is not None and int(retry_after) >= 1
