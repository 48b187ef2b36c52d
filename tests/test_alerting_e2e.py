"""Canary alerts end to end, against the real servers: `verdictgate serve --prometheus-listen`,
a Prometheus scraping it and evaluating the rules every second, and an Alertmanager whose
webhook is a server of this test. The shipped rules, scrape and routing files are used as they
are, but for addresses, intervals and the silence threshold. A rejected run pages with its suite's label, a qualified run
of the suite resolves the page, and a canary that stops fires VerdictgateCanarySilent."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from components import binary, free_port, listening_hosts
from prometheus_support import RULES_DIR

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SUITE = "payment-disputes"
SILENT_AFTER = 12
"""Seconds of silence after which the test's copy of the rules calls the canary silent."""
DEADLINE = 90.0
"""Seconds the whole test may take before it fails."""


@contextmanager
def webhook() -> Iterator[tuple[int, queue.Queue]]:
    """An HTTP server taking Alertmanager's webhook posts: (port, queue of alerts)."""
    alerts: queue.Queue = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            for alert in body["alerts"]:
                alerts.put(alert)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], alerts
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def process(command: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """A server process, its output in `log`; stopped (then killed) on the way out."""
    with log.open("w") as output:
        started = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        try:
            yield started
        finally:
            started.terminate()
            try:
                started.wait(timeout=20)
            except subprocess.TimeoutExpired:
                started.kill()
                started.wait()


def wait_for(condition, what: str, deadline: float, logs: list[Path]):
    """Poll `condition()` until it returns something truthy, or fail with the servers' logs."""
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.2)
    tails = "\n".join(f"--- {log.name}\n" + log.read_text()[-1500:] for log in logs)
    pytest.fail(f"timed out waiting for {what}\n{tails}")


def next_alert(
    alerts: queue.Queue, seen: list, name: str, status: str, deadline: float, logs: list[Path]
):
    """The first alert `name` in `status` the webhook received, waiting for it; `seen` keeps
    every alert received, so that none is lost to a wait for another."""

    def received():
        while not alerts.empty():
            seen.append(alerts.get())
        found = [a for a in seen if (a["labels"]["alertname"], a["status"]) == (name, status)]
        if not found:
            time.sleep(0.3)
        return found[0] if found else None

    return wait_for(received, f"{name} {status}", deadline, logs)


def run_router(router: str, grpc_port: int, run_id: str, expected_exit: int) -> None:
    """A run of the demo suite, its spans sent to the receiver."""
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "verdictgate"),
            "run",
            "--agent",
            f"{EXAMPLES / 'payment_router.py'}:{router}",
            "--suite",
            str(EXAMPLES / "payment_suite.json"),
            "--isolation",
            "fresh-instance",
            "--otlp-endpoint",
            f"http://127.0.0.1:{grpc_port}",
            "--run-id",
            run_id,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == expected_exit, result.stderr


def test_a_rejected_canary_pages_a_qualified_one_resolves_and_a_silent_one_pages(tmp_path):
    started = time.monotonic()
    deadline = started + DEADLINE
    prometheus, alertmanager = binary("prometheus"), binary("prometheus-alertmanager")
    rules = (RULES_DIR / "verdictgate-rules.yaml").read_text()
    assert rules.count("> 7200") == 1  # the silence threshold, the only change made here
    (tmp_path / "rules.yaml").write_text(rules.replace("> 7200", f"> {SILENT_AFTER}"))
    prometheus_port, alertmanager_port = free_port(), free_port()
    logs = [tmp_path / name for name in ("serve.log", "prometheus.log", "alertmanager.log")]
    with webhook() as (hook_port, alerts):
        routing = yaml.safe_load((RULES_DIR / "alertmanager.yaml").read_text())
        for receiver in routing["receivers"]:  # the shipped routes, to the test's webhook
            for hook in receiver["webhook_configs"]:
                hook["url"] = f"http://127.0.0.1:{hook_port}/"
        routing["route"].update(group_wait="1s", group_interval="1s")  # seconds, not minutes
        (tmp_path / "alertmanager.yaml").write_text(yaml.safe_dump(routing))
        serve = [
            str(Path(sys.executable).parent / "verdictgate"),
            "serve",
            "--store",
            str(tmp_path / "store.sqlite"),
            "--grpc-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--prometheus-listen",
            "0",
            "--idle",
            "5s",
        ]
        with process(serve, logs[0]):
            ports = wait_for(
                lambda: re.search(
                    r"grpc [\d.]+:(\d+).*Prometheus metrics on [\d.]+:(\d+)", logs[0].read_text()
                ),
                "the receiver to listen",
                deadline,
                logs,
            )
            grpc_port, metrics_port = int(ports.group(1)), int(ports.group(2))
            assert listening_hosts(metrics_port) == {"127.0.0.1"}  # a bare port: loopback
            scraping = yaml.safe_load((RULES_DIR / "prometheus.yaml").read_text())
            scraping["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
            scraping["rule_files"] = [str(tmp_path / "rules.yaml")]
            scraping["scrape_configs"][0]["static_configs"] = [
                {"targets": [f"127.0.0.1:{metrics_port}"]}
            ]
            scraping["alerting"]["alertmanagers"][0]["static_configs"] = [
                {"targets": [f"127.0.0.1:{alertmanager_port}"]}
            ]
            (tmp_path / "prometheus.yaml").write_text(yaml.safe_dump(scraping))
            with (
                process(
                    [
                        alertmanager,
                        f"--config.file={tmp_path / 'alertmanager.yaml'}",
                        f"--storage.path={tmp_path / 'am'}",
                        "--cluster.listen-address=",
                        f"--web.listen-address=127.0.0.1:{alertmanager_port}",
                    ],
                    logs[2],
                ),
                process(
                    [
                        prometheus,
                        f"--config.file={tmp_path / 'prometheus.yaml'}",
                        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{prometheus_port}",
                        "--rules.alert.resend-delay=1s",
                    ],
                    logs[1],
                ),
            ):
                run_router("flipping_router", grpc_port, "canary-1", expected_exit=1)
                seen: list = []
                fired = next_alert(alerts, seen, "VerdictgateRunRejected", "firing", deadline, logs)
                assert fired["labels"]["verdictgate_suite"] == SUITE
                assert fired["labels"]["severity"] == "page"
                assert "Rejected" in fired["annotations"]["description"]
                assert fired["annotations"]["run_id"] == "canary-1"
                assert "--run canary-1" in fired["annotations"]["description"]
                assert fired["annotations"]["runbook_url"].endswith("#verdictgaterunrejected")
                run_router("stable_router", grpc_port, "canary-2", expected_exit=0)
                resolved = next_alert(
                    alerts, seen, "VerdictgateRunRejected", "resolved", deadline, logs
                )
                assert resolved["labels"]["verdictgate_suite"] == SUITE
                silent = next_alert(
                    alerts, seen, "VerdictgateCanarySilent", "firing", deadline, logs
                )
                assert silent["labels"]["verdictgate_suite"] == SUITE
                assert silent["labels"]["silent"] == "suite"
                assert silent["annotations"]["run_id"] == "canary-2"
    print(f"end to end: {time.monotonic() - started:.1f} s")
