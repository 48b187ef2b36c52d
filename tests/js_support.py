"""The OpenTelemetry JS SDK as a client (tests/js_client): Node.js from `VERDICTGATE_NODE`
(`.ci/run` sets it to Node.js 22 from the npm registry) or else the machine's, the SDK's
packages from the npm registry, installed once per lock file into a cache outside the
checkout."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from components import binary, unavailable

CLIENT = Path(__file__).with_name("js_client")
MINIMUM_NODE = (18, 19)
"""The SDK line pinned in js_client/package.json declares Node.js ^18.19 or >=20.6 (Debian
bookworm's `nodejs` is 18.20)."""


def js_client() -> tuple[str, Path]:
    """(node, the client script), its packages installed: a failure in CI, else a skip, when
    Node.js or npm is missing or too old."""
    node = os.environ.get("VERDICTGATE_NODE") or binary("node")
    npm = binary("npm")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    found = tuple(int(part) for part in version.stdout.strip().lstrip("v").split(".")[:2])
    if found < MINIMUM_NODE:
        unavailable(f"Node.js {version.stdout.strip()} is older than 18.19")
    lock = (CLIENT / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    work = cache / "verdictgate-tests" / f"js-client-{hashlib.sha256(lock).hexdigest()[:12]}"
    if not (work / "node_modules").is_dir():  # installed whole, then moved in place
        work.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="js-client-", dir=work.parent))
        for name in ("package.json", "package-lock.json"):
            shutil.copy(CLIENT / name, staging / name)
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=staging,
            check=True,
            capture_output=True,
            timeout=600,
        )
        try:
            staging.rename(work)
        except OSError:  # another run installed it first
            shutil.rmtree(staging, ignore_errors=True)
    shutil.copy(CLIENT / "send.mjs", work / "send.mjs")
    return node, work / "send.mjs"
