"""The small statistics behind every number `coordsim compare` prints
(DESIGN.md §10): a mean with its 95 % confidence interval over repetitions,
the rule that says when a latency percentile has enough samples to be shown,
and the test that says when a difference from a baseline is a regression
rather than noise.

Student's t quantiles come from a table (the two-sided 95 % column of the
NIST/SEMATECH e-Handbook of Statistical Methods, §1.3.6.7.2), interpolated
in 1/df between its rows: the one function of scipy this would need is not
worth a 40 MB dependency.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "MIN_TAIL_SAMPLES",
    "Estimate",
    "Verdict",
    "check_fraction",
    "compare_samples",
    "estimate",
    "percentile_shown",
    "t975",
]

# df -> t such that P(T <= t) = 0.975 (two-sided 95 %).
_T975: Final = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 100: 1.984, 120: 1.980,
}  # fmt: skip
_Z975: Final = 1.960

#: A percentile q is shown only when at least this many samples lie above it
#: (n * (1 - q) >= 10): p50 needs 20 operations, p99 1,000, p99.9 10,000.
#: Fewer, and the "percentile" is one of the few slowest operations, which is
#: what made p99.9 equal p99 equal the maximum in most rows before.
MIN_TAIL_SAMPLES: Final = 10


def check_fraction(name: str, value: float) -> None:
    """`InvalidUsage` unless `value` is a fraction in [0, 1] (a threshold)."""
    from persist.location import InvalidUsage

    if not (math.isfinite(value) and 0 <= value <= 1):
        raise InvalidUsage(f"{name} must be a fraction between 0 and 1, got {value}")


def t975(df: float) -> float:
    """The 97.5 % quantile of Student's t with `df` degrees of freedom (df may
    be fractional, as Welch's is)."""
    if df <= 0 or math.isnan(df):
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if df >= 1e6:
        return _Z975
    keys = sorted(_T975)
    if df <= keys[0]:
        return _T975[keys[0]]
    if df in _T975:
        return _T975[int(df)]
    below = max(k for k in keys if k < df)
    above = min((k for k in keys if k > df), default=None)
    lo_t = _T975[below]
    if above is None:
        hi_key, hi_t = math.inf, _Z975
    else:
        hi_key, hi_t = above, _T975[above]
    # Linear in 1/df, which is how t approaches the normal quantile.
    x, x0, x1 = 1 / df, 1 / below, (0.0 if hi_key == math.inf else 1 / hi_key)
    return hi_t + (lo_t - hi_t) * (x - x1) / (x0 - x1)


@final
@dataclass(frozen=True)
class Estimate:
    """A mean over `n` repetitions with its 95 % confidence half-width
    (`half` is None when n < 2: one sample has no interval)."""

    mean: float
    half: float | None
    n: int
    stdev: float

    @property
    def low(self) -> float:
        return self.mean - (self.half or 0.0)

    @property
    def high(self) -> float:
        return self.mean + (self.half or 0.0)

    def overlaps(self, other: Estimate) -> bool:
        return self.low <= other.high and other.low <= self.high


def estimate(samples: Sequence[float]) -> Estimate:
    """Mean and 95 % confidence interval (Student's t) of `samples`."""
    n = len(samples)
    if n == 0:
        return Estimate(math.nan, None, 0, math.nan)
    mean = statistics.fmean(samples)
    if n < 2:
        return Estimate(mean, None, n, 0.0)
    sd = statistics.stdev(samples)
    return Estimate(mean, t975(n - 1) * sd / math.sqrt(n), n, sd)


def percentile_shown(samples: int, q: float) -> bool:
    """Whether percentile `q` (0-100) of `samples` operations is estimable
    (see `MIN_TAIL_SAMPLES`)."""
    return samples > 0 and samples * (1 - q / 100) >= MIN_TAIL_SAMPLES


@final
@dataclass(frozen=True)
class Verdict:
    """A cell compared against its baseline: the relative change of the mean
    (positive = larger), whether it is worse beyond the threshold and beyond
    the noise, and why."""

    change: float
    regressed: bool
    reason: str


def compare_samples(
    base: Sequence[float], new: Sequence[float], *, threshold: float, higher_is_better: bool
) -> Verdict:
    """Is `new` worse than `base` by more than `threshold` (a fraction) *and*
    by more than the noise?

    The test: Welch's two-sample t interval for the difference of the means
    (unequal variances, since configurations and runs differ in spread) at
    95 %. A regression needs both the point estimate beyond the threshold and
    the whole interval on the worse side of zero: a large difference within
    the noise of either run is not one (that is what made identical code
    "regress" by 50 % before), nor is a significant but small one. With a
    single sample on either side there is no interval and the threshold alone
    decides (the reason says so).
    """
    b, n = estimate(base), estimate(new)
    if not (b.n and n.n) or b.mean == 0:
        return Verdict(0.0, False, "no baseline sample")
    change = (n.mean - b.mean) / abs(b.mean)
    worse = -change if higher_is_better else change
    if worse <= threshold:
        return Verdict(change, False, f"{change:+.1%} within the {threshold:.0%} threshold")
    if b.n < 2 or n.n < 2:
        return Verdict(change, True, f"{change:+.1%} beyond {threshold:.0%} (one sample: no noise estimate)")
    vb, vn = b.stdev**2 / b.n, n.stdev**2 / n.n
    se = math.sqrt(vb + vn)
    if se == 0:
        return Verdict(change, True, f"{change:+.1%} beyond {threshold:.0%}, no variance")
    df = (vb + vn) ** 2 / ((vb**2 / (b.n - 1) if vb else 0.0) + (vn**2 / (n.n - 1) if vn else 0.0))
    half = t975(df) * se
    diff = n.mean - b.mean
    significant = (diff + half < 0) if higher_is_better else (diff - half > 0)
    if not significant:
        return Verdict(change, False, f"{change:+.1%} but within the noise (95 % interval of the difference "
                                      f"{diff - half:+.4g}..{diff + half:+.4g})")  # fmt: skip
    return Verdict(change, True, f"{change:+.1%} beyond {threshold:.0%} and outside the noise")
