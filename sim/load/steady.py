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
  that is narrower, the noise of the completions themselves: their
  counting noise, or one burst of completions (operations that complete at
  the same instant, as a group commit's do), whichever is larger. A
  deterministic virtual run can have an interval of zero, and a batched
  system at a constant rate still puts one batch more in one half than in
  the other.

These are the issue's thresholds (issue 33), not fitted to any result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "LITTLE_TOLERANCE",
    "SATURATION_LATENCY_GROWTH",
    "SATURATION_SHORTFALL",
    "WINDOW_OVER_LATENCY",
    "Halves",
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
#: The two-sided 95 % normal quantile, for the counting-noise floor.
_Z: Final = 1.96
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
class Halves:
    """One pass's completions in the first and second half of its window."""

    first: int
    second: int
    window_s: float
    #: The most completions at one instant in the window.
    burst: int = 1

    @property
    def first_rate(self) -> float:
        return self.first / (self.window_s / 2) if self.window_s > 0 else 0.0

    @property
    def second_rate(self) -> float:
        return self.second / (self.window_s / 2) if self.window_s > 0 else 0.0


def halves_note(passes: Sequence[Halves], throughput_ci95: float | None) -> str:
    """"" when the mean throughput of the second halves is within the noise
    of the first halves', else why not. The noise is the larger of the
    throughput's 95 % half-width over passes and the counting noise of the
    halves (1.96 · √(completions) over the half-window, averaged over the
    passes: a Poisson count's spread, which a closed loop's steadier
    completions do not exceed) or one burst over the half-window, whichever
    is larger. With `throughput_ci95` None it judges the passes alone, as
    `measure_closed` does before it grows a window."""
    if not passes:
        return ""
    k = len(passes)
    diff = sum(h.second_rate - h.first_rate for h in passes) / k
    counts = sum(h.first + h.second for h in passes)
    half = sum(h.window_s for h in passes) / k / 2
    counting = _Z * math.sqrt(counts) / half / k if half > 0 else 0.0
    burst = sum(h.burst / (h.window_s / 2) for h in passes if h.window_s > 0) / k
    allowed = max(throughput_ci95 or 0.0, counting, burst)
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
            and second_mean_s > SATURATION_LATENCY_GROWTH * first_mean_s):  # fmt: skip
        return f"saturated: latency grew {second_mean_s / first_mean_s:.1f}x through the window"
    return ""
