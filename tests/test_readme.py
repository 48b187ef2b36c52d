"""The README quickstarts print what they say (tests/test_docs.py runs every README block)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, re.S)


def test_the_readme_names_the_two_setup_commands():
    setup = next(body for language, body in BLOCKS if language == "bash")
    assert [line.split()[:2] for line in setup.splitlines()] == [["make", "demo"], ["make", "test"]]


PYTHON_BLOCKS = [
    body for language, body in BLOCKS if language == "python" and "def test_" not in body
]
"""The quickstarts' Python blocks, in order (a pytest test shown beside them is not one)."""


def test_the_python_quickstart_runs(capsys, monkeypatch):
    monkeypatch.delenv("VERDICTGATE_FINGERPRINT_KEY", raising=False)
    exec(compile(PYTHON_BLOCKS[0], "README.md", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "qualified"
    assert printed[1].startswith("Qualified:")


def test_the_opentelemetry_quickstart_runs_and_assesses_the_canary(capsys):
    namespace: dict = {"__name__": "readme"}
    exec(compile(PYTHON_BLOCKS[1], "README.md", "exec"), namespace)
    assert capsys.readouterr().out == "inconclusive 8\n"
    assessment = namespace["processor"].assessment("canary-1")
    assert not assessment.in_progress and assessment.trials.missing == 0
    assert assessment.pooled.pairs == 4
    assert assessment.coverage.observed == ("card_security", "transfer_delay")


def test_the_pytest_snippet_runs_as_pasted(tmp_path):
    """Saved alone as the file its first line names, in a directory of its own, the README's
    pytest test runs and passes through the plugin's `verdict_gate` fixture."""
    (snippet,) = [body for language, body in BLOCKS if language == "python" and "def test_" in body]
    name = re.match(r"# (test_\w+\.py)", snippet)
    assert name is not None, "the snippet's first line names its file"
    (tmp_path / name.group(1)).write_text(snippet)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name.group(1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
