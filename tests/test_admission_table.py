"""The admission rule is one table: every reason code has exactly one row, and status, next
steps and the JUnit/Markdown checks all come from it."""

from __future__ import annotations

import re
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from verdictgate import Claim, Contract, Policy, Status, Suite, Trial, assess
from verdictgate.admission import CHECKS, RULE_OF, RULES, ReasonCode
from verdictgate.reports import render_junit, render_markdown, render_text
from verdictgate.reports.checks import CheckResult, checks

SPEC_CODES = [
    "pooled_stochastic",
    "route_stochastic",
    "target_stochastic",
    "contract_missing_intended",
    "contract_missing_observed",
    "contract_unknown_decision",
    "contract_under_cased",
    "dominant_decision",
    "shared_session",
    "integrity_conflict",
    "invariant_blocked",
    "quality_failed",
    "relation_violated",
    "relations_vacuous",
    "pass_rate_unreliable",
    "pooled_undecided",
    "target_undecided",
    "incomplete",
    "in_progress",
    "no_repeats",
    "pass_rate_undecided",
]
"""The reason codes spec/REPORT.md names (rejected, then inconclusive): none may be renamed."""
SPEC_REJECTING = set(SPEC_CODES[:15])


def test_every_reason_code_has_exactly_one_row():
    rows = Counter(rule.code for rule in RULES)
    assert set(rows) == set(ReasonCode) and set(rows.values()) == {1}
    assert set(SPEC_CODES) <= {code.value for code in ReasonCode}
    for code in SPEC_CODES:
        expected = Status.REJECTED if code in SPEC_REJECTING else Status.INCONCLUSIVE
        assert RULE_OF[code].effect is expected, code
    assert all(rule.check in CHECKS for rule in RULES)
    assert set(CHECKS) == {rule.check for rule in RULES}  # no check without a reason


ROUTES = ("approve", "deny", "review")
answers = st.lists(st.sampled_from([*ROUTES, "escalate", None]), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from([f"c{n}" for n in range(6)]), answers, max_size=6),
    st.sampled_from(
        [Contract(set(ROUTES), targets={"deny": 0.2}, minimum_cases={"review": 2}), Contract()]
    ),
    st.sampled_from(Claim),
)
def test_status_next_steps_and_checks_come_from_the_table(table, contract, claim):
    trials = [
        Trial(case, index, answer, "r", ROUTES[int(case[1:]) % 3], None if answer else "Boom")
        for case, row in table.items()
        for index, answer in enumerate(row)
    ]
    assessment = assess(trials, Suite("s", "p", (), contract), Policy(tolerance=0.2, claim=claim))
    effects = {RULE_OF[code].effect for code in assessment.reason_codes}
    want = (
        Status.REJECTED
        if Status.REJECTED in effects
        else Status.INCONCLUSIVE
        if effects
        else Status.QUALIFIED
    )
    assert assessment.status is want
    for code in assessment.reason_codes:  # every step a fired row asks for is there
        assert set(RULE_OF[code].next_steps(assessment)) <= set(assessment.next_steps)
    results = {check.name: check.result for check in checks(assessment)}
    for name in CHECKS:
        fired = [RULE_OF[c] for c in assessment.reason_codes if RULE_OF[c].check == name]
        if name == "stability.route":
            continue  # one check per route, from the route's own interval
        not_claimed = "stability.population" if claim is Claim.TESTED else "stability.pooled"
        if name == not_claimed:  # the verdict of the claim not made is reported, not gating
            assert not fired and results[name] is CheckResult.NOT_JUDGED
        elif any(rule.effect is Status.REJECTED for rule in fired):
            assert results[name] is CheckResult.FAILED
        elif fired:
            assert results[name] is CheckResult.UNDECIDED
        else:
            assert results[name] in (CheckResult.PASSED, CheckResult.UNDECIDED)
    assert all(type(reason.code) is str for reason in assessment.reasons)  # plain codes
    assert "ReasonCode" not in render_text(assessment) + render_markdown(assessment)
    junit = render_junit(assessment)
    markdown = render_markdown(assessment)
    for check in checks(assessment):
        assert f'name="{check.name}"' in junit
        assert re.search(rf"\| {re.escape(check.name)} \|", markdown), check.name
