"""What a process costs, read from `/proc`: its CPU seconds, its children, and a process tree's
CPU counted so that children that end between two readings keep what they used."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (None once the process is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process used so far (0 once it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> set[int]:
    """The process's children, as they stand now."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                found.update(int(child) for child in text.split())
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds a process and its children used so far: its own, its ended and reaped
    children's (which the kernel adds to it), and its live children's. A child that ends
    between two readings moves from the last term to the second, so a difference of two
    readings counts it once."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return cpu_seconds(pid) + reaped + sum(cpu_seconds(child) for child in children_of(pid))
