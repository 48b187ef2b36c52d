"""Every span, attribute, metric and event name of the telemetry contract, spelled once."""

from __future__ import annotations

INSTRUMENTATION_SCOPE = "verdictgate"

# Spans
RUN_SPAN = "verdictgate.run"
TRIAL_SPAN = "verdictgate.trial"
"""A harness's span around one call of an agent in another process: run, case, trial, expected
and `verdictgate.decision.rule`; a receiver derives the trial from the framework spans below it."""
ADMISSION_SPAN = "verdictgate.admission"
DECISION_SPAN_PREFIX = "decide "


def decision_span_name(point: str) -> str:
    """`decide {point}`."""
    return DECISION_SPAN_PREFIX + point


# Shared by run, decision and admission spans
RUN_ID = "verdictgate.run.id"
SUITE = "verdictgate.suite"
POINT = "verdictgate.point"

# Run span
PLAN_CASES = "verdictgate.plan.cases"
PLAN_TRIALS = "verdictgate.plan.trials"
PLAN_SIZED_TRIALS = "verdictgate.plan.sized_trials"
"""int: a run that could stop early (sequential or curtailed): the calls it was sized for;
`verdictgate.plan.trials` is then the calls it made."""
CURTAILED = "verdictgate.curtailed"
"""bool: the run stopped because no outcome of the calls left could qualify it."""
CONTRACT_ALLOWED = "verdictgate.contract.allowed"
CONTRACT_REQUIRED = "verdictgate.contract.required"
CONTRACT_CRITICAL = "verdictgate.contract.critical"
CONTRACT_TARGETS = "verdictgate.contract.targets"
CONTRACT_MINIMUM_CASES = "verdictgate.contract.minimum_cases"
CONTRACT_ALLOWED_NO_DECISIONS = "verdictgate.contract.allowed_no_decisions"
TOLERANCE = "verdictgate.tolerance"
METHOD = "verdictgate.method"
"""string: how the run's change rates are judged, `exact` (when absent: the default), `wilson` or `sequential`."""
CLAIM = "verdictgate.claim"
"""string: which verdict gates the run, `tested` (when absent) or `population`."""
CONFIDENCE = "verdictgate.confidence"
DOMINANCE_THRESHOLD = "verdictgate.dominance_threshold"
ISOLATION = "verdictgate.isolation"
PASS_RATE_REQUIRED = "verdictgate.pass_rate.required"
PASS_RATE_WHEN = "verdictgate.pass_rate.when"
"""string: what makes a trial pass for the required rate, `evaluator` (when absent) or
`expected` (its decision equals its case's expected one)."""
MAX_P95_MS = "verdictgate.latency.max_p95_ms"
MAX_P95_TOOL_CALLS = "verdictgate.tool_calls.max_p95"
QUALITY_FAILED = "verdictgate.quality.failed"
RELATIONS_REQUESTED = "verdictgate.relations.requested"
RELATIONS_VIOLATED = "verdictgate.relations.violated"
RELATIONS_HELD = "verdictgate.relations.held"
"""string[]: relation names, and `name=route` pairs where a relation broke or held."""
"""string[]: cases whose first answer missed their expected route (run --quality-gate)."""
RELATIONS_ERRORED = "verdictgate.relations.errored"
"""string[]: `name=route` pairs where a relation could not be checked (a transform or agent
call raised, or the case's first answer errored): a fault, never a violation."""

# Decision span
CASE_ID = "verdictgate.case.id"
CASE_EXPECTED = "verdictgate.case.expected"
CASE_ALIASES = "verdictgate.case.aliases"
"""string[]: further names of the case's input, each an explicit case id or an input
fingerprint (never input text): trials named by any of them are one case (extension)."""
CASE_KEY_ID = "verdictgate.case.key_id"
"""string: the id of the key the trial's `hmac-sha256:` names were made with (16 hex digits of
an HMAC of a fixed label under the key, `fingerprints.key_id`; never the key) (extension)."""
TRIAL = "verdictgate.trial"
OUTCOME = "verdictgate.outcome"
VERDICT = "verdictgate.verdict"
TOOLS = "verdictgate.tools"
NO_DECISION_REASON = "verdictgate.no_decision.reason"
DECISION_RULE = "verdictgate.decision.rule"
"""string: the rule that derived the decision from the agent framework's spans (`tools`,
`toolset`, `agents`, `nodes`, `attribute:KEY`), when one did (extension)."""
ERROR_TYPE = "error.type"
PASSED = "verdictgate.passed"
"""bool: an evaluator's verdict on this trial, when the harness has one (extension)."""
INVARIANT_FAILED = "verdictgate.invariant.failed"
INVARIANT_WARNED = "verdictgate.invariant.warned"
SEMANTIC_SIMILARITY = "verdictgate.semantic.similarity"
"""float: the semantic tier's cosine similarity of the output to the case's reference."""
EVALUATION_SKIPPED = "verdictgate.evaluation.skipped"
"""bool: an expensive tier (semantic, judge) was skipped because a cheaper one failed."""
TIED_STEPS = "verdictgate.decision.tied_steps"
"""int[]: ranges [start, end) of the decided path, flattened (start, end, start, end ...), whose
spans started in the same instant, so their order there is canonical, not observed
(extension)."""

# Admission span
STATUS = "verdictgate.status"
REASONS = "verdictgate.reasons"
STABILITY_RESULT = "verdictgate.stability.result"
STABILITY_PAIRS = "verdictgate.stability.pairs"
STABILITY_FLIPS = "verdictgate.stability.flips"
STABILITY_CI_LOW = "verdictgate.stability.ci_low"
STABILITY_CI_HIGH = "verdictgate.stability.ci_high"
ROUTES_STOCHASTIC = "verdictgate.routes.stochastic"
ROUTES_UNDECIDED = "verdictgate.routes.undecided"
ROUTES_DETERMINISTIC = "verdictgate.routes.deterministic"
TRIALS_EXPECTED = "verdictgate.trials.expected"
TRIALS_RECEIVED = "verdictgate.trials.received"
TRIALS_ERRORS = "verdictgate.trials.errors"
TRIALS_CONFLICTS = "verdictgate.trials.conflicts"
INVARIANTS_BLOCKED = "verdictgate.invariants.blocked"
INVARIANTS_WARNED = "verdictgate.invariants.warned"
PASS_RATE_RESULT = "verdictgate.pass_rate.result"
PASS_RATE_ROUTES_UNRELIABLE = "verdictgate.pass_rate.routes_unreliable"
EVALUATIONS_SKIPPED = "verdictgate.evaluations.skipped"
"""int: trials whose expensive tiers were skipped because a cheaper one failed."""
LATENCY_RESULT = "verdictgate.latency.result"
LATENCY_P95_MS = "verdictgate.latency.p95_ms"
TOOL_CALLS_RESULT = "verdictgate.tool_calls.result"

# Evaluation event (logs API), per the GenAI semantic conventions
EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "gen_ai.evaluation.name"
EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
EVALUATION_NAME_VALUE = "verdictgate.decision_stability"

# Metrics (meter `verdictgate`)
METRIC_ADMISSION = "verdictgate.admission"
METRIC_INCONCLUSIVE = "verdictgate.inconclusive"
METRIC_INCONCLUSIVE_STREAK = "verdictgate.inconclusive.streak"
"""Runs in a row, the latest included, that were inconclusive (0 after any other answer)."""
METRIC_ADMISSION_TIME = "verdictgate.admission.time"
"""Unix seconds of the latest admission: a silent canary shows without relying on staleness."""
METRIC_ADMISSION_RUN = "verdictgate.admission.run"
"""Unix seconds of the latest admission, with its run's id (`verdictgate.run.id`): one series
per suite and point at a time, so an alert can name the run it is about."""
METRIC_CHANGE_RATE_UPPER = "verdictgate.change_rate.upper"
METRIC_TRIALS = "verdictgate.trials"
METRIC_PASS_RATE_LOWER = "verdictgate.pass_rate.lower"
"""Gauge: lower bound of the evaluator pass rate (pooled, and per route)."""
ROUTE = "verdictgate.route"
OTHER_ROUTE = "_other"
"""Metric value of `verdictgate.route` for any route outside the contract."""

SERVICE_NAME = "service.name"

RUN_SPAN_ATTRIBUTES = frozenset(
    {
        RUN_ID,
        SUITE,
        POINT,
        PLAN_CASES,
        PLAN_TRIALS,
        PLAN_SIZED_TRIALS,
        CURTAILED,
        CONTRACT_ALLOWED,
        CONTRACT_REQUIRED,
        CONTRACT_CRITICAL,
        CONTRACT_TARGETS,
        CONTRACT_MINIMUM_CASES,
        CONTRACT_ALLOWED_NO_DECISIONS,
        TOLERANCE,
        METHOD,
        CLAIM,
        CONFIDENCE,
        DOMINANCE_THRESHOLD,
        ISOLATION,
        PASS_RATE_REQUIRED,
        MAX_P95_MS,
        MAX_P95_TOOL_CALLS,
        QUALITY_FAILED,
        RELATIONS_REQUESTED,
        RELATIONS_VIOLATED,
        RELATIONS_HELD,
        RELATIONS_ERRORED,
    }
)
"""What a run span declares; a receiver keeps these and nothing else of it (never content)."""
