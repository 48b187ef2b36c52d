"""verdictgate's pytest plugin (the `pytest11` entry point `verdictgate`, in the core install).

A test takes the `verdict_gate` fixture and gates itself on a run of an agent over a suite, or
on trials it collected:

    def test_the_router_is_admissible(verdict_gate):
        verdict_gate.run(stable_router(), load_suite("payment_suite.json"))

A run that is not qualified fails the test with the report's headline, reasons and next steps
(an inconclusive one too, unless `--verdictgate-inconclusive=pass`, the ini option of that
name, or `@pytest.mark.verdictgate(inconclusive="pass")` says otherwise). Each gated test's
assessment goes to the JUnit XML as properties and to a one-line summary in the terminal, from
the test's report, so both work the same under pytest-xdist: a gated test runs on one worker,
its trials one run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from .properties import PROPERTY_PREFIX, summary_line

if TYPE_CHECKING:  # the engine loads when a test takes the fixture, not when pytest starts
    from .gate import Gate

INCONCLUSIVE_CHOICES = ("fail", "pass")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "verdictgate_inconclusive",
        "what an inconclusive run does to its gated test: fail (default) or pass",
        default="fail",
    )
    parser.getgroup("verdictgate").addoption(
        "--verdictgate-inconclusive",
        choices=INCONCLUSIVE_CHOICES,
        default=None,
        help="what an inconclusive run does to its gated test (default: the ini option, fail)",
    )


def pytest_configure(config: pytest.Config) -> None:
    _choice(
        config.getoption("--verdictgate-inconclusive") or config.getini("verdictgate_inconclusive")
    )
    config.addinivalue_line(
        "markers",
        "verdictgate(inconclusive='fail'|'pass'): how this test's verdictgate gate treats an "
        "inconclusive run",
    )


def _choice(value: object) -> str:
    """A valid `inconclusive` setting (a bad one stops pytest before any test, exit 4)."""
    if value not in INCONCLUSIVE_CHOICES:
        raise pytest.UsageError(
            f"verdictgate: inconclusive must be one of {', '.join(INCONCLUSIVE_CHOICES)}, "
            f"got {value!r}"
        )
    return str(value)


def _inconclusive_fails(request: pytest.FixtureRequest) -> bool:
    marker = request.node.get_closest_marker("verdictgate")
    if marker is not None and (marker.args or set(marker.kwargs) - {"inconclusive"}):
        pytest.fail(
            "@pytest.mark.verdictgate takes only inconclusive='fail' or 'pass'", pytrace=False
        )
    choice = (
        (marker.kwargs.get("inconclusive") if marker is not None else None)
        or request.config.getoption("--verdictgate-inconclusive")
        or request.config.getini("verdictgate_inconclusive")
    )
    return _choice(choice) == "fail"


@pytest.fixture
def verdict_gate(request: pytest.FixtureRequest) -> Iterator[Gate]:
    """Gate this test on an assessment: `verdict_gate.run(agent, suite, ...)` or
    `verdict_gate.assess(trials, suite, ...)`."""
    from .gate import Gate

    yield Gate(request.node, inconclusive_fails=_inconclusive_fails(request))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per gated test: its status, the test, and the run's headline."""
    latest: dict[str, str] = {}  # a test rerun (pytest-rerunfailures) counts as its last try
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            line = summary_line(report.nodeid, getattr(report, "user_properties", ()))
            if line is not None:
                latest[report.nodeid] = line
    if latest:
        terminalreporter.section("verdictgate")
        for nodeid in sorted(latest):
            terminalreporter.write_line(latest[nodeid])


__all__ = ["PROPERTY_PREFIX"]
