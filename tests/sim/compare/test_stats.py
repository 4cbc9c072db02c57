"""`sim.compare.stats`: Student's t tail from the incomplete beta function (against
the t975 table and closed forms), Holm-Bonferroni on exact small examples,
and the regression verdicts built on them."""

from __future__ import annotations

import math

import pytest

from sim.compare.stats import (
    _T975,
    FAMILY_ALPHA,
    betainc,
    compare_samples,
    holm,
    holm_family,
    t975,
    t_sf,
)


@pytest.mark.parametrize("df", sorted(_T975))
def test_t_sf_at_the_tabulated_quantile_is_2_5_percent(df: int) -> None:
    # The table has 3 decimals: at most ~3e-5 of tail probability (df=120).
    assert t_sf(t975(df), df) == pytest.approx(0.025, abs=5e-5)
    assert t_sf(-t975(df), df) == pytest.approx(0.975, abs=5e-5)


@pytest.mark.parametrize("t", [0.0, 0.1, 0.5, 1.0, 2.0, 7.5, 40.0, -3.0])
def test_t_sf_closed_forms(t: float) -> None:
    # df=1 is Cauchy; df=2 has P(T > t) = 1/2 - t / (2 sqrt(t² + 2)).
    assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, rel=1e-12, abs=1e-15)
    assert t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(t * t + 2)), rel=1e-12, abs=1e-15)
    # A huge df is the normal distribution.
    assert t_sf(t, 1e6) == pytest.approx(0.5 * math.erfc(t / math.sqrt(2)), rel=1e-4, abs=1e-12)


def test_t_sf_edges_and_bad_input() -> None:
    assert t_sf(0.0, 3.7) == 0.5
    assert t_sf(math.inf, 3) == 0.0
    assert t_sf(-math.inf, 3) == 1.0
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="df > 0"):
            t_sf(1.0, bad)


def test_betainc_closed_forms() -> None:
    # I_x(a, 1) = x^a; I_x(1, b) = 1 - (1 - x)^b; I_x(a, b) = 1 - I_{1-x}(b, a).
    for x in (0.0, 0.01, 0.3, 0.5, 0.77, 0.999, 1.0):
        assert betainc(2.5, 1, x) == pytest.approx(x**2.5, abs=1e-14)
        assert betainc(1, 3.5, x) == pytest.approx(1 - (1 - x) ** 3.5, abs=1e-14)
        assert betainc(4.2, 0.5, x) == pytest.approx(1 - betainc(0.5, 4.2, 1 - x), abs=1e-14)
    assert betainc(500.0, 0.5, 0.998) == pytest.approx(1 - betainc(0.5, 500.0, 0.002), abs=1e-12)
    with pytest.raises(ValueError, match="betainc"):
        betainc(0, 1, 0.5)


def test_holm_exact_example() -> None:
    # Sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 -> 0.06 (monotone).
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert [a <= FAMILY_ALPHA for a in adjusted] == [True, False, False, True]


def test_holm_stops_at_the_first_acceptance() -> None:
    # 0.0125 x4 = 0.05 is rejected (<=); 0.02 x3 = 0.06 is not, and so nothing
    # after it, although 0.026 x2 = 0.052 and 0.03 x1 would pass alone.
    adjusted = holm([0.03, 0.0125, 0.026, 0.02])
    assert [a <= 0.05 for a in adjusted] == [False, True, False, False]
    assert holm([]) == []
    assert holm([0.9, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm([0.04]) == [0.04]  # one test: as it is


def test_holm_ties_keep_their_order_and_share_the_value() -> None:
    assert holm([0.01, 0.01, 0.01]) == pytest.approx([0.03, 0.03, 0.03])


def test_compare_samples_p_value_is_welch_one_sided() -> None:
    # Equal variances, n=3 each: t = -10 / sqrt(2 * 1/3) on df = 4.
    v = compare_samples([100, 101, 99], [90, 91, 89], threshold=0.05, higher_is_better=True)
    assert v.beyond
    assert v.p_value == pytest.approx(t_sf(10 / math.sqrt(2 / 3), 4), rel=1e-12)
    # Latency (lower is better): the same numbers are an improvement.
    better = compare_samples([100, 101, 99], [90, 91, 89], threshold=0.05, higher_is_better=False)
    assert not better.beyond
    assert not better.regressed
    assert v.p_value is not None
    assert better.p_value == pytest.approx(1 - v.p_value, rel=1e-9)


def test_holm_family_flags_only_beyond_threshold_and_rejected() -> None:
    strong = compare_samples([100, 101, 99], [70, 71, 69], threshold=0.2, higher_is_better=True)
    small = compare_samples([100, 101, 99], [90, 91, 89], threshold=0.2, higher_is_better=True)  # significant, -10 %
    noisy = compare_samples([100, 150, 50], [60, 100, 20], threshold=0.2, higher_is_better=True)  # -40 %, noise
    single = compare_samples([100], [70], threshold=0.2, higher_is_better=True)  # no test
    judged = holm_family([strong, small, noisy, single])
    assert [v.regressed for v in judged] == [True, False, False, True]
    assert "Holm-adjusted over 3 comparisons" in judged[0].reason  # the single one is outside the family
    assert "threshold alone" in judged[3].reason
