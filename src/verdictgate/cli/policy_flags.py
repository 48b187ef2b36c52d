"""The policy a command judges by: its flags, falling back to the suite's settings."""

from __future__ import annotations

from dataclasses import dataclass, replace

import click

from ..flags import flag
from ..policy import PRECISION_PRESETS, Claim, PassWhen, Policy
from ..stats import DEFAULT_METHOD, Method
from ..suite import Suite


@dataclass(frozen=True)
class PolicyFlags:
    """The policy flags of a command that judges evidence, in --help order."""

    claim: str | None = flag(
        None,
        "What qualifying promises: tested (default: these cases would decide the same again) "
        "or population (new inputs would; the case is the unit, so it needs many cases; "
        "docs/statistics.md).",
        choices=tuple(c.value for c in Claim),
    )
    method: str | None = flag(
        None,
        "How change rates are judged: exact (the default: both wrong answers within 2.5% at "
        "every n), wilson (AgentVerity's interval, whose wrong answers exceed 2.5% at some n) "
        "or sequential (valid however often it is looked at); docs/statistics.md.",
        choices=tuple(m.value for m in Method),
    )
    tolerance: float | None = flag(None, "Tolerated change rate between reruns.", type=float)
    precision: str | None = flag(
        None, "cheap 0.10, balanced 0.05, strict 0.01.", choices=tuple(PRECISION_PRESETS)
    )
    pass_rate: float | None = flag(
        None, "Require the evaluator pass rate to be shown above this (e.g. 0.9).", type=float
    )
    pass_when: str | None = flag(
        None,
        "What makes a trial pass for --pass-rate: an evaluator's verdict (the default) or its "
        "decision equal to its case's expected one (a stable wrong route fails).",
        choices=tuple(p.value for p in PassWhen),
    )
    max_p95_ms: float | None = flag(
        None,
        "Require the 95th-percentile latency to be shown under this many milliseconds.",
        type=float,
    )
    max_p95_tool_calls: float | None = flag(
        None,
        "Require the 95th-percentile of tools called per trial to be shown under this.",
        type=float,
    )

    def policy(self, suite: Suite | None) -> Policy:
        """The policy these flags say for `suite` (see `policy_for`)."""
        return policy_for(
            suite,
            self.tolerance,
            self.precision,
            self.pass_rate,
            self.pass_when,
            self.method,
            self.claim,
            max_p95_ms=self.max_p95_ms,
            max_p95_tool_calls=self.max_p95_tool_calls,
        )


def policy_for(
    suite: Suite | None,
    tolerance: float | None,
    precision: str | None,
    pass_rate: float | None = None,
    pass_when: str | None = None,
    method: str | None = None,
    claim: str | None = None,
    **thresholds: float | None,
) -> Policy:
    """The policy from the command's options, falling back to the suite's tolerance, rate,
    what passes, method and claim; `thresholds` are the quantile thresholds (max_p95_ms,
    max_p95_tool_calls) given."""
    if tolerance is not None and precision is not None:
        raise click.UsageError("use --tolerance or --precision, not both")
    if precision is not None:
        tolerance = Policy.preset(precision).tolerance
    if tolerance is None and suite is not None:
        tolerance = suite.tolerance
    if pass_rate is None and suite is not None:
        pass_rate = suite.pass_rate
    if pass_when is not None and pass_rate is None:
        raise click.UsageError(
            "--pass-when says what a pass rate counts as passing: give --pass-rate too (or a"
            " suite's pass_rate)"
        )
    try:
        policy = Policy.with_tolerance(tolerance, pass_rate)
        given = {name: value for name, value in thresholds.items() if value is not None}
        passes = PassWhen(pass_when) if pass_when else (suite.pass_when if suite else None)
        judged_by = Method(method) if method else (suite.method if suite else None)
        claimed = Claim(claim) if claim else (suite.claim if suite else None)
        return replace(
            policy,
            **given,
            pass_when=passes or PassWhen.EVALUATOR,
            method=judged_by or DEFAULT_METHOD,
            claim=claimed or Claim.TESTED,
        )
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--tolerance") from None
