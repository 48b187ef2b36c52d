"""The receiver's processes reuse freed memory instead of faulting it in again per request."""

from __future__ import annotations

import subprocess
import sys

import pytest

FAULTS_OF_BODIES = """
import resource, sys
from verdictgate.receiver.allocator import reuse_freed_memory
if sys.argv[1] == "reuse":
    assert reuse_freed_memory()
def body(n):
    return bytes(300_000) + n.to_bytes(4, "big")  # a request body: one 300 KB block
for n in range(20):
    body(n)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for n in range(500):
    body(n)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", FAULTS_OF_BODIES, mode], capture_output=True, text=True, check=True
    )
    return int(result.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_blocks_are_reused_not_faulted_in_again() -> None:
    assert faults("default") > 500 * 10  # each body a fresh mapping: its pages faulted in
    assert faults("reuse") < 100


def test_decoder_workers_start_with_reuse() -> None:
    from verdictgate.receiver.decoding import Decoder

    decoder = Decoder(1)
    try:
        assert decoder._pool is not None
        assert decoder._pool._initializer.__name__ == "reuse_freed_memory"
    finally:
        decoder.close()
