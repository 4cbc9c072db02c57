"""Latency histograms as `.hgrm` files: the percentile distribution that
HdrHistogram's `outputPercentileDistribution` prints and wrk2 users plot (for
instance with HdrHistogram's online plotter), one per (workload,
configuration, concurrency) of a `compare` run, in milliseconds.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sim.runtime.outputs import atomic_write

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hdrh.histogram import HdrHistogram

    from sim.compare.rows import LevelRow

__all__ = ["HGRM_DIR", "hgrm_text", "mean_and_stddev", "write_hgrms"]

#: Where in a compare output the files go: `hgrm/<workload>/<config>/c<N>.hgrm`.
HGRM_DIR: Final = "hgrm"
#: Histograms record microseconds; the files show milliseconds, as wrk2's do.
_US_PER_MS: Final = 1000.0


def hgrm_text(h: HdrHistogram, *, ticks_per_half_distance: int = 5) -> str:
    """The `.hgrm` text of `h` (values in µs, printed in ms).

    The layout is `outputPercentileDistribution`'s: a header, `Value Percentile
    TotalCount 1/(1-Percentile)` rows, and the `#[Mean …]`, `#[Max …]`,
    `#[Buckets …]` footer. (hdrh's own writer leaves the standard deviation
    unscaled; this one scales it with the values.)"""
    digits = h.significant_figures
    lines = [f"{'Value':>12} {'Percentile':>14} {'TotalCount':>10} {'1/(1-Percentile)':>14}", ""]
    if h.get_total_count():
        for it in h.get_percentile_iterator(ticks_per_half_distance):
            value = it.value_iterated_to / _US_PER_MS
            q = it.percentile_level_iterated_to / 100
            if it.percentile_level_iterated_to < 100:
                lines.append(f"{value:12.{digits}f} {q:2.12f} {it.total_count_to_this_value:10d} {1 / (1 - q):14.2f}")
            else:
                lines.append(f"{value:12.{digits}f} {q:2.12f} {it.total_count_to_this_value:10d}")
    mean_us, std_us = mean_and_stddev(h)
    mean = mean_us / _US_PER_MS
    std = std_us / _US_PER_MS
    top = h.get_max_value() / _US_PER_MS
    lines.append(f"#[Mean    = {mean:12.{digits}f}, StdDeviation   = {std:12.{digits}f}]")
    lines.append(f"#[Max     = {top:12.{digits}f}, Total count    = {h.get_total_count():12d}]")
    lines.append(f"#[Buckets = {h.bucket_count:12d}, SubBuckets     = {h.sub_bucket_count:12d}]")
    return "\n".join(lines) + "\n"


def mean_and_stddev(h: HdrHistogram) -> tuple[float, float]:
    """`(h.get_mean_value(), h.get_stddev())`, the same floats, from one pass
    over the counts.

    hdrh walks every sub-bucket up to the maximum with its Python iterator,
    once for the mean and twice more for the deviation: about 0.1 s per
    histogram, most of the time `compare` spent after its passes (45 files;
    issue 20). Its recorded iterator visits exactly the indices with a
    nonzero count, in order, each at `get_highest_equivalent_value` of the
    index's value (the same equivalent range as the index's value itself); both sums here are formed in that order with hdrh's
    operations, so the floats are equal (held to hdrh by a property test)."""
    total_count = h.get_total_count()
    if not total_count:
        return 0.0, 0.0
    recorded = [(_median_equivalent(h, h.get_value_from_index(i)), c) for i, c in enumerate(h.counts[: h.counts_len]) if c]
    mean = float(sum(c * v for v, c in recorded)) / total_count
    deviation = 0.0
    for v, c in recorded:
        dev = (v * 1.0) - mean
        deviation += (dev * dev) * c
    return mean, math.sqrt(deviation / total_count)


def _median_equivalent(h: HdrHistogram, value: int) -> int:
    """The middle of `value`'s equivalent range, as hdrh's mean and deviation
    use it, from its public bounds: the range is `[lowest, highest]`, so its
    size is `highest - lowest + 1` (hdrh: `lowest + (size >> 1)`). Integer
    arithmetic, so equal to hdrh's own."""
    lowest: int = h.get_lowest_equivalent_value(value)
    highest: int = h.get_highest_equivalent_value(value)
    return lowest + ((highest - lowest + 1) >> 1)


def _write_text(path: Path, *, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def write_hgrms(out: Path, rows: Sequence[LevelRow]) -> list[Path]:
    """One `.hgrm` per row that has a histogram, under `out/hgrm/`; returns the
    files written (relative to `out`)."""
    written = []
    for r in rows:
        if r.histogram is None:
            continue
        rel = Path(HGRM_DIR) / r.workload / r.config / f"c{r.concurrency}.hgrm"
        (out / rel.parent).mkdir(parents=True, exist_ok=True)
        atomic_write(out / rel, functools.partial(_write_text, text=hgrm_text(r.histogram)))
        written.append(rel)
    return written
