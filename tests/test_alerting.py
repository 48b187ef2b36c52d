"""The alerting path: the scrape endpoint, the rules (promtool), and the names the docs promise."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path

import yaml

from components import free_port, listening_hosts
from prometheus_support import RULES_DIR, run_tool
from receiver_support import decision_span, request
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.publishing.prometheus_endpoint import PrometheusEndpoint
from verdictgate.receiver.store import Store

DOCS = Path(__file__).resolve().parents[1] / "docs" / "alerting.md"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RULES = RULES_DIR / "verdictgate-rules.yaml"


def serving() -> PrometheusEndpoint:
    """An endpoint answering scrapes on a free loopback port."""
    endpoint = PrometheusEndpoint()
    endpoint.serve("127.0.0.1", 0)
    return endpoint


def scrape(endpoint: PrometheusEndpoint) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=10) as page:
        return page.read().decode()


def sample(text: str, metric: str, suite: str) -> float:
    """The value of `metric`'s series of `suite` (its pooled one: no route)."""
    for line in text.splitlines():
        pooled = 'verdictgate_route="' not in line or 'verdictgate_route=""' in line
        if line.startswith(metric + "{") and f'verdictgate_suite="{suite}"' in line and pooled:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {metric} of {suite} in:\n{text}")


def finished_run(receiver: Receiver, run: str, flipping: bool, trials: int = 40) -> None:
    """A run of suite `gate` (4 cases x `trials` trials) made final at the next tick; case c0
    flips on every pair if asked."""
    routes = ["approve", "deny"]
    spans = [
        decision_span(
            run,
            f"c{c}",
            i,
            "deny" if flipping and c == 0 and i % 2 else routes[c % 2],
            routes[c % 2],
        )
        for c in range(4)
        for i in range(trials)
    ]
    receiver.ingest(extract_protobuf(request(spans).SerializeToString()))
    receiver.tick()  # an idle period of 0: final at the first tick
    assert receiver.flush()


def test_the_scrape_endpoint_shows_the_latest_admission_and_its_time() -> None:
    endpoint = serving()
    try:
        receiver = Receiver(Store(), None, ReceiverConfig(idle=0), scrape=endpoint)
        finished_run(receiver, "r1", flipping=True)
        rejected = scrape(endpoint)
        assert receiver.assessment("r1").status.value == "rejected"
        assert sample(rejected, "verdictgate_admission", "gate") == 0
        assert sample(rejected, "verdictgate_inconclusive", "gate") == 0
        first = sample(rejected, "verdictgate_admission_time_seconds", "gate")
        finished_run(receiver, "r2", flipping=False)
        qualified = scrape(endpoint)
        assert receiver.assessment("r2").status.value == "qualified"
        assert sample(qualified, "verdictgate_admission", "gate") == 1
        assert sample(qualified, "verdictgate_admission_time_seconds", "gate") >= first
        runs = [
            line
            for line in qualified.splitlines()
            if line.startswith("verdictgate_admission_run_seconds{")
        ]
        assert len(runs) == 1 and 'verdictgate_run_id="r2"' in runs[0], runs  # r1's series ended
        assert "case" not in re.sub(r"#.*", "", qualified).replace("verdictgate_", "")
    finally:
        endpoint.close()


def test_every_metrics_endpoint_the_alerting_examples_show_is_on_loopback() -> None:
    """The page says to keep the unauthenticated endpoint on loopback; its examples do."""
    listens = re.findall(r"--prometheus-listen ([\d.:]+)", DOCS.read_text())  # examples, not syntax
    assert listens and all(re.fullmatch(r"(127\.0\.0\.1:)?\d+", value) for value in listens)
    scraping = yaml.safe_load((RULES_DIR / "prometheus.yaml").read_text())
    targets = [
        t for job in scraping["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    ]
    assert targets and all(target.startswith("127.0.0.1:") for target in targets)


def test_the_rules_and_the_examples_pass_promtool_and_amtool() -> None:
    assert "SUCCESS" in run_tool("promtool", "check", "rules", RULES.name).stdout
    assert "SUCCESS" in run_tool("promtool", "test", "rules", "verdictgate-rules.test.yaml").stdout
    run_tool("promtool", "check", "config", "prometheus.yaml")
    run_tool("amtool", "check-config", "alertmanager.yaml")


def exported_names() -> tuple[set[str], set[str]]:
    """The metric and label names a receiver's scrape endpoint serves after two admissions."""
    endpoint = serving()
    try:
        receiver = Receiver(Store(), None, ReceiverConfig(idle=0), scrape=endpoint)
        finished_run(receiver, "r1", flipping=True)
        text = scrape(endpoint)
    finally:
        endpoint.close()
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    metrics = {line.split("{", 1)[0] for line in series}
    labels = {label for line in series for label in re.findall(r'([a-z_]+)="', line)}
    return metrics, labels


def rule_names(rules_text: str, labels: set[str]) -> tuple[set[str], set[str]]:
    """(metric names, label names) the rules' expressions and annotations' queries use."""
    rules = yaml.safe_load(rules_text)["groups"][0]["rules"]
    texts = [rule["expr"] for rule in rules]
    texts += [text for rule in rules for text in rule.get("annotations", {}).values()]
    named = {name for text in texts for name in re.findall(r"\bverdictgate_[a-z_]+", text)}
    return named - labels, named & labels


def test_every_name_a_rule_uses_is_exported_and_documented() -> None:
    metrics, labels = exported_names()
    used_metrics, used_labels = rule_names(RULES.read_text(), labels)
    assert used_metrics and used_metrics <= metrics, used_metrics - metrics
    assert {"verdictgate_suite", "verdictgate_point", "verdictgate_run_id"} <= used_labels
    broken = RULES.read_text().replace("verdictgate_admission{", "verdictgate_admissions{", 1)
    assert rule_names(broken, labels)[0] - metrics == {"verdictgate_admissions"}  # caught
    docs = DOCS.read_text()
    alerts = {rule["alert"] for rule in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]}
    assert alerts == {
        "VerdictgateRunRejected",
        "VerdictgateRunInconclusive",
        "VerdictgateCanarySilent",
    }
    for name in alerts | metrics | used_labels | {"verdictgate_route"}:
        if name.startswith(("verdictgate", "Verdictgate")):
            assert f"`{name}`" in docs, name


def test_the_canary_example_serves_its_admission_to_prometheus() -> None:
    """The in-process path: a PrometheusMetricReader on the canary's own MeterProvider."""
    port = free_port()
    canary = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "otel_canary.py"),
            "--prometheus-port",
            str(port),
            "--every",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert canary.stdout is not None and ": qualified" in canary.stdout.readline()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            text = page.read().decode()
        assert sample(text, "verdictgate_admission", "payment-disputes") == 1
        assert sample(text, "verdictgate_admission_time_seconds", "payment-disputes") > 0
        assert listening_hosts(port) == {"127.0.0.1"}  # no token, no TLS: loopback only
    finally:
        canary.terminate()
        canary.wait(timeout=30)


def test_a_restarted_receiver_shows_the_latest_admissions_again(tmp_path) -> None:
    """Else a restart would resolve the page of a rejected run that nothing has replaced."""
    path = tmp_path / "store.sqlite"
    first = serving()
    try:
        finished_run(
            Receiver(Store(path), None, ReceiverConfig(idle=0), scrape=first), "r1", flipping=True
        )
        before = scrape(first)
    finally:
        first.close()
    again = serving()
    try:
        Receiver(Store(path), scrape=again)
        after = scrape(again)
    finally:
        again.close()
    for metric in ("verdictgate_admission", "verdictgate_admission_time_seconds"):
        assert sample(after, metric, "gate") == sample(before, metric, "gate")
    assert sample(after, "verdictgate_admission", "gate") == 0
    assert "verdictgate_trials_total{" not in after  # its trials were counted before


def test_the_inconclusive_streak_counts_runs_in_a_row() -> None:
    endpoint = serving()
    try:
        receiver = Receiver(Store(), None, ReceiverConfig(idle=0), scrape=endpoint)
        streaks = []
        for number, trials in enumerate([40, 4, 4, 4, 40, 4]):  # 4 trials: too few pairs
            finished_run(receiver, f"r{number}", flipping=False, trials=trials)
            streaks.append(sample(scrape(endpoint), "verdictgate_inconclusive_streak", "gate"))
    finally:
        endpoint.close()
    assert streaks == [0, 1, 2, 3, 0, 1]


def test_a_series_the_latest_admission_does_not_carry_is_gone() -> None:
    """A pass rate (or a route) of an earlier run must not stay on the scrape beside the
    latest admission, which has none; and every gauge comes from that admission."""
    from verdictgate import Trial, assess
    from verdictgate.otel.admission_record import GAUGES, AdmissionRecord, TrialTally

    def publication(passed: bool | None) -> AdmissionRecord:
        trials = [
            Trial(f"c{c}", i, "approve", "r", passed=passed) for c in range(4) for i in range(40)
        ]
        return AdmissionRecord.of(assess(trials), frozenset(), TrialTally())

    endpoint = serving()
    try:
        endpoint.emit(publication(passed=True))
        judged = scrape(endpoint)
        latest = publication(passed=None)  # made later, so the latest whatever the order shown
        endpoint.emit(latest)
        unjudged = scrape(endpoint)
    finally:
        endpoint.close()
    assert "verdictgate_pass_rate_lower{" in judged
    assert "verdictgate_pass_rate_lower{" not in unjudged
    for name, value, attributes in latest.gauges:
        if "verdictgate.route" not in attributes:
            seconds = "_seconds" if GAUGES[name][0] == "s" else ""  # the unit's suffix
            assert sample(unjudged, name.replace(".", "_") + seconds, "suite") == value


def test_the_scrape_port_is_bounded_and_scrapes_never_hold_what_admissions_take() -> None:
    """Beyond the cap from one host, each new socket is refused, or closes a stalled one (either
    told 503; no thread or descriptor each), and a scrape is answered from the snapshot the last
    admission rendered: an admission made while a scraper holds a connection open is shown by
    the next scrape."""
    endpoint = serving()
    idle = [socket.create_connection(("127.0.0.1", endpoint.port)) for _ in range(24)]
    try:
        told = []
        for sock in idle:
            sock.settimeout(0.2)
            with contextlib.suppress(TimeoutError):
                told.append(sock.recv(64).startswith(b"HTTP/1.1 503"))
        assert told == [True] * 8  # the 8 beyond the 16 a host holds, however they were timed
        for sock in idle:
            sock.settimeout(5)
        receiver = Receiver(Store(), config=ReceiverConfig(idle=0.0), scrape=endpoint)
        spans = [
            decision_span("r1", f"c{c}", i, "approve", "approve")
            for c in range(2)
            for i in range(2)
        ]
        receiver.ingest(extract_protobuf(request(spans).SerializeToString()))
        receiver.tick()
        assert receiver.flush()
        for sock in idle:  # free the host's share for the scrape below
            sock.close()
        assert "verdictgate_admission" in scrape(endpoint) and "gate" in scrape(endpoint)
    finally:
        for sock in idle:
            sock.close()
        endpoint.close()


def test_scrapes_are_not_written_to_stderr_line_by_line(capfd) -> None:
    """A scrape loop must not grow the receiver's log: requests go to the DEBUG log only."""
    endpoint = serving()
    try:
        scraped = [scrape(endpoint) for _ in range(5)]
    finally:
        endpoint.close()
    assert len(scraped) == 5 and "GET /metrics" not in capfd.readouterr().err


def test_the_endpoint_holds_the_latest_runs_only_however_many_came_before() -> None:
    """Each run id is an attribute set; an SDK provider keeps every one it ever saw, so the
    endpoint renders through a provider of one collection: memory follows the suites, not
    the runs."""
    import gc
    import tracemalloc

    from verdictgate import Trial, assess
    from verdictgate.otel.admission_record import AdmissionRecord, TrialTally

    trials = [Trial(f"c{c}", i, "approve", "r") for c in range(4) for i in range(4)]
    assessment = assess(trials)
    tally = TrialTally()
    endpoint = PrometheusEndpoint()

    def admit(count: int, start: int) -> None:
        for number in range(start, start + count):
            run = replace(assessment, run=replace(assessment.run, id=f"run-{number}"))
            endpoint.emit(AdmissionRecord.of(run, frozenset(), tally))

    tracemalloc.start()
    try:
        admit(100, 0)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        admit(1000, 100)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        endpoint.close()
    text = endpoint.snapshot.decode()
    runs = [
        line for line in text.splitlines() if line.startswith("verdictgate_admission_run_seconds{")
    ]
    assert len(runs) == 1 and 'verdictgate_run_id="run-1099"' in runs[0]
    # one provider kept every run id: about 1.4 KB a run, 1.4 MB here
    assert grown < 300_000, f"{grown} bytes more after 1,000 more runs"
