"""verdictgate: is an agent's test run repeatable and broad enough to become a regression baseline?

import verdictgate

suite = verdictgate.load_suite("examples/payment_suite.json")
assessment = verdictgate.run(my_router, suite)
print(assessment.status, assessment.headline)
print(verdictgate.render(assessment, "markdown"))

The public API is exactly what this module exports (`__all__`, listed in docs/api.md); every
submodule is internal and may change between releases.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

if _TYPE_CHECKING:  # the public surface for type checkers; `_EXPORTS` loads it at run time
    from .assessment import Assessment as Assessment
    from .assessment import Isolation as Isolation
    from .assessment import RunInfo as RunInfo
    from .assessment import Status as Status
    from .baseline import Baseline as Baseline
    from .baseline import Regression as Regression
    from .baseline import check as check
    from .baseline import load_baseline as load_baseline
    from .baseline import snapshot as snapshot
    from .clock import ManualClock as ManualClock
    from .decision_rules import DecisionRule as DecisionRule
    from .drift import Comparison as Comparison
    from .drift import compare as compare
    from .engine import assess as assess
    from .errors import InputError as InputError
    from .errors import InvalidDecision as InvalidDecision
    from .errors import MissingVerdict as MissingVerdict
    from .errors import PlanError as PlanError
    from .errors import SemanticUnavailable as SemanticUnavailable
    from .errors import SnapshotRefused as SnapshotRefused
    from .errors import TrialIndexError as TrialIndexError
    from .errors import VerdictgateError as VerdictgateError
    from .evidence import Evidence as Evidence
    from .fingerprints import fingerprint as fingerprint
    from .frameworks.crewai import crewai_below_current_span as crewai_below_current_span
    from .frameworks.crewai import from_crewai as from_crewai
    from .frameworks.langgraph import from_langgraph as from_langgraph
    from .frameworks.openai_agents import from_openai_agents as from_openai_agents
    from .frameworks.strands import from_strands as from_strands
    from .frameworks.verdicts import read_verdict as read_verdict
    from .importers import Imported as Imported
    from .importers import evidence_from_agentverity as evidence_from_agentverity
    from .importers import evidence_from_promptfoo as evidence_from_promptfoo
    from .importers.deepeval import evidence_from_deepeval as evidence_from_deepeval
    from .otel.instrument import decision as decision
    from .otel.instrument import decision_point as decision_point
    from .otel.instrument import evaluation_run as evaluation_run
    from .otel.instrument import trial as trial
    from .otel.instrument import trial_span as trial_span
    from .otel.processor import EvidenceProcessor as EvidenceProcessor
    from .otel.publisher import Publisher as Publisher
    from .otel.telemetry import Telemetry as Telemetry
    from .plan import RunPlan as RunPlan
    from .plan import plan_run as plan_run
    from .policy import PRECISION_PRESETS as PRECISION_PRESETS
    from .policy import Claim as Claim
    from .policy import Policy as Policy
    from .reports import render as render
    from .runner.agent import Agent as Agent
    from .runner.agent import from_callable as from_callable
    from .runner.agent import from_factory as from_factory
    from .runner.run_options import RunOptions as RunOptions
    from .runner.suite_run import TrialSink as TrialSink
    from .runner.suite_run import run as run
    from .stats import ChangeRate as ChangeRate
    from .stats import Method as Method
    from .stats import Stability as Stability
    from .stats import change_rate as change_rate
    from .stats import pairs_needed as pairs_needed
    from .stats import pairs_to_qualify as pairs_to_qualify
    from .stats import wilson_interval as wilson_interval
    from .suite import Calibration as Calibration
    from .suite import Case as Case
    from .suite import Contract as Contract
    from .suite import Suite as Suite
    from .suite_file import load_suite as load_suite
    from .tiers.invariants import Invariant as Invariant
    from .tiers.invariants import Severity as Severity
    from .tiers.relations import Relation as Relation
    from .tiers.semantic import SemanticCheck as SemanticCheck
    from .tiers.semantic import calibrate as calibrate
    from .trial_model import NoDecision as NoDecision
    from .trial_model import Outcome as Outcome
    from .trial_model import Trial as Trial
    from .trials_file import TrialsSummary as TrialsSummary
    from .trials_file import read_trials as read_trials


_EXPORTS: dict[str, str] = {  # tests/test_public_api.py holds it equal to the block above
    "Assessment": "assessment",
    "Isolation": "assessment",
    "RunInfo": "assessment",
    "Status": "assessment",
    "Baseline": "baseline",
    "Regression": "baseline",
    "check": "baseline",
    "load_baseline": "baseline",
    "snapshot": "baseline",
    "ManualClock": "clock",
    "DecisionRule": "decision_rules",
    "Comparison": "drift",
    "compare": "drift",
    "assess": "engine",
    "InputError": "errors",
    "InvalidDecision": "errors",
    "MissingVerdict": "errors",
    "PlanError": "errors",
    "SemanticUnavailable": "errors",
    "SnapshotRefused": "errors",
    "TrialIndexError": "errors",
    "VerdictgateError": "errors",
    "Evidence": "evidence",
    "fingerprint": "fingerprints",
    "crewai_below_current_span": "frameworks.crewai",
    "from_crewai": "frameworks.crewai",
    "from_langgraph": "frameworks.langgraph",
    "from_openai_agents": "frameworks.openai_agents",
    "from_strands": "frameworks.strands",
    "read_verdict": "frameworks.verdicts",
    "Imported": "importers",
    "evidence_from_agentverity": "importers",
    "evidence_from_promptfoo": "importers",
    "evidence_from_deepeval": "importers.deepeval",
    "decision": "otel.instrument",
    "decision_point": "otel.instrument",
    "evaluation_run": "otel.instrument",
    "trial": "otel.instrument",
    "trial_span": "otel.instrument",
    "EvidenceProcessor": "otel.processor",
    "Publisher": "otel.publisher",
    "Telemetry": "otel.telemetry",
    "RunPlan": "plan",
    "plan_run": "plan",
    "PRECISION_PRESETS": "policy",
    "Claim": "policy",
    "Policy": "policy",
    "render": "reports",
    "Agent": "runner.agent",
    "from_callable": "runner.agent",
    "from_factory": "runner.agent",
    "RunOptions": "runner.run_options",
    "TrialSink": "runner.suite_run",
    "run": "runner.suite_run",
    "ChangeRate": "stats",
    "Method": "stats",
    "Stability": "stats",
    "change_rate": "stats",
    "pairs_needed": "stats",
    "pairs_to_qualify": "stats",
    "wilson_interval": "stats",
    "Calibration": "suite",
    "Case": "suite",
    "Contract": "suite",
    "Suite": "suite",
    "load_suite": "suite_file",
    "Invariant": "tiers.invariants",
    "Severity": "tiers.invariants",
    "Relation": "tiers.relations",
    "SemanticCheck": "tiers.semantic",
    "calibrate": "tiers.semantic",
    "NoDecision": "trial_model",
    "Outcome": "trial_model",
    "Trial": "trial_model",
    "TrialsSummary": "trials_file",
    "read_trials": "trials_file",
}
"""Each public name -> the module that defines it, loaded on first use, so `import verdictgate` for the decorator costs only the OpenTelemetry
API; the SDK comes in with the processor or the runner, a framework with its adapter."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'verdictgate' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
