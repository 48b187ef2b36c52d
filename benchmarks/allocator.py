"""Page faults of request bodies with glibc's default allocator and with freed memory kept for
reuse (`verdictgate.receiver.ingest.allocator.reuse_freed_memory`, what `serve` and its decoder
workers switch on).

Each mode runs in a fresh process: 20 bodies of 300 KB (one block each, as a request body is)
to warm up, then `--bodies` more, counting the process's minor page faults (getrusage) over
those. The default allocator serves each body with memory it has just given back, so its
pages are faulted in again; with reuse, the memory stays mapped. Linux with glibc only.

    python benchmarks/allocator.py [--bodies 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

FAULTS_OF_BODIES = """
import resource, sys
from verdictgate.receiver.ingest.allocator import reuse_freed_memory
if sys.argv[1] == "reuse" and not reuse_freed_memory():
    sys.exit("no glibc mallopt here: reuse cannot be switched on")
def body(n):
    return bytes(300_000) + n.to_bytes(4, "big")  # a request body: one 300 KB block
for n in range(20):
    body(n)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for n in range(int(sys.argv[2])):
    body(n)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str, bodies: int) -> int:
    result = subprocess.run(
        [sys.executable, "-c", FAULTS_OF_BODIES, mode, str(bodies)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"minor page faults over {args.bodies} bodies of 300 KB (median of {args.repeats}):")
    for mode, label in (("default", "glibc's default"), ("reuse", "reuse_freed_memory()")):
        counts = [faults(mode, args.bodies) for _ in range(args.repeats)]
        median = statistics.median(counts)
        print(
            f"  {label:<22} {median:>8,.0f}  ({median / args.bodies:.1f} a body; "
            f"runs: {', '.join(f'{count:,}' for count in counts)})"
        )


if __name__ == "__main__":
    main()
