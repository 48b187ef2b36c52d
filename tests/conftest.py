"""Shared builders for tests: suites, trial files and a CLI invoker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import settings

from postgres_support import StoreMaker, postgresql
from verdictgate.cli.main import main

# No wall-clock bound on an example (hypothesis's default deadline is 200 ms): on a busy
# machine it fails tests whose property holds. How fast the code is, benchmarks/ says.
settings.register_profile("verdictgate", deadline=None)
settings.load_profile("verdictgate")

ROUTES = ["approve", "deny", "review"]


def suite_document(cases_per_route: int = 2, **contract) -> dict:
    """A suite with explicit case ids `<route>-<n>` over ROUTES."""
    contract.setdefault("allowed", ROUTES)
    return {
        "schema": "verdictgate.suite/v1",
        "name": "gate",
        "point": "approval_gate",
        "contract": contract,
        "cases": [
            {"id": f"{route}-{n}", "input": f"request {route} {n}", "expected": route}
            for route in ROUTES
            for n in range(cases_per_route)
        ],
    }


def trial_records(answers: dict[str, list[str | None]], run: str = "r1") -> list[dict]:
    """Records for case -> answers by trial index (None is an error trial)."""
    records = []
    for case, decisions in answers.items():
        for index, decision in enumerate(decisions):
            record = {"run": run, "case": case, "trial": index}
            if decision is None:
                record.update(outcome="error", error_type="timeout")
            elif decision.startswith("no_decision:"):
                record.update(outcome="no_decision", reason=decision.split(":", 1)[1])
            else:
                record.update(outcome="decision", verdict=decision)
            records.append(record)
    return records


def snapshot(cli, trials: str, suite: str, baseline: Path):
    """`verdictgate snapshot`: approve the trials as a baseline written to `baseline` (`cli` is
    the fixture's invoker)."""
    return cli(
        "snapshot",
        "--trials",
        trials,
        "--suite",
        suite,
        "--accept-reference",
        "--output",
        str(baseline),
    )


def stable_answers(pairs_per_case: int = 13, cases_per_route: int = 2) -> dict[str, list]:
    """Every case answers its own route on every trial."""
    return {
        f"{route}-{n}": [route] * (2 * pairs_per_case)
        for route in ROUTES
        for n in range(cases_per_route)
    }


@pytest.fixture
def write(tmp_path: Path):
    """Write JSON (a dict) or JSON Lines (a list) under tmp_path and return the path."""

    def writer(name: str, content) -> str:
        path = tmp_path / name
        if isinstance(content, list):
            path.write_text("".join(json.dumps(record) + "\n" for record in content))
        else:
            path.write_text(json.dumps(content))
        return str(path)

    return writer


@pytest.fixture
def cli():
    """Invoke the CLI in process; returns click's Result (exit_code, stdout, stderr)."""
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    return invoke


@pytest.fixture
def title_suite(write) -> str:
    """Two cases per route, inputs in title case (`Request approve 0`), so `case` changes them."""
    document = suite_document()
    for case in document["cases"]:
        case["input"] = case["input"].capitalize()
    return write("suite.json", document)


def report_of(result) -> dict:
    """The JSON report a CLI result printed."""
    return json.loads(result.stdout)


def codes_of(report: dict) -> set[str]:
    """The reason codes of a JSON report."""
    return {reason["code"] for reason in report["reasons"]}


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """Headless Chromium (the Debian package) driven by Playwright; a failure in CI when it is
    missing, else a skip (`components.binary`)."""
    from components import binary

    executable = binary("chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """One PostgreSQL server for the session (per test worker): its URL."""
    with postgresql() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreMaker]:
    """Makes stores for the test, once on SQLite and once on PostgreSQL (see StoreMaker)."""
    server = request.getfixturevalue("postgres_server") if request.param == "postgresql" else None
    maker = StoreMaker(request.param, tmp_path, server)
    yield maker
    maker.close()
