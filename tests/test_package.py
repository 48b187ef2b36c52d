"""The package as a user gets it: `python -m build` makes the sdist and, from it, the wheel;
the wheel installs in a fresh virtual environment and runs the CLI, the demo's run and the
pytest plugin, with its package data and its SPDX license."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*command: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done


def test_the_built_wheel_installs_in_a_fresh_venv_and_runs_the_cli_the_demo_and_the_plugin(
    tmp_path,
):
    out = tmp_path / "dist"
    built = run(sys.executable, "-m", "build", "--outdir", out, ROOT)  # sdist, then its wheel
    assert "deprecated" not in built.stdout + built.stderr.lower().replace("byte-compiling", "")
    [sdist] = out.glob("verdictgate-*.tar.gz")
    [wheel] = out.glob("verdictgate-*-py3-none-any.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel, "pytest")
    assert "Admit or refuse" in run(venv / "bin" / "verdictgate", "--help").stdout
    demo = run(
        venv / "bin" / "verdictgate",
        "run",
        "--agent",
        "examples/payment_router.py:stable_router",
        "--suite",
        "examples/payment_suite.json",
        "--isolation",
        "fresh-instance",
    )
    assert "Qualified" in demo.stdout
    plugin = run(python, "-m", "pytest", "-p", "no:cacheprovider", "examples/test_stable_router.py")
    assert (
        "1 passed" in plugin.stdout
        and "qualified    examples/test_stable_router.py" in plugin.stdout
    )
    checked = run(
        python,
        "-c",
        (
            "import importlib.metadata as m, pathlib, verdictgate\n"
            "package = pathlib.Path(verdictgate.__file__).parent\n"
            "assert (package / 'py.typed').exists() and list((package / 'v1').glob('*.pyi'))\n"
            "print(m.metadata('verdictgate')['License-Expression'])"
        ),
        cwd=tmp_path,
    )
    assert checked.stdout.strip() == "Apache-2.0"
    assert sdist.stat().st_size > 0
