"""With content capture on in every framework, nothing verdictgate exports or stores holds
the agent's input, its tool arguments or its output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from framework_support import SECRET_ARGUMENT, SECRET_INPUT, SECRET_OUTPUT

HERE = Path(__file__).parent


def test_no_input_argument_or_output_text_leaves_through_verdictgate() -> None:
    result = subprocess.run(
        [sys.executable, str(HERE / "framework_privacy_run.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
        timeout=300,
    )
    found = json.loads(result.stdout)
    framework = "\n".join(found["framework"])
    for secret in (SECRET_INPUT, SECRET_ARGUMENT, SECRET_OUTPUT):
        assert secret in framework  # the frameworks did capture content ...
    exported = "\n".join(found["exported"])
    assert "decide router" in exported and "verdictgate.admission" in exported
    for secret in (SECRET_INPUT, SECRET_ARGUMENT, SECRET_OUTPUT, "acct-7731"):
        assert secret not in exported  # ... and none of it reached verdictgate's outputs
