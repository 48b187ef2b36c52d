"""A gated pytest test: the stable payment router is admitted as a regression baseline.

    pytest examples/test_stable_router.py

The `verdict_gate` fixture comes with verdictgate (its pytest plugin): the test runs the router
over the suite as often as the policy needs and fails unless the run is qualified.
"""

from pathlib import Path

from payment_router import stable_router

import verdictgate

SUITE = verdictgate.load_suite(Path(__file__).with_name("payment_suite.json"))


def test_the_stable_router_is_admitted(verdict_gate):
    assessment = verdict_gate.run(stable_router(), SUITE)
    assert assessment.pooled.flips == 0
