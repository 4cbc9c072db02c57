"""The Conclusions section of `coordsim compare`: how each configuration
compares with a reference, per workload, concurrency level and measure, as a
ratio with its interval and a label (faster, slower, indistinguishable) that
holds for the whole run at once; cells that are not steady or host-bound
never reach a ratio.

The statistic is the *paired* log-ratio. Pass k of every configuration runs
with the same seed, and the passes are interleaved in time (ABCABC,
`sim.compare.runner`), so whatever moved pass k (its seed's statements, the
machine's drift, a Postgres checkpoint) moved both sides of the pair. Per pass
d_k = ln(config_k / reference_k); their mean and Student-t interval (n - 1
df), exponentiated, give the geometric-mean ratio and a multiplicative 95 %
interval (never below zero, 2x and 0.5x equally far from 1). The label is a
two-sided paired t-test on the d_k (two-sided: a conclusion has no preferred
direction, unlike a regression). Pairing is the difference from `--baseline`
(`sim.compare.stats.compare_samples`), which must use Welch's unpaired test
because a baseline is another run at another time: here the shared
pass-to-pass variation cancels within each pair instead of counting as noise
on both sides, so the same few passes decide more.

Holm, for the reason `--baseline` uses it (`sim.compare.stats`): a run makes
workloads x levels x configurations x 3 comparisons, often over a hundred,
and at 5 % each some would be labelled faster or slower by chance alone.
Holm over every tested comparison bounds the chance of *any* wrong label at
`alpha` whatever the dependence (a cell's three measures are strongly
dependent). Its price: with 3 passes (2 df) and ~100 comparisons, |mean d|
must exceed ~26 standard deviations of d_k to be decided (~4.6 with 5
passes), so repeat more to decide small differences. The intervals stay 95 %
per comparison, so an interval that excludes 1 can still be labelled
indistinguishable; one pass gives a ratio with neither interval nor test.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, final

from sim.compare.stats import FAMILY_ALPHA, check_fraction, holm, t975, t_sf
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sim.compare.rows import LevelRow

__all__ = [
    "FASTER",
    "INDISTINGUISHABLE",
    "MIN_P99_OPS_PER_PASS",
    "ONE_PASS",
    "SLOWER",
    "Conclusions",
    "Measure",
    "PairedRatio",
    "Ratio",
    "conclude",
    "paired_ratio",
]

Measure = Literal["throughput", "p50", "p99"]

#: The measures compared: name, samples column (one per pass), whether higher is faster.
_MEASURES: Final[tuple[tuple[Measure, str, bool], ...]] = (
    ("throughput", "throughput_samples", True),
    ("p50", "p50_samples_ms", False),
    ("p99", "p99_samples_ms", False),
)
_NOUN: Final = {"throughput": "throughput", "p50": "p50 latency", "p99": "p99 latency"}

#: A pass's p99 is compared only with at least this many operations in the
#: pass on both sides (fewer, and it is one of the few slowest operations), as
#: `sim.compare.report.compare_baseline` judges.
MIN_P99_OPS_PER_PASS: Final = 100

FASTER: Final = "faster"
SLOWER: Final = "slower"
INDISTINGUISHABLE: Final = "indistinguishable"
#: One pass: a ratio, but no interval and no test.
ONE_PASS: Final = "indistinguishable (1 pass)"

_LEFT_OUT: Final = "not steady or host-bound"
# Written as escapes: ruff flags the characters themselves as look-alikes of x and -.
_TIMES: Final = "\N{MULTIPLICATION SIGN}"
_DASH: Final = "\N{EN DASH}"


@final
@dataclass(frozen=True)
class PairedRatio:
    """`paired_ratio`'s answer: the geometric-mean ratio over `n` pairs, its
    95 % interval and two-sided p-value (all three None when n == 1)."""

    ratio: float
    lo: float | None
    hi: float | None
    p_value: float | None
    n: int


def paired_ratio(new: Sequence[float], ref: Sequence[float]) -> PairedRatio:
    """The paired log-ratio of `new` over `ref` (sample k of each is a pair).

    Args:
        new: the compared side's samples, all positive and finite.
        ref: the reference's samples, as many, all positive and finite.

    Raises:
        InvalidUsage: no pair, unequal lengths, or a sample not positive.
    """
    if not new or len(new) != len(ref):
        raise InvalidUsage(f"paired_ratio needs equally many samples (>= 1), got {len(new)} and {len(ref)}")
    if not all(math.isfinite(x) and x > 0 for x in (*new, *ref)):
        raise InvalidUsage("paired_ratio needs positive, finite samples")
    d = [math.log(x / r) for x, r in zip(new, ref, strict=True)]
    n = len(d)
    mean = statistics.fmean(d)
    if n < 2:
        return PairedRatio(math.exp(mean), None, None, None, 1)
    se = statistics.stdev(d) / math.sqrt(n)
    half = t975(n - 1) * se
    # se == 0: every pass gave the same ratio, there is no noise to test against.
    p = (1.0 if mean == 0 else 0.0) if se == 0 else min(1.0, 2 * t_sf(abs(mean) / se, n - 1))
    return PairedRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), p, n)


def _x(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


@final
@dataclass(frozen=True)
class Ratio:
    """One comparison: `config` / reference for `measure` at `concurrency`
    clients of `workload`, over `n` paired passes. `p_value` is the paired
    t-test's two-sided p and `p_adjusted` its Holm-adjusted value over the
    run (both None, like `lo` and `hi`, with one pass); `label` is `FASTER`,
    `SLOWER`, `INDISTINGUISHABLE` or `ONE_PASS`."""

    workload: str
    config: str
    concurrency: int
    measure: Measure
    ratio: float
    lo: float | None
    hi: float | None
    p_value: float | None
    p_adjusted: float | None
    label: str
    n: int

    @property
    def decided(self) -> bool:
        return self.label in (FASTER, SLOWER)

    def interval(self) -> str:
        """'6.92-7.93' (with an en dash), or '' with one pass."""
        return "" if self.lo is None or self.hi is None else f"{_x(self.lo)}{_DASH}{_x(self.hi)}"

    def text(self) -> str:
        """'7.41x (6.92-7.93) faster' (with a multiplication sign and an en dash)."""
        ci = self.interval()
        return f"{_x(self.ratio)}{_TIMES}" + (f" ({ci})" if ci else "") + f" {self.label}"


@final
@dataclass(frozen=True)
class Conclusions:
    """A run's comparisons with `reference`: the ratios (in workload, level,
    configuration, measure order), the `compared` of them that were tested
    (Holm's family, at family-wise `alpha`), the cells `excluded` as not
    concludable, the measures `skipped` for want of usable samples (each with
    its reason), and at most one takeaway sentence per workload."""

    reference: str
    alpha: float
    compared: int
    ratios: list[Ratio]
    excluded: list[str]
    skipped: list[str]
    takeaways: list[str]

    def as_dict(self) -> dict[str, Any]:
        """For `summary.json`: plain JSON types only (no NaN: ratios are finite)."""
        return {
            "reference": self.reference,
            "alpha": self.alpha,
            "compared": self.compared,
            "ratios": [asdict(r) for r in self.ratios],
            "excluded": list(self.excluded),
            "skipped": list(self.skipped),
            "takeaways": list(self.takeaways),
        }

    def rule(self) -> str:
        """How to read the ratios."""
        return (
            f"Ratios are configuration / {self.reference} at the same clients, paired by pass (same "
            "seed, interleaved in time): the geometric mean with its 95 % t-interval; throughput "
            "above 1 or latency below 1 is faster. Labels come from a two-sided paired t-test on the "
            f"log-ratios, Holm-corrected over the run's {self.compared} tested comparisons at "
            f"family-wise {self.alpha * 100:g} %, so an interval excluding 1 can still be "
            "indistinguishable; cells not steady or host-bound are left out."
        )

    def markdown(self) -> list[str]:
        """The `## Conclusions` section of `summary.md`."""
        out = ["## Conclusions", "", self.rule(), ""]
        cells: dict[tuple[str, int, str], dict[str, Ratio]] = {}
        for r in self.ratios:
            cells.setdefault((r.workload, r.concurrency, r.config), {})[r.measure] = r
        if cells:
            out += ["| workload | clients | configuration | throughput ratio (95 % CI) | p50 ratio | p99 ratio |",
                    "|---|---:|---|---|---|---|"]
            for (wl, c, cfg), by in cells.items():
                shown = [by[m].text() if m in by else "—" for m, _, _ in _MEASURES]
                out.append(f"| {wl} | {c} | {cfg} | " + " | ".join(shown) + " |")
        else:
            out.append(f"No comparison with {self.reference} could be made.")
        for title, items in ((f"Left out ({_LEFT_OUT})", self.excluded), ("Not compared", self.skipped)):
            if items:
                out += ["", f"{title}:", ""] + [f"- {e}" for e in items]
        if self.takeaways:
            out += ["", "Takeaways:", ""] + [f"- {t}" for t in self.takeaways]
        return out

    def lines(self) -> list[str]:
        """For the terminal, within 80 columns: the takeaways, then one line
        per (workload, level, configuration) with a measure labelled faster
        or slower, its decided measures side by side."""
        decided = [r for r in self.ratios if r.decided]
        out = [f"conclusions vs {self.reference} (paired by pass; Holm, family-wise {self.alpha * 100:g} %):"]
        for t in self.takeaways:
            out += textwrap.wrap(t, 80, initial_indent="  ", subsequent_indent="    ")
        if not decided:
            out.append("  no configuration is faster or slower than the reference anywhere")
        cells: dict[tuple[str, int, str], list[Ratio]] = {}
        for r in decided:
            cells.setdefault((r.workload, r.concurrency, r.config), []).append(r)
        for (workload, clients, config), mine in cells.items():
            line = f"{workload} c={clients} {config}: " + "; ".join(f"{r.measure} {r.text()}" for r in mine)
            out += textwrap.wrap(line, 80, initial_indent="  ", subsequent_indent="    ")
        return out


def _why_not(row: LevelRow) -> str:
    parts = []
    if not row.steady:
        parts.append(f"not steady ({row.steady_note})" if row.steady_note else "not steady")
    if row.host_bound:
        parts.append(f"host-bound ({row.host_bound})")
    return ", ".join(parts)


def _unusable(measure: Measure, column: str, row: LevelRow, ref: LevelRow, reference: str) -> str:
    """Why `measure` of `row` cannot be compared with `ref`'s ('' if it can)."""
    if measure == "p99":
        per_pass = min(r.latency_samples // max(1, r.repeats) for r in (row, ref))
        if per_pass < MIN_P99_OPS_PER_PASS:
            return f"too few operations per pass for a p99 ({per_pass} < {MIN_P99_OPS_PER_PASS})"
    for side, who in ((row, row.config), (ref, reference)):
        samples: Sequence[float] = getattr(side, column)
        if not samples:
            return f"no {who} samples"
        bad = next((k for k, x in enumerate(samples, 1) if not (math.isfinite(x) and x > 0)), None)
        if bad is not None:
            return f"{who}'s pass {bad} is zero or missing"
    return ""


def conclude(rows: Sequence[LevelRow], *, reference: str = "event-loop", alpha: float = FAMILY_ALPHA) -> Conclusions:
    """Every configuration other than `reference` compared with it, per
    workload, level and measure (see the module docstring for the test).

    A cell is compared only when both its row and the reference's row at that
    level are `concludable`; otherwise it is listed in `excluded` with the
    reason. Samples are paired by pass; if the two rows have different pass
    counts, the passes both have (the first ones) are paired. No rows: empty
    conclusions.

    Raises:
        InvalidUsage: `reference` is not one of the rows' configurations, two
            rows share a (workload, configuration, level), or `alpha` is not a
            fraction.
    """
    check_fraction("alpha", alpha)
    if not rows:
        return Conclusions(reference, alpha, 0, [], [], [], [])
    configs = list(dict.fromkeys(r.config for r in rows))
    if reference not in configs:
        raise InvalidUsage(f"reference configuration {reference!r} is not in this run; "
                           f"its configurations are: {', '.join(configs)}")
    cells: dict[tuple[str, str, int], LevelRow] = {}
    for r in rows:
        key = (r.workload, r.config, r.concurrency)
        if key in cells:
            raise InvalidUsage(f"two rows for {r.workload} {r.config} c={r.concurrency}")
        cells[key] = r
    workloads = list(dict.fromkeys(r.workload for r in rows))
    found: list[tuple[str, str, int, Measure, PairedRatio]] = []
    excluded: list[str] = []
    left_out: dict[str, int] = {}
    skipped: list[str] = []
    for wl in workloads:
        for c in sorted({r.concurrency for r in rows if r.workload == wl}):
            ref = cells.get((wl, reference, c))
            for cfg in configs:
                row = cells.get((wl, cfg, c))
                if cfg == reference or row is None:
                    continue
                if ref is None:
                    skipped.append(f"{wl} {cfg} c={c}: no {reference} row at this level")
                    continue
                mine, theirs = _why_not(row), _why_not(ref)
                if mine or theirs:
                    why = [mine] * bool(mine) + [f"reference {reference} {theirs}"] * bool(theirs)
                    excluded.append(f"{wl} {cfg} c={c}: " + "; ".join(why))
                    left_out[wl] = left_out.get(wl, 0) + 1
                    continue
                for measure, column, _ in _MEASURES:
                    reason = _unusable(measure, column, row, ref, reference)
                    if reason:
                        skipped.append(f"{wl} {cfg} c={c} {measure}: {reason}")
                        continue
                    new, old = getattr(row, column), getattr(ref, column)
                    n = min(len(new), len(old))
                    found.append((wl, cfg, c, measure, paired_ratio(new[:n], old[:n])))
    # The family is every test made, fixed before looking at any p-value.
    tested = [p for *_, s in found if (p := s.p_value) is not None]
    adjusted = iter(holm(tested, alpha=alpha))
    ratios = []
    for wl, cfg, c, measure, s in found:
        adj = None if s.p_value is None else next(adjusted)
        if adj is None:
            label = ONE_PASS
        elif adj > alpha:
            label = INDISTINGUISHABLE
        else:
            label = FASTER if (s.ratio > 1) == (measure == "throughput") else SLOWER
        ratios.append(Ratio(wl, cfg, c, measure, s.ratio, s.lo, s.hi, s.p_value, adj, label, s.n))
    takeaways = [t for wl in workloads if (t := _takeaway(wl, ratios, left_out.get(wl, 0), reference))]
    return Conclusions(reference, alpha, len(tested), ratios, excluded, skipped, takeaways)


def _takeaway(wl: str, ratios: Sequence[Ratio], left_out: int, reference: str) -> str:
    """One sentence for workload `wl`: each configuration's headline measure
    (throughput, unless it was never comparable) at its highest compared
    level; '' when the workload has nothing to say."""
    mine = [r for r in ratios if r.workload == wl]
    note = f" ({left_out} cell{'s' * (left_out != 1)} {_LEFT_OUT}, left out)" if left_out else ""
    if not mine:
        return f"{wl}: no concludable comparison with {reference}{note}" if left_out else ""
    if all(r.label == INDISTINGUISHABLE for r in mine):
        every = "every concludable level" if left_out else "every level"
        return f"{wl}: indistinguishable from {reference} at {every}{note}"
    measure = next(m for m, _, _ in _MEASURES if any(r.measure == m for r in mine))
    tops: dict[str, Ratio] = {}
    for r in mine:
        if r.measure == measure and (r.config not in tops or r.concurrency > tops[r.config].concurrency):
            tops[r.config] = r
    levels = {r.concurrency for r in tops.values()}
    clauses = []
    for i, r in enumerate(tops.values()):
        clause = _clause(r, reference, first=i == 0)
        if len(levels) > 1:
            clause += f" at {r.concurrency} clients"
        clauses.append(clause)
    where = f" at {levels.pop()} clients" if len(levels) == 1 else ""
    return f"{wl}{where}: " + "; ".join(clauses) + note


def _clause(r: Ratio, reference: str, *, first: bool) -> str:
    """'decoupled sustains 7.41x (6.92-7.93x) event-loop's throughput' (the
    sentence's first clause names the reference and the measure, later ones
    only their configuration)."""
    noun = f"{reference}'s {_NOUN[r.measure]}"
    verb = "sustains" if r.measure == "throughput" else "has"
    x = f"{_x(r.ratio)}{_TIMES}"
    if r.label == ONE_PASS:
        return f"{r.config} {verb} {x} {noun} (1 pass: no interval, untested)" if first \
            else f"{r.config} {x} (1 pass, untested)"
    if r.label == INDISTINGUISHABLE:
        what = f"'s {_NOUN[r.measure]} is indistinguishable from {reference}'s" if first else " indistinguishable"
        # An interval that excludes 1 yet no label: the run's other
        # comparisons (Holm) took the significance, which a reader must see.
        why = ("; significant alone, not over the run's comparisons"
               if r.lo is not None and r.hi is not None and (r.lo > 1 or r.hi < 1) else "")
        return f"{r.config}{what} ({x}, {r.interval()}{_TIMES}{why})"
    ci = f"({r.interval()}{_TIMES})"
    return f"{r.config} {verb} {x} {ci} {noun}" if first else f"{r.config} {x} {ci}"
