"""verdictgate: is an agent's test run repeatable and broad enough to become a regression baseline?

import verdictgate

suite = verdictgate.load_suite("examples/payment_suite.json")
assessment = verdictgate.run(my_router, suite)
print(assessment.status, assessment.headline)
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .assessment import Assessment, Isolation, RunInfo, Status
    from .clock import ManualClock
    from .engine import assess
    from .errors import InputError, PlanError, VerdictgateError
    from .evidence import Evidence
    from .fingerprints import fingerprint
    from .importers.deepeval import evidence_from_deepeval
    from .otel.instrument import decision, decision_point, evaluation_run, trial, trial_span
    from .otel.processor import EvidenceProcessor
    from .otel.publisher import Publisher
    from .otel.telemetry import Telemetry
    from .plan import RunPlan, plan_run
    from .policy import PRECISION_PRESETS, Claim, Policy
    from .runner.agent import Agent, from_callable, from_factory
    from .runner.run_options import RunOptions
    from .runner.runner import run
    from .stats import (
        Method,
        Stability,
        change_rate,
        pairs_needed,
        pairs_to_qualify,
        wilson_interval,
    )
    from .suite import Case, Contract, Suite
    from .suite_file import load_suite
    from .tiers.invariants import Invariant
    from .tiers.relations import Relation
    from .tiers.semantic import SemanticCheck, calibrate
    from .trial_model import NoDecision, Outcome, Trial
    from .trials_file import read_trials

_EXPORTS: dict[str, str] = {
    "Agent": "runner.agent",
    "Assessment": "assessment",
    "Case": "suite",
    "Claim": "policy",
    "Contract": "suite",
    "Evidence": "evidence",
    "EvidenceProcessor": "otel.processor",
    "ManualClock": "clock",
    "InputError": "errors",
    "Invariant": "tiers.invariants",
    "Isolation": "assessment",
    "Method": "stats",
    "NoDecision": "trial_model",
    "Outcome": "trial_model",
    "PRECISION_PRESETS": "policy",
    "PlanError": "errors",
    "Policy": "policy",
    "Publisher": "otel.publisher",
    "Relation": "tiers.relations",
    "RunInfo": "assessment",
    "RunPlan": "plan",
    "SemanticCheck": "tiers.semantic",
    "Stability": "stats",
    "Status": "assessment",
    "Suite": "suite",
    "Telemetry": "otel.telemetry",
    "Trial": "trial_model",
    "VerdictgateError": "errors",
    "assess": "engine",
    "calibrate": "tiers.semantic",
    "change_rate": "stats",
    "decision": "otel.instrument",
    "decision_point": "otel.instrument",
    "evaluation_run": "otel.instrument",
    "evidence_from_deepeval": "importers.deepeval",
    "fingerprint": "fingerprints",
    "from_callable": "runner.agent",
    "from_factory": "runner.agent",
    "load_suite": "suite_file",
    "pairs_needed": "stats",
    "pairs_to_qualify": "stats",
    "plan_run": "plan",
    "read_trials": "trials_file",
    "run": "runner.runner",
    "RunOptions": "runner.run_options",
    "trial": "otel.instrument",
    "trial_span": "otel.instrument",
    "wilson_interval": "stats",
}
"""Public name -> module. Loaded on first use, so `import verdictgate` for the decorator
costs only the OpenTelemetry API; the SDK comes in with the processor or the runner."""


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'verdictgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "PRECISION_PRESETS",
    "Agent",
    "Assessment",
    "Case",
    "Claim",
    "Contract",
    "Evidence",
    "EvidenceProcessor",
    "InputError",
    "Invariant",
    "Isolation",
    "ManualClock",
    "Method",
    "NoDecision",
    "Outcome",
    "PlanError",
    "Policy",
    "Publisher",
    "Relation",
    "RunInfo",
    "RunOptions",
    "RunPlan",
    "SemanticCheck",
    "Stability",
    "Status",
    "Suite",
    "Telemetry",
    "Trial",
    "VerdictgateError",
    "assess",
    "calibrate",
    "change_rate",
    "decision",
    "decision_point",
    "evaluation_run",
    "evidence_from_deepeval",
    "fingerprint",
    "from_callable",
    "from_factory",
    "load_suite",
    "pairs_needed",
    "pairs_to_qualify",
    "plan_run",
    "read_trials",
    "run",
    "trial",
    "trial_span",
    "wilson_interval",
]
