"""`--format html`: one self-contained page whose plot says what the JSON report says, read
from the SVG's coordinates, with every name escaped."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import report_of
from verdictgate import Contract, Policy, Suite, Trial, assess
from verdictgate.reports import render_html

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class PlotRows(HTMLParser):
    """Each plot row's data attributes (by route, or by label in a comparison), and the x of
    its interval ends and tolerance line."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict] = {}
        self._row: dict | None = None
        self.tags: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.add(tag)
        found = dict(attrs)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]
        key = found.get("data-route", found.get("data-label"))
        if tag == "g" and key is not None:
            self._row = self.rows[key] = dict(found)
        elif tag == "line" and self._row is not None:
            kind = found.get("class")
            if kind == "interval":
                self._row["x_low"], self._row["x_high"] = float(found["x1"]), float(found["x2"])
            elif kind == "tolerance":
                self._row["x_tolerance"] = float(found["x1"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self._row = None


def plot_of(page: str) -> PlotRows:
    parser = PlotRows()
    parser.feed(page)
    return parser


def run_router(cli, tmp_path: Path, router: str) -> tuple[str, dict]:
    """The HTML and the JSON report of one run of a demo router (the same trials)."""
    trials = str(tmp_path / f"{router}.jsonl")
    page = str(tmp_path / f"{router}.html")
    cli(
        "run",
        "--agent",
        f"{EXAMPLES / 'payment_router.py'}:{router}",
        "--suite",
        str(EXAMPLES / "payment_suite.json"),
        "--isolation",
        "fresh-instance",
        "--trials-out",
        trials,
        "--format",
        "html",
        "--output",
        page,
    )
    report = report_of(
        cli(
            "assess",
            "--trials",
            trials,
            "--suite",
            str(EXAMPLES / "payment_suite.json"),
            "--format",
            "json",
        )
    )
    return Path(page).read_text(), report


@pytest.mark.parametrize("router", ["flipping_router", "stable_router"])
def test_each_mark_lies_where_its_result_says(cli, tmp_path, router) -> None:
    page, report = run_router(cli, tmp_path, router)
    rows = plot_of(page).rows
    stability = report["stability"]
    expected = {"": stability["pooled"], **{r["route"]: r for r in stability["routes"]}}
    assert set(rows) == set(expected)
    for route, row in rows.items():
        json_row = expected[route]
        interval = json_row.get("ci") or json_row
        assert row["data-result"] == json_row["result"], route
        assert float(row["data-low"]) == pytest.approx(interval["ci_low"])
        assert float(row["data-high"]) == pytest.approx(interval["ci_high"])
        low, high, tolerance = row["x_low"], row["x_high"], row["x_tolerance"]
        assert low <= high
        if row["data-result"] == "deterministic":
            assert high < tolerance, route  # wholly left of its tolerance line
        elif row["data-result"] == "stochastic":
            assert low > tolerance, route  # wholly right of it
        else:
            assert low <= tolerance <= high, route  # straddles it
    assert report["status"] in page and report["headline"].split(":")[0] in page


def test_the_page_needs_nothing_outside_itself_and_runs_no_script() -> None:
    suite = Suite("s", "p", (), Contract(frozenset({"approve", "deny"})))
    page = render_html(assess([Trial("c", i, "approve") for i in range(4)], suite, Policy()))
    parsed = plot_of(page)
    assert "script" not in parsed.tags and not parsed.links
    assert "http://" not in page and "https://" not in page
    assert "default-src 'none'" in page  # and the page says so to the browser


def test_a_name_with_markup_shows_as_text() -> None:
    evil = '<script>alert("x")</script>'
    suite = Suite(evil, evil, (), Contract(frozenset({evil, "deny"})))
    trials = [Trial("c", i, evil, run=evil, expected=evil) for i in range(4)]
    page = render_html(assess(trials, suite, Policy()))
    assert "<script" not in page
    assert "&lt;script&gt;" in page
    assert json.dumps(evil) not in page


def test_check_and_compare_draw_what_changed(cli, write, tmp_path) -> None:
    from conftest import stable_answers, suite_document, trial_records

    suite = write("s.json", suite_document())
    before = write("before.jsonl", trial_records(stable_answers(pairs_per_case=40)))
    drifted = stable_answers(pairs_per_case=40)
    for pair in range(40):
        drifted["approve-0"][2 * pair + 1] = "deny"
    after = write("after.jsonl", trial_records(drifted))
    baseline = str(tmp_path / "baseline.json")
    cli(
        "snapshot", "--trials", before, "--suite", suite, "--accept-reference", "--output", baseline
    )
    checked = cli("check", "--snapshot", baseline, "--trials", after, "--format", "html")
    assert checked.exit_code == 1 and "Against the baseline" in checked.stdout
    assert "approve became unstable" in checked.stdout
    compared = cli("compare", "--before", before, "--after", after, "--format", "html")
    assert compared.exit_code == 1
    rows = plot_of(compared.stdout).rows
    pooled = rows["change rate (pooled)"]
    assert pooled["data-verdict"] == "worse"
    assert float(pooled["data-low"]) > 0  # wholly above zero: the change rate rose


def test_quality_and_errors_are_shown_when_the_report_has_them() -> None:
    suite = Suite("s", "p", (), Contract(frozenset({"approve", "deny"})))
    trials = [
        Trial("c", i, "approve", expected="approve", passed=True, latency_ms=10.0 + i)
        for i in range(20)
    ] + [Trial("d", 0, None, expected="deny", error_type="timeout")]
    page = render_html(assess(trials, suite, Policy(pass_rate=0.5)))
    assert "pass rate of approve" in page and "20 of 20 passed" in page
    assert "p50 " in page and "timeout x1" in page
    assert 'aria-label="Change-rate intervals against each tolerance: ' in page


def test_a_qualified_run_says_why_its_undecided_routes_do_not_block_and_leads_with_next_steps(
    monkeypatch,
):
    """The stable payment router qualifies with five routes too thinly sampled to decide: the
    plot's note says why that does not block, and what to do next comes before the tables."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    monkeypatch.syspath_prepend(str(examples))
    from payment_router import stable_router

    import verdictgate

    suite = verdictgate.load_suite(examples / "payment_suite.json")
    assessment = verdictgate.run(stable_router(), suite)
    assert assessment.status is verdictgate.Status.QUALIFIED
    undecided = assessment.routes_with(verdictgate.Stability.UNDECIDED)
    page = render_html(assessment)
    assert f"{len(undecided)} routes are not decided on their own" in page
    assert "That does not block the run" in page
    assert page.index("What to do next") < page.index("<h2>Stability</h2>")
