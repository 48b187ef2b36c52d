"""The receiver's processes reuse freed memory instead of faulting it in again per request.

How many page faults that saves is a figure, not a test: `benchmarks/allocator.py` prints it."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAP_AROUND_BODIES = """
import ctypes, sys
from verdictgate.receiver.ingest.allocator import reuse_freed_memory
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
if not hasattr(libc, "mallinfo2"):
    print("no mallinfo2")
    sys.exit(0)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "reuse":
    assert reuse_freed_memory()
def body(n):
    return bytes(300_000) + n.to_bytes(4, "big")  # a request body: one 300 KB block
for n in range(20):
    body(n)
held = [body(n) for n in range(8)]
while_held = libc.mallinfo2().arena  # bytes of the heap, glibc's own count
del held
print(while_held, libc.mallinfo2().arena)
"""


def heap_around_bodies(mode: str) -> tuple[int, int]:
    """The heap's size while eight request bodies are held, and once they are freed."""
    result = subprocess.run(
        [sys.executable, "-c", HEAP_AROUND_BODIES, mode], capture_output=True, text=True, check=True
    )
    if result.stdout.strip() == "no mallinfo2":
        pytest.skip("glibc before 2.33 has no mallinfo2")
    held, freed = map(int, result.stdout.split())
    return held, freed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_blocks_are_reused_not_faulted_in_again() -> None:
    held, freed = heap_around_bodies("default")
    assert freed < held  # glibc gives the blocks back: the next body faults its pages in again
    held, freed = heap_around_bodies("reuse")
    assert freed >= held  # kept in the heap for the next body


def test_decoder_workers_start_with_reuse() -> None:
    from verdictgate.receiver.ingest.allocator import reuse_freed_memory
    from verdictgate.receiver.ingest.decoding import Decoder

    decoder = Decoder(1)
    try:
        assert decoder.worker_initializer is reuse_freed_memory
    finally:
        decoder.close()
    assert Decoder(0).worker_initializer is None  # decoding inline: no worker to start
