"""How long each extra takes to install with plain pip (the pip a fresh venv ships, and the
newest) and with uv, in fresh virtual environments, without `.ci/constraints.txt`; and which
versions resolve. It needs the package index, so it is not part of `make test`.

    python benchmarks/install.py [--extras strands,langgraph ...] [--timeout 900]

Prints one row per (extras, installer): seconds (or the failure), and the resolved versions of
the packages whose pins the extras' bounds work around.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["", "strands", "langgraph", "openai-agents", "prometheus",
           "strands,langgraph,openai-agents"]  # fmt: skip
WATCHED = ["verdictgate", "opentelemetry-sdk", "opentelemetry-semantic-conventions",
           "opentelemetry-instrumentation-threading", "strands-agents", "langgraph",
           "openai-agents"]  # fmt: skip


def install(venv: Path, installer: str, target: str, timeout: float) -> tuple[str, float]:
    spec = f"{ROOT}[{target}]" if target else str(ROOT)
    python = venv / "bin" / "python"
    if installer == "uv":
        uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
        command = [uv, "pip", "install", "--python", str(python), spec]
    else:
        command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                   spec]  # fmt: skip
    began = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"unresolved after {timeout:.0f} s", time.monotonic() - began
    seconds = time.monotonic() - began
    if done.returncode:
        last = [line for line in done.stderr.splitlines() if line.startswith("ERROR")][-1:]
        return f"failed: {last[0][:90] if last else done.returncode}", seconds
    return "ok", seconds


def versions(venv: Path) -> dict[str, str]:
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format",
                             "json", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    found = {item["name"].lower(): item["version"] for item in json.loads(listed.stdout)}
    return {name: found[name] for name in WATCHED if name in found}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", action="append", help="extras to install (repeatable)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--installers", default="pip-fresh,pip-newest,uv")
    args = parser.parse_args()
    targets = args.extras or TARGETS
    base = Path(tempfile.mkdtemp(prefix="verdictgate-install-"))
    print(f"python {sys.version.split()[0]}; fresh venvs in {base}", flush=True)
    try:
        for target in targets:
            for installer in args.installers.split(","):
                venv = base / f"{installer}-{target or 'core'}".replace(",", "+")
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
                if installer == "pip-newest":
                    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install",
                                    "--quiet", "--disable-pip-version-check", "--upgrade", "pip"],
                                   check=True)  # fmt: skip
                pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"],
                                     capture_output=True, text=True).stdout.split()[1]  # fmt: skip
                outcome, seconds = install(venv, installer, target, args.timeout)
                shown = ", ".join(
                    f"{k} {v}" for k, v in versions(venv).items() if k != "verdictgate"
                )
                label = "uv" if installer == "uv" else f"pip {pip}"
                print(f"[{target or 'core'}] {label}: {outcome} in {seconds:.0f} s; {shown}",
                      flush=True)  # fmt: skip
                shutil.rmtree(venv, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
