"""A distribution-free interval for the median of a few paired measurements: the order
statistics whose binomial coverage is at least the level asked for (no assumption on how a
noisy machine's passes spread)."""

from __future__ import annotations

from math import comb


def median_interval(values: list[float], level: float = 0.9) -> tuple[float, float]:
    """The narrowest symmetric pair of order statistics (k-th smallest, k-th largest) that
    covers the median of what `values` were drawn from with probability at least `level`; the
    smallest and largest when too few passes reach it."""
    ordered = sorted(values)
    n = len(ordered)
    for k in range(n // 2, 0, -1):
        # P(X_(k) <= median <= X_(n-k+1)) = 1 - 2 P(Binomial(n, 1/2) < k)
        if 1 - 2 * sum(comb(n, i) for i in range(k)) / 2**n >= level:
            return ordered[k - 1], ordered[n - k]
    return ordered[0], ordered[-1]
