"""The HTML report in a real browser: headless Chromium (the Debian package) driven by
Playwright. The page lays out without horizontal overflow at 1280 and 390 px, makes no
network request, shows every route with its numbers, draws each route's interval on the side
of its tolerance line its result says, and runs no script a name smuggles in."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import report_of
from verdictgate import Contract, Policy, Suite, Trial, assess
from verdictgate.reports import render_html

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
WIDTHS = (1280, 390)


def report_files(cli, tmp_path: Path, router: str) -> tuple[Path, dict]:
    trials, page = tmp_path / f"{router}.jsonl", tmp_path / f"{router}.html"
    cli(
        "run",
        "--agent",
        f"{EXAMPLES / 'payment_router.py'}:{router}",
        "--suite",
        str(EXAMPLES / "payment_suite.json"),
        "--isolation",
        "fresh-instance",
        "--trials-out",
        str(trials),
        "--format",
        "html",
        "--output",
        str(page),
    )
    report = report_of(
        cli(
            "assess",
            "--trials",
            str(trials),
            "--suite",
            str(EXAMPLES / "payment_suite.json"),
            "--format",
            "json",
        )
    )
    return page, report


ROWS = """() => [...document.querySelectorAll('svg.forest g.row')].map(g => {
  const x = (kind, end) => g.querySelector('line.' + kind).getBBox()[end];
  const box = g.querySelector('line.interval').getBBox();
  return {route: g.dataset.route, result: g.dataset.result,
          low: box.x, high: box.x + box.width, tolerance: x('tolerance', 'x')};
})"""
"""Each plot row as the browser laid it out: where its interval and tolerance line are."""


@pytest.mark.parametrize("router", ["flipping_router", "stable_router"])
def test_the_report_in_a_browser(browser, cli, tmp_path, router) -> None:
    path, report = report_files(cli, tmp_path, router)
    for width in WIDTHS:
        page = browser.new_page(viewport={"width": width, "height": 900})
        requests: list = []

        def note(request, requests: list = requests) -> None:
            requests.append(request)

        page.on("request", note)
        page.goto(path.as_uri())
        overflow = page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert overflow[0] <= overflow[1], (width, overflow)  # nothing wider than the window
        assert [r.url for r in requests] == [path.as_uri()]  # the page itself, nothing else
        shot = tmp_path / f"{router}-{width}.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        text = page.inner_text("body")
        for route in report["stability"]["routes"]:
            assert route["route"] in text
            assert f"{route['pairs']}" in text and route["result"] in text
        rows = {row["route"]: row for row in page.evaluate(ROWS)}
        assert set(rows) == {"", *(r["route"] for r in report["stability"]["routes"])}
        for route, row in rows.items():
            if row["result"] == "deterministic":
                assert row["high"] < row["tolerance"], route
            elif row["result"] == "stochastic":
                assert row["low"] > row["tolerance"], route
            else:
                assert row["low"] <= row["tolerance"] <= row["high"], route
        page.close()


def test_a_script_smuggled_in_a_name_does_not_run(browser, tmp_path) -> None:
    evil = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>'
    suite = Suite(evil, evil, (), Contract(frozenset({evil, "deny"})))
    trials = [Trial("c", i, evil, run=evil, expected=evil) for i in range(4)]
    path = tmp_path / "evil.html"
    path.write_text(render_html(assess(trials, suite, Policy())))
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(path.as_uri())
    assert page.evaluate("window.pwned") is None and not dialogs
    assert evil in page.inner_text("body")  # shown as text
    assert page.query_selector("img") is None and page.query_selector("script") is None
    page.close()
