"""A gated pytest test that fails: the flipping router's card_security route changes between
reruns, so the run is rejected, and the test fails with the report's headline, reasons and next
steps.

    pytest examples/test_flipping_router.py
"""

from pathlib import Path

from payment_router import flipping_router

import verdictgate

SUITE = verdictgate.load_suite(Path(__file__).with_name("payment_suite.json"))


def test_the_flipping_router_is_admitted(verdict_gate):
    verdict_gate.run(flipping_router(), SUITE)
