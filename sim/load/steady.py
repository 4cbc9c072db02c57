"""When a measured level is in steady state (DESIGN.md §10): the checks a
closed-loop window must pass before its numbers can support a conclusion,
and the open loop's test for a queue that grows.

A closed loop of N clients obeys Little's law, N = X · R (throughput times
mean latency), exactly in steady state; a window that started in a
transient, or is short against the latency it measures, breaks it. So a
cell is *steady* when

- the ratio R · X / N is within `LITTLE_TOLERANCE` of 1;
- the window is at least `WINDOW_OVER_LATENCY` mean latencies long (fewer,
  and a handful of slow operations decide the mean);
- throughput in the window's first and second halves differs by less than
  the noise: the 95 % interval of the throughput over passes, or, when
  that is narrower, the noise the window itself shows. Each window counts
  its completions in `SLICES` equal slices; the slices' spread within each
  half gives the difference of the halves a standard error, so a batched
  system (a group commit completes a batch at one instant) is judged by its
  own granularity and a Poisson-like one by its counting noise. A
  deterministic virtual run can have an interval of zero over passes, and a
  constant rate still puts one batch more in one half than in the other.

These are the issue's thresholds (issue 33), not fitted to any result.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from sim.compare.stats import t975

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "LITTLE_TOLERANCE",
    "SATURATION_LATENCY_GROWTH",
    "SATURATION_SHORTFALL",
    "SLICES",
    "WINDOW_OVER_LATENCY",
    "Slices",
    "grown_length",
    "halves_note",
    "littles_note",
    "saturation_note",
    "window_note",
]

#: |R·X/N - 1| at most this: the issue's ±15 %.
LITTLE_TOLERANCE: Final = 0.15
#: The window is at least this many mean latencies.
WINDOW_OVER_LATENCY: Final = 10.0
#: A grown window aims this far past the bare minimum, so that one growth
#: step usually suffices (the mean latency it was sized on is itself noisy).
GROWTH_MARGIN: Final = 1.25
#: Slices of a window whose completions are counted (for the halves' test).
SLICES: Final = 10
#: Open loop: achieved below (1 - this) of the arrivals offered in the window.
SATURATION_SHORTFALL: Final = 0.10
#: Open loop: the second half's mean latency this many times the first's.
SATURATION_LATENCY_GROWTH: Final = 2.0
#: Open loop: each half needs this many operations for the latency test.
_MIN_HALF_OPS: Final = 20


def littles_note(ratio: float | None) -> str:
    """"" when Little's law holds within `LITTLE_TOLERANCE`, else why not."""
    if ratio is None:
        return "no completed operation"
    if abs(ratio - 1.0) > LITTLE_TOLERANCE:
        return f"Little's law {ratio:.2f}"
    return ""


def window_note(window_s: float, mean_latency_s: float | None) -> str:
    """"" when the window is `WINDOW_OVER_LATENCY` mean latencies long, else why not."""
    if mean_latency_s is None or mean_latency_s <= 0:
        return ""
    over = window_s / mean_latency_s
    if over < WINDOW_OVER_LATENCY:
        return f"window {over:.1f}x mean latency"
    return ""


@final
@dataclass(frozen=True)
class Slices:
    """One pass's completions in `SLICES` equal slices of its window."""

    counts: tuple[int, ...]
    window_s: float

    def _rates(self) -> list[float]:
        width = self.window_s / len(self.counts)
        return [c / width for c in self.counts]

    @property
    def first_rate(self) -> float:
        """Throughput of the window's first half (ops/s)."""
        rates = self._rates()
        return statistics.fmean(rates[: len(rates) // 2]) if self.window_s > 0 else 0.0

    @property
    def second_rate(self) -> float:
        rates = self._rates()
        return statistics.fmean(rates[len(rates) // 2 :]) if self.window_s > 0 else 0.0

    def diff_se(self) -> float:
        """The standard error of `second_rate - first_rate`, from the
        slices' variance within each half (pooled)."""
        rates = self._rates()
        h = len(rates) // 2
        first, second = rates[:h], rates[h:]
        pooled = (statistics.variance(first) * (h - 1) + statistics.variance(second) * (len(second) - 1)) / (
            len(rates) - 2
        )
        return math.sqrt(pooled * (1 / h + 1 / len(second)))


def halves_note(passes: Sequence[Slices], throughput_ci95: float | None) -> str:
    """"" when the second halves' mean throughput is within the noise of the
    first halves', else why not. The noise is the larger of the
    throughput's 95 % half-width over passes and the 95 % half-width of the
    mean difference that the slices' spread gives (Student's t with the
    slices' degrees of freedom). With `throughput_ci95` None it judges the
    passes alone, as `measure_closed` does before it grows a window."""
    if not passes or any(len(p.counts) < 4 or p.window_s <= 0 for p in passes):
        return ""
    k = len(passes)
    diff = sum(p.second_rate - p.first_rate for p in passes) / k
    se = math.sqrt(sum(p.diff_se() ** 2 for p in passes)) / k
    df = sum(len(p.counts) - 2 for p in passes)
    allowed = max(throughput_ci95 or 0.0, t975(df) * se)
    if abs(diff) > allowed:
        return f"halves differ by {diff:+,.0f} ops/s (noise {allowed:,.0f})"
    return ""


def grown_length(length_s: float, mean_latency_s: float | None, cap_s: float) -> float:
    """The next window to try after `length_s` failed a check: at least
    double (a transient gets diluted), and long enough for the window rule
    with `GROWTH_MARGIN`, but never past `cap_s`."""
    want = 2 * length_s
    if mean_latency_s is not None and mean_latency_s > 0:
        want = max(want, GROWTH_MARGIN * WINDOW_OVER_LATENCY * mean_latency_s)
    return min(cap_s, want)


def saturation_note(
    *, arrivals: int, completions: int, first_mean_s: float | None, second_mean_s: float | None,
    first_n: int, second_n: int,
) -> str:
    """Open loop: "" unless the queue grew during the window: fewer
    completions than `SATURATION_SHORTFALL` below the arrivals offered, or
    the second half's operations waiting `SATURATION_LATENCY_GROWTH` times
    as long as the first half's (latency by intended start keeps climbing
    only while a backlog builds)."""
    if arrivals and completions < (1 - SATURATION_SHORTFALL) * arrivals:
        return f"saturated: {completions:,} of {arrivals:,} arrivals completed in the window"
    if (first_n >= _MIN_HALF_OPS and second_n >= _MIN_HALF_OPS and first_mean_s and second_mean_s
            and second_mean_s > SATURATION_LATENCY_GROWTH * first_mean_s):
        return f"saturated: latency grew {second_mean_s / first_mean_s:.1f}x through the window"
    return ""
