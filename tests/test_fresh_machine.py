"""A fresh machine with nothing but Python: `make test` passes there with each component's
steps skipped by name (and fails in CI, which installs them), and `make semantic` resolves
against PyPI alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASICS = ("sh", "bash", "mkdir", "cp", "cat", "env", "ls", "rm")
"""Commands every machine has, without the Debian packages .ci/run installs."""


def run_alerting_doc(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    """The alerting page's doc test on a PATH that holds only the basics and the venv."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for name in BASICS:
        for folder in ("/usr/bin", "/bin"):
            if os.path.exists(f"{folder}/{name}"):
                (bare / name).symlink_to(f"{folder}/{name}")
                break
    environment = {key: value for key, value in os.environ.items() if key != "CI"}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{bare}"
    if ci:
        environment["CI"] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"]
    command += ["tests/test_docs.py", "-k", "alerting.md", "-p", "no:xdist"]
    return subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300
    )


def test_the_alerting_doc_skips_promtool_by_name_where_it_is_missing(tmp_path: Path) -> None:
    result = run_alerting_doc(tmp_path, ci=False)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "promtool is not installed (Debian packages: see .ci/run)" in result.stdout
    assert "amtool is not installed" in result.stdout


def test_in_ci_a_missing_promtool_fails_the_alerting_doc(tmp_path: Path) -> None:
    result = run_alerting_doc(tmp_path, ci=True)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "promtool is not installed" in result.stdout and ".ci/run installs it" in result.stdout


PINNED = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)$")


def test_every_pinned_version_is_one_a_plain_index_serves() -> None:
    """A pin with a local label (`torch==2.13.0+cpu`) resolves only where that build lies at
    hand; a public version matches the local builds too (PEP 440), so the CPU build is still
    taken where an index or folder serves it."""
    pins = [
        match.groups()
        for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines()
        if (match := PINNED.match(line.strip()))
    ]
    assert ("torch", "2.13.0") in pins
    assert [name for name, version in pins if "+" in version] == []


@pytest.mark.parametrize("page", ["README.md", "docs/tiers.md"])
def test_the_cpu_index_of_torch_is_named_with_how_to_pass_it(page: str) -> None:
    text = (ROOT / page).read_text()
    assert "make semantic TORCH_INDEX=https://download.pytorch.org/whl/cpu" in text
