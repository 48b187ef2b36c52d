"""Keep the C allocator's freed memory for the next request instead of returning it at once.

glibc serves blocks of 128 KiB and more with a fresh `mmap` and gives them back on `free`, and
trims the heap as soon as 128 KiB at its top are free. A receiver handles one body of a few
hundred KiB after another, so every request faulted its pages in again: in a decoder process
that was 180 page faults per 512-span request and a fifth of its time in the kernel. Raising
both thresholds (the mmap one to glibc's maximum) lets freed blocks be reused; the memory kept
is bounded by the largest working set, at most `KEEP_BYTES` of it idle.
"""

from __future__ import annotations

import ctypes
import logging

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_BYTES = 32 << 20
"""Blocks below this come from the heap (glibc's largest allowed threshold on 64-bit)."""
KEEP_BYTES = 64 << 20
"""Free memory at the top of the heap that is kept for reuse rather than trimmed."""


def reuse_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds in this process; False where there is no glibc
    `mallopt` (musl, macOS), which leaves the allocator as it was."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, KEEP_BYTES)
    )
