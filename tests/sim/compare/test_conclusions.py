"""`sim.compare.conclusions`: the paired log-ratio and its interval against
hand-computed values, the direction of each measure, Holm across the run,
the cells left out, and the takeaway sentence."""

from __future__ import annotations

import json
import math
import re
import statistics

import pytest

from sim.compare.conclusions import (
    FASTER,
    INDISTINGUISHABLE,
    ONE_PASS,
    SLOWER,
    Conclusions,
    Ratio,
    conclude,
    paired_ratio,
)
from sim.compare.rows import LevelRow
from sim.compare.stats import FAMILY_ALPHA
from sim.runtime.errors import InvalidUsage

REF = "event-loop"
NEW = "decoupled"


def row(
    config: str,
    throughput: tuple[float, ...],
    *,
    workload: str = "insert",
    concurrency: int = 256,
    p50: tuple[float, ...] = (),
    p99: tuple[float, ...] = (),
    ops_per_pass: int = 1000,
    steady: bool = True,
    steady_note: str = "",
    host_bound: str = "",
) -> LevelRow:
    """A row with only what conclusions read filled in meaningfully."""
    n = len(throughput)
    return LevelRow(
        workload=workload, config=config, mode="virtual", concurrency=concurrency, repeats=n,
        window_s=1.0, ops=ops_per_pass * n, errors=0, errors_by_code=(),
        throughput_ops_s=statistics.fmean(throughput), throughput_ci95=None,
        throughput_samples=throughput, latency_samples=ops_per_pass * n,
        p50_ms=None, p99_ms=None, p999_ms=None, p50_samples_ms=p50, p99_samples_ms=p99,
        oracle_queries_per_op=None, loop_busy_fraction=None,
        steady=steady, steady_note=steady_note, host_bound=host_bound,
    )


def only(c: Conclusions, measure: str, config: str = NEW, concurrency: int = 256) -> Ratio:
    [r] = [r for r in c.ratios if r.measure == measure and r.config == config and r.concurrency == concurrency]
    return r


def test_paired_ratio_is_the_geometric_mean_with_a_t_interval() -> None:
    ref, new = [100.0, 120.0, 90.0], [202.0, 237.6, 180.0]  # ratios 2.02, 1.98, 2.00
    d = [math.log(2.02), math.log(1.98), math.log(2.0)]
    mean, sd = statistics.fmean(d), statistics.stdev(d)
    s = paired_ratio(new, ref)
    assert s.n == 3
    assert s.ratio == pytest.approx((2.02 * 1.98 * 2.0) ** (1 / 3), rel=1e-12)
    half = 4.303 * sd / math.sqrt(3)  # t(0.975, 2 df), NIST table
    assert s.lo == pytest.approx(math.exp(mean - half), rel=1e-9)
    assert s.hi == pytest.approx(math.exp(mean + half), rel=1e-9)
    # Two-sided p for 2 df in closed form: P(|T| > t) = 1 - t / sqrt(t² + 2).
    t = abs(mean) / (sd / math.sqrt(3))
    assert s.p_value == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-6)
    with pytest.raises(InvalidUsage, match="positive"):
        paired_ratio([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(InvalidUsage, match="equally many"):
        paired_ratio([1.0, 2.0], [1.0])


def test_clear_2x_throughput_is_faster_with_an_interval_around_2() -> None:
    c = conclude([row(REF, (100.0, 120.0, 90.0)), row(NEW, (202.0, 237.6, 180.0))])
    r = only(c, "throughput")
    assert r.label == FASTER
    assert r.lo is not None
    assert r.hi is not None
    assert r.lo < 2 < r.hi
    assert r.lo > 1
    assert r.n == 3
    assert c.compared == 1  # no latency samples: throughput only
    assert c.excluded == []


def test_noise_around_1_is_indistinguishable() -> None:
    c = conclude([row(REF, (100.0, 120.0, 90.0)), row(NEW, (104.0, 115.0, 92.0))])
    r = only(c, "throughput")
    assert r.label == INDISTINGUISHABLE
    assert r.lo is not None
    assert r.hi is not None
    assert r.lo < 1 < r.hi
    assert r.p_value is not None
    assert r.p_value > FAMILY_ALPHA


def test_latency_direction_is_inverted() -> None:
    same = (100.0, 120.0, 90.0)
    ref = row(REF, same, p50=(10.0, 12.0, 9.0), p99=(50.0, 55.0, 45.0))
    # Half the p50 (lower latency: faster); double the p99 (slower).
    new = row(NEW, same, p50=(5.05, 5.9, 4.5), p99=(101.0, 108.0, 91.0))
    c = conclude([ref, new])
    p50, p99 = only(c, "p50"), only(c, "p99")
    assert p50.ratio == pytest.approx(0.5, rel=0.02)
    assert p50.label == FASTER
    assert p99.ratio == pytest.approx(2.0, rel=0.02)
    assert p99.label == SLOWER
    # And lower throughput is slower.
    low = conclude([row(REF, same), row(NEW, (50.5, 59.0, 45.0))])
    assert only(low, "throughput").label == SLOWER


def test_p99_needs_enough_operations_per_pass() -> None:
    def run(ref_ops: int, new_ops: int) -> Conclusions:
        return conclude([row(REF, (1.0, 2.0), p99=(5.0, 6.0), ops_per_pass=ref_ops),
                         row(NEW, (1.0, 2.0), p99=(5.0, 6.0), ops_per_pass=new_ops)])

    enough = run(150, 100)
    assert [r.measure for r in enough.ratios] == ["throughput", "p99"]
    few = run(150, 99)  # one side short is enough to skip it
    assert [r.measure for r in few.ratios] == ["throughput"]
    assert few.skipped == ["insert decoupled c=256 p50: no decoupled samples",
                           "insert decoupled c=256 p99: too few operations per pass for a p99 (99 < 100)"]


def test_non_concludable_cells_are_excluded_with_their_reason() -> None:
    rows = [
        row(REF, (100.0, 120.0, 90.0)),
        row(NEW, (200.0, 240.0, 180.0), steady=False, steady_note="Little's law 1.32"),
        row("event-loop+pg-oracle", (300.0, 361.0, 270.0)),
        row(REF, (100.0, 120.0, 90.0), concurrency=512, host_bound="coordsim CPU 97 %"),
        row(NEW, (200.0, 240.0, 180.0), concurrency=512),
    ]
    c = conclude(rows)
    assert c.excluded == [
        "insert decoupled c=256: not steady (Little's law 1.32)",
        "insert decoupled c=512: reference event-loop host-bound (coordsim CPU 97 %)",
    ]
    assert [(r.config, r.concurrency) for r in c.ratios] == [("event-loop+pg-oracle", 256)]
    assert c.ratios[0].label == FASTER
    [takeaway] = c.takeaways
    assert "2 cells not steady or host-bound, left out" in takeaway
    assert "decoupled" not in takeaway


def test_holm_decides_a_borderline_comparison_alone_but_not_among_many() -> None:
    # Log-ratios a - h, a, a + h: t = a / (h / sqrt 3); a = 5.73 h gives
    # t = 9.92, a two-sided p of about 0.01 on 2 df.
    h = 0.02
    a = 5.73 * h
    borderline = [row(REF, (100.0, 100.0, 100.0), concurrency=1),
                  row(NEW, tuple(100 * math.exp(a + k * h) for k in (-1, 0, 1)), concurrency=1)]
    alone = only(conclude(borderline), "throughput", concurrency=1)
    assert alone.p_value is not None
    assert alone.p_value == pytest.approx(0.01, rel=0.05)
    assert alone.p_adjusted == alone.p_value
    assert alone.label == FASTER
    # Nine more comparisons, all noise: Holm multiplies the smallest p by 10.
    noise = [(0.05, -0.05, 0.01), (-0.03, 0.04, 0.0), (0.02, -0.02, 0.03)]
    others = []
    for level in range(2, 11):
        ds = noise[level % 3]
        others += [row(REF, (100.0, 100.0, 100.0), concurrency=level),
                   row(NEW, tuple(100 * math.exp(d) for d in ds), concurrency=level)]
    c = conclude(borderline + others)
    among = only(c, "throughput", concurrency=1)
    assert c.compared == 10
    assert among.p_value == alone.p_value  # the same test ...
    assert among.p_adjusted == pytest.approx(10 * alone.p_value)  # ... judged with the family
    assert among.label == INDISTINGUISHABLE
    assert all(r.label == INDISTINGUISHABLE for r in c.ratios)
    assert c.takeaways == ["insert: indistinguishable from event-loop at every level"]


def test_one_pass_gives_a_ratio_without_interval_or_test() -> None:
    c = conclude([row(REF, (100.0,), p50=(10.0,)), row(NEW, (300.0,), p50=(5.0,))])
    r = only(c, "throughput")
    assert r.ratio == pytest.approx(3.0)
    assert (r.lo, r.hi, r.p_value, r.p_adjusted, r.n) == (None, None, None, None, 1)
    assert r.label == ONE_PASS
    assert c.compared == 0  # outside Holm's family
    assert "1 pass" in c.takeaways[0]
    assert "no configuration is faster or slower" in "\n".join(c.lines())


def test_unknown_reference_is_invalid_usage_listing_the_configurations() -> None:
    rows = [row(REF, (1.0, 2.0)), row(NEW, (1.0, 2.0))]
    with pytest.raises(InvalidUsage, match=r"'oracle'.*event-loop, decoupled"):
        conclude(rows, reference="oracle")
    with pytest.raises(InvalidUsage, match="two rows"):
        conclude([*rows, row(NEW, (1.0, 2.0))])
    assert conclude([]).ratios == []


def test_as_dict_round_trips_through_json() -> None:
    rows = [
        row(REF, (100.0, 120.0, 90.0), p50=(10.0, 12.0, 9.0), p99=(50.0, 55.0, 45.0)),
        row(NEW, (202.0, 237.6, 180.0), p50=(5.0, 6.0, 4.4), p99=(40.0, 60.0, 44.0)),
        row(NEW, (1.0, 1.0, 1.0), concurrency=512, steady=False),
        row(REF, (1.0, 1.0, 1.0), concurrency=512),
    ]
    d = conclude(rows).as_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert d["reference"] == REF
    assert [r["measure"] for r in d["ratios"]] == ["throughput", "p50", "p99"]
    assert d["excluded"] == ["insert decoupled c=512: not steady"]


def test_takeaway_names_the_ratio_and_interval_at_the_highest_level() -> None:
    rows = [
        row(REF, (100.0, 120.0, 90.0), concurrency=64),
        row(NEW, (150.0, 181.0, 134.0), concurrency=64),
        row(REF, (100.0, 120.0, 90.0)),
        row(NEW, (202.0, 237.6, 180.0)),
        row("event-loop+pg-oracle", (104.0, 115.0, 92.0)),
    ]
    c = conclude(rows)
    r = only(c, "throughput")
    [takeaway] = c.takeaways
    m = re.fullmatch(r"insert at 256 clients: decoupled sustains ([\d.]+)\N{MULTIPLICATION SIGN} "
                     r"\(([\d.]+)\N{EN DASH}([\d.]+)\N{MULTIPLICATION SIGN}\) "
                     r"event-loop's throughput; event-loop\+pg-oracle indistinguishable \(.*\)", takeaway)
    assert m, takeaway
    assert r.lo is not None
    assert r.hi is not None
    shown = [float(g) for g in m.groups()]
    assert shown == pytest.approx([r.ratio, r.lo, r.hi], rel=5e-3)
    assert shown[1] < 2 < shown[2]


def test_markdown_and_terminal_lines() -> None:
    rows = [
        row(REF, (100.0, 120.0, 90.0), p50=(10.0, 12.0, 9.0)),
        row("a-configuration-with-a-rather-long-name+pg-oracle", (202.0, 237.6, 180.0), p50=(5.05, 5.9, 4.5)),
        row(NEW, (200.0, 240.0, 180.0), steady=False, steady_note="Little's law 1.32"),
    ]
    c = conclude(rows)
    md = c.markdown()
    assert md[0] == "## Conclusions"
    assert "| workload | clients | configuration | throughput ratio (95 % CI) | p50 ratio | p99 ratio |" in md
    tput = only(c, "throughput", "a-configuration-with-a-rather-long-name+pg-oracle")
    [line] = [x for x in md if x.startswith("| insert | 256 | a-configuration")]
    assert f"| {tput.text()} |" in line
    assert tput.text().endswith(") faster")
    assert line.endswith("| — |")  # no p99 samples
    assert "- insert decoupled c=256: not steady (Little's law 1.32)" in md
    lines = c.lines()
    assert all(len(x) <= 80 for x in lines), lines
    # One (wrapped) line per cell with a decided ratio, after the takeaway,
    # its decided measures side by side; nothing for the others.
    text = " ".join(x.strip() for x in lines)
    decided = [r for r in c.ratios if r.label != INDISTINGUISHABLE]
    assert len(decided) == 2
    for r in c.ratios:
        shown = f"{r.measure} {r.text()}" in text
        assert shown == (r in decided)
    assert text.count("insert c=256 ") == len({r.config for r in decided})
    assert lines[1].startswith("  insert at 256 clients: a-configuration")
