"""Change-rate statistics: Wilson and exact (Clopper-Pearson) intervals, the three-way rule, and
how many pairs it takes."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from statistics import NormalDist
from typing import ClassVar

from .eprocess import sequential_evalues, sequential_interval
from .judgement import ALPHA as ALPHA
from .judgement import DEFAULT_METHOD as DEFAULT_METHOD
from .judgement import MAX_SEQUENTIAL_TOLERANCE as MAX_SEQUENTIAL_TOLERANCE
from .judgement import Method as Method
from .judgement import Stability as Stability
from .judgement import check_counts as check_counts
from .judgement import side_error as side_error
from .level_thresholds import stochastic_threshold


@lru_cache(maxsize=32)
def z_score(confidence: float) -> float:
    """The two-sided normal quantile for a confidence (1.959963984540054 at 0.95)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf(1.0 - side_error(confidence))


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Wilson score interval; exactly 0 / 1 at the edges, [0, 1] for no trials."""
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes}/{trials}")
    if trials == 0:
        return 0.0, 1.0
    z = z_score(confidence)
    z2 = z * z
    p = successes / trials
    denominator = 1.0 + z2 / trials
    centre = (p + z2 / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / trials + z2 / (4 * trials * trials)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def score(successes: int, trials: int, p: float) -> float:
    """The score statistic of `successes` in `trials` against a rate `p`: Wilson's interval is
    its inversion, so its one-sided tails are Wilson's p-values."""
    return (successes / trials - p) / math.sqrt(p * (1.0 - p) / trials)


def binomial_cdf(x: int, n: int, p: float) -> float:
    """P(X <= x) for X ~ Binomial(n, p): the regularized incomplete beta I_{1-p}(n - x, x + 1),
    by its continued fraction, so the cost does not grow with n."""
    if x < 0:
        return 0.0
    if x >= n:
        return 1.0
    return regularized_beta(n - x, x + 1, 1.0 - p)


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for a, b > 0 and 0 <= x <= 1 (the continued fraction, evaluated by the modified
    Lentz method on whichever side converges fast)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - regularized_beta(b, a, 1.0 - x)
    log_beta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    log_front = log_beta + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return min(1.0, max(0.0, math.exp(log_front) * fraction / a))


def exact_stability(flips: int, pairs: int, tolerance: float, alpha: float = ALPHA) -> Stability:
    """The exact rule: deterministic iff P(X <= flips; pairs, t) < alpha, stochastic iff
    P(X >= flips; pairs, t) < alpha, else undecided."""
    check_counts(flips, pairs, tolerance)
    if pairs == 0:
        return Stability.UNDECIDED
    if binomial_cdf(flips, pairs, tolerance) < alpha:
        return Stability.DETERMINISTIC
    if upper_tail(flips, pairs, tolerance) < alpha:
        return Stability.STOCHASTIC
    return Stability.UNDECIDED


def upper_tail(x: int, n: int, p: float) -> float:
    """P(X >= x) for X ~ Binomial(n, p), computed as a tail (I_p(x, n - x + 1)), never as one
    minus a number close to 1."""
    if x <= 0:
        return 1.0
    if x > n:
        return 0.0
    return regularized_beta(x, n - x + 1, p)


def exact_pairs_needed(tolerance: float, alpha: float = ALPHA) -> int:
    """Fewest pairs that, all agreeing, the exact rule certifies: (1 - t)^n < alpha. No valid
    rule needs fewer (72 at t = 0.05)."""
    check_counts(0, 0, tolerance)
    n = max(1, math.floor(math.log(alpha) / math.log1p(-tolerance)))
    while (1.0 - tolerance) ** n >= alpha:
        n += 1
    return n


@lru_cache(maxsize=4096)
def clopper_pearson_interval(
    successes: int, trials: int, confidence: float = 0.95
) -> tuple[float, float]:
    """The exact two-sided interval: each end where the binomial tail beyond the observed count
    is (1 - confidence) / 2; exactly 0 / 1 at the edges, [0, 1] for no trials. Remembered: the
    cases of a run share few distinct counts."""
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes}/{trials}")
    alpha = side_error(confidence)
    x, n = successes, trials
    low = 0.0 if x == 0 else _solve(lambda p: upper_tail(x, n, p), _tail_slope(x - 1, n), alpha)
    # P(X <= x; n, p) falls as p rises: its complement, P(X >= x + 1), rises to 1 - alpha
    high = (
        1.0 if x == n else _solve(lambda p: upper_tail(x + 1, n, p), _tail_slope(x, n), 1 - alpha)
    )
    return low, high


def _tail_slope(k: int, n: int) -> Callable[[float], float]:
    """d/dp P(X >= k + 1; n, p) = n C(n - 1, k) p^k (1 - p)^(n - 1 - k), in logs."""
    log_front = math.log(n) + math.lgamma(n) - math.lgamma(k + 1) - math.lgamma(n - k)

    def slope(p: float) -> float:
        return math.exp(log_front + k * math.log(p) + (n - 1 - k) * math.log1p(-p))

    return slope


def _solve(
    rising: Callable[[float], float], slope: Callable[[float], float], target: float
) -> float:
    """The p in (0, 1) where the rising function meets `target`: Newton's steps from the middle,
    each kept inside the bracket that holds the root (a bisection when a step would leave it),
    to the last bit a double holds."""
    low, high, p = 0.0, 1.0, 0.5
    for _ in range(400):
        value = rising(p) - target
        if value == 0:
            return p
        if value < 0:
            low = p
        else:
            high = p
        gradient = slope(p)
        step = p - value / gradient if gradient > 0 else math.nan
        if abs(step - p) <= 1e-15 * p:  # Newton has converged
            return step
        p = step if low < step < high else (low + high) / 2
        if high - low <= 1e-15 * high:
            break
    return p


def classify(ci_low: float, ci_high: float, tolerance: float, pairs: int) -> Stability:
    """Deterministic if ci_high < t, stochastic if ci_low > t, else undecided (strict)."""
    if pairs == 0:
        return Stability.UNDECIDED
    if ci_high < tolerance:
        return Stability.DETERMINISTIC
    if ci_low > tolerance:
        return Stability.STOCHASTIC
    return Stability.UNDECIDED


@dataclass(frozen=True)
class ChangeRate:
    """Flips among rerun pairs, with its interval and result against a tolerance."""

    pairs: int
    flips: int
    ci_low: float
    ci_high: float
    tolerance: float
    result: Stability
    method: Method = DEFAULT_METHOD
    level: float | None = None
    """The level its stochastic side was held to when judged with the run's other tests
    (`family`); None when judged alone, at alpha."""

    REJECTS: ClassVar[Stability] = Stability.STOCHASTIC
    UNDECIDED: ClassVar[Stability] = Stability.UNDECIDED

    @property
    def rate(self) -> float:
        return self.flips / self.pairs if self.pairs else 0.0

    def rejection_p_value(self) -> float:
        """What orders it in a family: the smallest level at which its method would call it
        stochastic (the exact upper tail, Wilson's one-sided score test), or 1 / E_st (the
        sequential rule's threshold at a level is tuned below 1 / level: `rejects_at`)."""
        x, n, t = self.flips, self.pairs, self.tolerance
        if x == 0:
            return 1.0
        if self.method is Method.EXACT:
            return upper_tail(x, n, t)
        if self.method is Method.SEQUENTIAL:
            return min(1.0, 1.0 / sequential_evalues(x, n, t).stochastic)
        return 1.0 - NormalDist().cdf(score(x, n, t))

    def rejects_at(self, level: float) -> bool:
        """Whether its method's rule says stochastic when that side is held to `level` (the
        sequential rule's: E_st at the threshold tuned to `level`, `stochastic_threshold`)."""
        x, n, t = self.flips, self.pairs, self.tolerance
        if n == 0:
            return False
        if self.method is Method.EXACT:
            return upper_tail(x, n, t) < level
        if self.method is Method.SEQUENTIAL:  # stochastic alone, and at its level's threshold
            return self.result is Stability.STOCHASTIC and sequential_evalues(
                x, n, t
            ).stochastic >= stochastic_threshold(t, level, n)
        return wilson_interval(x, n, 1.0 - 2.0 * level)[0] > t


def change_rate(
    flips: int,
    pairs: int,
    tolerance: float,
    confidence: float = 0.95,
    method: Method = DEFAULT_METHOD,
) -> ChangeRate:
    """Judge `flips` changes in `pairs` rerun pairs against a tolerated change rate, by Wilson's
    interval or by the exact rule (with its Clopper-Pearson interval)."""
    if method is Method.EXACT:
        low, high = clopper_pearson_interval(flips, pairs, confidence)
        result = exact_stability(flips, pairs, tolerance, side_error(confidence))
    elif method is Method.SEQUENTIAL:
        alpha = side_error(confidence)
        low, high = sequential_interval(flips, pairs, alpha) if pairs else (0.0, 1.0)
        result = sequential_evalues(flips, pairs, tolerance, alpha).result
    else:
        low, high = wilson_interval(flips, pairs, confidence)
        result = classify(low, high, tolerance, pairs)
    return ChangeRate(pairs, flips, low, high, tolerance, result, method)


def pairs_needed(
    tolerance: float, confidence: float = 0.95, method: Method = DEFAULT_METHOD
) -> int:
    """Smallest number of pairs that, all agreeing, shows the change rate is below tolerance."""
    if not 0.0 < tolerance < 1.0:
        raise ValueError(f"tolerance must be between 0 and 1, got {tolerance}")
    if method is Method.EXACT:
        return exact_pairs_needed(tolerance, side_error(confidence))
    if method is Method.SEQUENTIAL:
        alpha = side_error(confidence)
        return next(
            n
            for n in itertools.count(1)
            if sequential_evalues(0, n, tolerance, alpha).result is Stability.DETERMINISTIC
        )
    z2 = z_score(confidence) ** 2
    n = max(1, math.floor(z2 * (1.0 - tolerance) / tolerance))
    while wilson_interval(0, n, confidence)[1] >= tolerance:
        n += 1
    while n > 1 and wilson_interval(0, n - 1, confidence)[1] < tolerance:
        n -= 1
    return n


def pairs_to_qualify(
    flips: int,
    pairs: int,
    tolerance: float,
    confidence: float = 0.95,
    method: Method = DEFAULT_METHOD,
) -> int | None:
    """Smallest total N >= pairs that could still be deterministic if every later pair agrees.

    None when no number of agreeing pairs can get there (flips make it unreachable).
    """
    if flips < 0 or pairs < flips:
        raise ValueError(f"need 0 <= flips <= pairs, got {flips}/{pairs}")
    if flips == 0:
        return max(pairs, pairs_needed(tolerance, confidence, method))

    def qualifies(total: int) -> bool:
        if method is not Method.WILSON:
            judged = change_rate(flips, total, tolerance, confidence, method)
            return judged.result is Stability.DETERMINISTIC
        return wilson_interval(flips, total, confidence)[1] < tolerance

    low = max(pairs, flips)
    if qualifies(low):
        return low
    high = max(low * 2, 2)
    limit = 1 << 40
    while not qualifies(high):
        high *= 2
        if high > limit:
            return None
    while high - low > 1:
        middle = (low + high) // 2
        if qualifies(middle):
            high = middle
        else:
            low = middle
    return high


class Reliability(str, Enum):
    """What the evidence says about a pass rate against the rate required."""

    RELIABLE = "reliable"
    UNRELIABLE = "unreliable"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class PassRate:
    """Evaluator passes among judged trials, with its interval and result against a required rate."""

    passed: int
    judged: int
    ci_low: float
    ci_high: float
    required: float
    result: Reliability
    method: Method = DEFAULT_METHOD
    level: float | None = None
    """The level its "unreliable" side was held to when judged with the run's other pass rates
    (`family`); None when judged alone, at alpha."""

    REJECTS: ClassVar[Reliability] = Reliability.UNRELIABLE
    UNDECIDED: ClassVar[Reliability] = Reliability.UNDECIDED

    def rejection_p_value(self) -> float:
        """The smallest level at which its rule would call it unreliable: the exact lower tail,
        or Wilson's one-sided score test."""
        x, n, r = self.passed, self.judged, self.required
        if n == 0 or x == n:
            return 1.0
        if judged_once(self.method) is Method.EXACT:
            return binomial_cdf(x, n, r)
        return NormalDist().cdf(score(x, n, r))

    def rejects_at(self, level: float) -> bool:
        """Whether its rule says unreliable when that side is held to `level`."""
        x, n, r = self.passed, self.judged, self.required
        if n == 0:
            return False
        if judged_once(self.method) is Method.EXACT:
            return binomial_cdf(x, n, r) < level
        return wilson_interval(x, n, 1.0 - 2.0 * level)[1] < r


def judged_once(method: Method) -> Method:
    """The rule for counts judged once, at the end (a pass rate): Wilson's under `wilson`, the
    exact rule otherwise."""
    return Method.WILSON if method is Method.WILSON else Method.EXACT


def rate_interval(
    successes: int, trials: int, confidence: float = 0.95, method: Method = DEFAULT_METHOD
) -> tuple[float, float]:
    """A rate's interval by a method's rule for fixed counts: Wilson's under `wilson`, the exact
    (Clopper-Pearson) one otherwise (a pass rate is judged once, at the end)."""
    if method is Method.WILSON:
        return wilson_interval(successes, trials, confidence)
    return clopper_pearson_interval(successes, trials, confidence)


def pass_rate(
    passed: int,
    judged: int,
    required: float,
    confidence: float = 0.95,
    method: Method = DEFAULT_METHOD,
) -> PassRate:
    """Reliable if ci_low > required, unreliable if ci_high < required, else undecided, with
    the method's interval (`rate_interval`): exact, each wrong answer within its bound at every
    n, unless the method is Wilson's."""
    low, high = rate_interval(passed, judged, confidence, method)
    if method is Method.WILSON:
        shown_above, shown_below = judged and low > required, judged and high < required
    else:
        alpha = side_error(confidence)
        shown_above = judged and upper_tail(passed, judged, required) < alpha
        shown_below = judged and binomial_cdf(passed, judged, required) < alpha
    if shown_above:
        result = Reliability.RELIABLE
    elif shown_below:
        result = Reliability.UNRELIABLE
    else:
        result = Reliability.UNDECIDED
    return PassRate(passed, judged, low, high, required, result, judged_once(method))


def trials_needed_for_pass_rate(
    required: float, confidence: float = 0.95, method: Method = DEFAULT_METHOD
) -> int:
    """Smallest number of judged trials that, all passing, shows the pass rate above `required`
    (by symmetry: the pairs that, none flipping, show a change rate below 1 - required)."""
    if not 0.0 < required < 1.0:
        raise ValueError(f"a required pass rate must be between 0 and 1, got {required}")
    return pairs_needed(1.0 - required, confidence, judged_once(method))


class Threshold(str, Enum):
    """Where a p95 interval lies against its threshold."""

    WITHIN = "within"
    """Wholly below it."""
    EXCEEDED = "exceeded"
    """Wholly above it."""
    UNDECIDED = "undecided"
    """It straddles the threshold."""


@dataclass(frozen=True)
class Quantiles:
    """p50 and p95 of a measure over trials (latency in ms, tools per call), each
    (estimate, low, high), and the result against a p95 threshold when one is set."""

    trials: int
    p50: tuple[float, float, float]
    p95: tuple[float, float, float]
    max_p95: float | None
    result: Threshold | None
    """Against the threshold; None without one."""


def quantile_stats(
    values: list[float], max_p95: float | None, confidence: float = 0.95
) -> Quantiles | None:
    """p50 and p95 with distribution-free intervals, judged against a p95 threshold."""
    ordered = sorted(values)
    p50 = quantile_interval(ordered, 0.5, confidence)
    p95 = quantile_interval(ordered, 0.95, confidence)
    if p50 is None or p95 is None:
        return None
    result: Threshold | None = None
    if max_p95 is not None:
        if p95[2] < max_p95:
            result = Threshold.WITHIN
        elif p95[1] > max_p95:
            result = Threshold.EXCEEDED
        else:
            result = Threshold.UNDECIDED
    return Quantiles(len(ordered), p50, p95, max_p95, result)


def difference_interval(
    before: tuple[int, int], after: tuple[int, int], confidence: float = 0.95
) -> tuple[float, float, float] | None:
    """Newcombe's hybrid score interval for after minus before, built from the two Wilson
    intervals: (difference, low, high); None when a side has no trials."""
    (x1, n1), (x2, n2) = before, after
    if n1 == 0 or n2 == 0:
        return None
    p1, p2 = x1 / n1, x2 / n2
    low1, high1 = wilson_interval(x1, n1, confidence)
    low2, high2 = wilson_interval(x2, n2, confidence)
    difference = p2 - p1
    return (
        difference,
        difference - math.sqrt((p2 - low2) ** 2 + (high1 - p1) ** 2),
        difference + math.sqrt((high2 - p2) ** 2 + (p1 - low1) ** 2),
    )


def _rank_bound(n: int, q: float, tail: float) -> int:
    """Smallest k with P(Binomial(n, q) <= k) >= tail (exact below 2,000 samples, normal above)."""
    if n > 2000:
        z = NormalDist().inv_cdf(tail)
        return max(0, min(n, math.ceil(n * q + z * math.sqrt(n * q * (1 - q)) - 0.5)))
    cumulative = 0.0
    log_q, log_rest = math.log(q), math.log1p(-q)
    for k in range(n + 1):
        cumulative += math.exp(
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * log_q
            + (n - k) * log_rest
        )
        if cumulative >= tail:
            return k
    return n


def quantile_interval(
    values: list[float], q: float, confidence: float = 0.95
) -> tuple[float, float, float] | None:
    """(estimate, low, high) for the q-quantile of sorted `values`: a distribution-free interval
    between two order statistics, so it holds whatever the latency distribution. None without
    values; an end is infinite when the sample is too small to bound it."""
    n = len(values)
    if n == 0:
        return None
    if not 0.0 < q < 1.0:
        raise ValueError(f"a quantile must be between 0 and 1, got {q}")
    alpha = 1.0 - confidence
    estimate = values[min(n - 1, max(0, math.ceil(q * n) - 1))]
    lower_rank = _rank_bound(n, q, alpha / 2)  # P(B <= lower_rank - 1) < alpha/2
    upper_rank = _rank_bound(n, q, 1 - alpha / 2) + 1
    low = values[lower_rank - 1] if lower_rank >= 1 else -math.inf
    high = values[upper_rank - 1] if upper_rank <= n else math.inf
    return estimate, low, high
