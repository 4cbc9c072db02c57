"""The small statistics behind every number `coordsim compare` prints
(DESIGN.md §10): a mean with its 95 % confidence interval over repetitions,
the rule that says when a latency percentile has enough samples to be shown,
and the test that says when a difference from a baseline is a regression
rather than noise.

The regression test (`compare_samples`, then `holm` over the whole run): a
cell regresses only when its mean is worse than the baseline's by more than
the threshold *and* Welch's t-test (unequal variances: runs and
configurations differ in spread) rejects "not worse" once Holm-Bonferroni
has corrected for every comparison the run made, at family-wise alpha = 0.05.
Why: the threshold, because a significant but small change is not worth
failing a run for; the test, because a large change within the noise is not
one (the repetitions are whole passes on fresh deployments, `sim.compare.runner`, so
the noise it sees is the run-to-run one); Holm, because a `--baseline` run
makes ~120 comparisons, and at 95 % each a few of them cross any line by
chance alone (unchanged code "regressed" on 6 to 13 cells per run before).
Holm bounds the chance of *any* false flag in the run at 5 % whatever the
dependence between the cells, and is uniformly more powerful than plain
Bonferroni. The p-value is one-sided (a regression has a direction; an
improvement is never flagged). Its price is power: with 3
repetitions a side (df ≈ 4) and ~120 comparisons, a real change must be
about 9 standard errors of the difference to be flagged (about 5 with
`--repeat 5`), so repeat more when hunting small regressions.

Student's t quantiles come from a table (the two-sided 95 % column of the
NIST/SEMATECH e-Handbook of Statistical Methods, §1.3.6.7.2), interpolated
in 1/df between its rows; its tail probabilities from the regularized
incomplete beta function, evaluated by its continued fraction with Lentz's
method (Numerical Recipes §6.4): the two functions of scipy this would need
are not worth a 40 MB dependency.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "FAMILY_ALPHA",
    "MIN_TAIL_SAMPLES",
    "Estimate",
    "Verdict",
    "betainc",
    "check_fraction",
    "compare_samples",
    "estimate",
    "holm",
    "holm_family",
    "percentile_shown",
    "t975",
    "t_sf",
]

# df -> t such that P(T <= t) = 0.975 (two-sided 95 %).
_T975: Final = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 100: 1.984, 120: 1.980,
}
_Z975: Final = 1.960

#: A percentile q is shown only when at least this many samples lie above it
#: (n * (1 - q) >= 10): p50 needs 20 operations, p99 1,000, p99.9 10,000.
#: Fewer, and the "percentile" is one of the few slowest operations, which is
#: what made p99.9 equal p99 equal the maximum in most rows before.
MIN_TAIL_SAMPLES: Final = 10


def check_fraction(name: str, value: float) -> None:
    """`InvalidUsage` unless `value` is a fraction in [0, 1] (a threshold)."""
    from sim.runtime.errors import InvalidUsage

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


#: `--baseline`'s family-wise error rate: the chance that a run of unchanged
#: code flags any cell at all.
FAMILY_ALPHA: Final = 0.05

_BETA_EPS: Final = 1e-15
_BETA_TINY: Final = 1e-300
_BETA_MAX_ITER: Final = 10_000


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1.

    Its continued fraction (Numerical Recipes §6.4, after Abramowitz & Stegun
    26.5.8) evaluated with the modified Lentz method, on whichever of x and
    1 - x makes it converge fast (via I_x(a, b) = 1 - I_{1-x}(b, a)); it takes
    O(sqrt(max(a, b))) terms.

    Raises:
        ValueError: an argument out of range, or no convergence.
    """
    if not (a > 0 and b > 0 and 0 <= x <= 1):
        raise ValueError(f"betainc needs a, b > 0 and 0 <= x <= 1, got {a}, {b}, {x}")
    if x == 0 or x == 1:
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    def nonzero(v: float) -> float:
        return v if abs(v) >= _BETA_TINY else _BETA_TINY

    c = 1.0
    d = 1.0 / nonzero(1 - (a + b) * x / (a + 1))
    h = d
    for m in range(1, _BETA_MAX_ITER + 1):
        # The even term d_2m, then the odd term d_2m+1 of the fraction.
        for coef in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 / nonzero(1 + coef * d)
            c = nonzero(1 + coef / c)
            h *= d * c
        if abs(d * c - 1) < _BETA_EPS:
            return h
    raise ValueError(f"betainc({a}, {b}, {x}) did not converge")


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom (df may be
    fractional, as Welch's is): I_{df/(df+t²)}(df/2, 1/2) / 2 for t >= 0."""
    if df <= 0 or math.isnan(df) or math.isnan(t):
        raise ValueError(f"t_sf needs df > 0 and a number, got t={t}, df={df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def holm(p_values: Sequence[float], *, alpha: float = FAMILY_ALPHA) -> list[float]:
    """Holm-Bonferroni: each p-value adjusted for the whole family, in the
    given order; hypothesis i is rejected at family-wise `alpha` iff its
    adjusted value is <= alpha.

    The step-down procedure: the k-th smallest of m p-values is compared with
    alpha / (m - k + 1), stopping at the first that is not below its line; as
    adjusted values, max over j <= k of min(1, (m - j + 1) p_(j)). It holds the
    family-wise error rate at `alpha` whatever the dependence between tests.
    """
    check_fraction("alpha", alpha)
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (p_values[i], i))
    adjusted = [1.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p_values[i]))
        adjusted[i] = running
    return adjusted


@final
@dataclass(frozen=True)
class Verdict:
    """A cell compared against its baseline: the relative change of the mean
    (positive = larger), whether it is worse beyond the threshold and beyond
    the noise, and why. `p_value` is Welch's one-sided p for "worse" (None
    when a side has one sample: no test); `beyond` says whether the change is
    beyond the threshold in the worse direction. `regressed` is the verdict
    of this one comparison at `FAMILY_ALPHA`; `holm_family` re-decides it for
    a run's comparisons together."""

    change: float
    regressed: bool
    reason: str
    p_value: float | None = None
    beyond: bool = False


def compare_samples(
    base: Sequence[float], new: Sequence[float], *, threshold: float, higher_is_better: bool
) -> Verdict:
    """Is `new` worse than `base` by more than `threshold` (a fraction) *and*
    by more than the noise, as a comparison of its own?

    The test: Welch's two-sample t-test of the means (unequal variances,
    since configurations and runs differ in spread), one-sided toward worse.
    A regression needs both the point estimate beyond the threshold and the
    test's rejection: a large difference within the noise of either run is
    not one (that is what made identical code "regress" by 50 % before), nor
    is a significant but small one. With a single sample on either side there
    is no test and the threshold alone decides (the reason says so). A run
    makes many comparisons: judge them together with `holm_family`.
    """
    b, n = estimate(base), estimate(new)
    if not (b.n and n.n) or b.mean == 0:
        return Verdict(0.0, False, "no baseline sample")
    change = (n.mean - b.mean) / abs(b.mean)
    worse = -change if higher_is_better else change
    beyond = worse > threshold
    if b.n < 2 or n.n < 2:
        if not beyond:
            return Verdict(change, False, f"{change:+.1%} within the {threshold:.0%} threshold")
        return Verdict(change, True, f"{change:+.1%} beyond {threshold:.0%} (one sample: no noise estimate, "
                                     "the threshold alone decides)", None, True)
    p = _welch_worse(b, n, higher_is_better=higher_is_better)
    if not beyond:
        return Verdict(change, False, f"{change:+.1%} within the {threshold:.0%} threshold", p, False)
    return _decided(Verdict(change, False, f"{change:+.1%} beyond {threshold:.0%}", p, True), p, 1)


def _welch_worse(b: Estimate, n: Estimate, *, higher_is_better: bool) -> float:
    """Welch's one-sided p-value for "`n`'s mean is worse than `b`'s"."""
    vb, vn = b.stdev**2 / b.n, n.stdev**2 / n.n
    worse_by = (b.mean - n.mean) if higher_is_better else (n.mean - b.mean)
    se = math.sqrt(vb + vn)
    if se == 0:
        return 0.0 if worse_by > 0 else 1.0
    df = (vb + vn) ** 2 / ((vb**2 / (b.n - 1) if vb else 0.0) + (vn**2 / (n.n - 1) if vn else 0.0))
    return t_sf(worse_by / se, df)


def _decided(v: Verdict, adjusted: float, m: int, alpha: float = FAMILY_ALPHA) -> Verdict:
    """`v` (beyond the threshold, tested) judged by its Holm-adjusted p-value."""
    assert v.p_value is not None
    base = v.reason.split(";")[0]
    test = f"Welch p = {v.p_value:.2g}" + (f", Holm-adjusted over {m} comparisons {adjusted:.2g}" if m > 1 else "")
    if adjusted <= alpha:
        return replace(v, regressed=True, reason=f"{base}; significant ({test} <= {alpha:g})")
    return replace(v, regressed=False, reason=f"{base}; but within the noise ({test} > {alpha:g})")


def holm_family(verdicts: Sequence[Verdict], *, alpha: float = FAMILY_ALPHA) -> list[Verdict]:
    """A run's comparisons judged together: Holm-Bonferroni (`holm`) over
    every tested comparison (within the threshold or not: the family is every
    test made, or the correction would be chosen by the data), and a cell
    regresses iff it is beyond the threshold and rejected. One-sample
    comparisons have no p-value: they are outside the family and keep the
    threshold-alone rule."""
    tested = [i for i, v in enumerate(verdicts) if v.p_value is not None]
    adjusted = holm([verdicts[i].p_value or 0.0 for i in tested], alpha=alpha)
    out = list(verdicts)
    for i, adj in zip(tested, adjusted, strict=True):
        if verdicts[i].beyond:
            out[i] = _decided(verdicts[i], adj, len(tested), alpha)
    return out
