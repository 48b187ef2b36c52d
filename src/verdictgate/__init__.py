"""verdictgate: is an agent's test run repeatable and broad enough to become a regression baseline?

import verdictgate

suite = verdictgate.load_suite("examples/payment_suite.json")
assessment = verdictgate.run(my_router, suite)
print(assessment.status, assessment.headline)
"""

from .agent import Agent, from_callable, from_factory
from .assessment import Assessment, Isolation, RunInfo, Status
from .engine import assess
from .errors import InputError, PlanError, VerdictgateError
from .evidence import Evidence
from .fingerprint import fingerprint
from .instrument import decision, decision_point, evaluation_run, trial
from .plan import RunPlan, plan_run
from .policy import PRECISION_PRESETS, Policy
from .processor import EvidenceProcessor
from .publish import Publisher
from .runner import run
from .stats import Stability, change_rate, pairs_needed, pairs_to_qualify, wilson_interval
from .suite import Case, Contract, Suite
from .suite_file import load_suite
from .telemetry import Telemetry
from .trial import NoDecision, Outcome, Trial
from .trials_file import read_trials

__all__ = [
    "PRECISION_PRESETS",
    "Agent",
    "Assessment",
    "Case",
    "Contract",
    "Evidence",
    "EvidenceProcessor",
    "InputError",
    "Isolation",
    "NoDecision",
    "Outcome",
    "PlanError",
    "Policy",
    "Publisher",
    "RunInfo",
    "RunPlan",
    "Stability",
    "Status",
    "Suite",
    "Telemetry",
    "Trial",
    "VerdictgateError",
    "assess",
    "change_rate",
    "decision",
    "decision_point",
    "evaluation_run",
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
    "wilson_interval",
]
