"""Uncensored latency and checked steady state (issue 33): every operation a
window starts is measured to its completion (or counted as censored past
the drain limit), windows grow until a level is steady, and the numbers of
`coordsim compare` agree with Little's law and with the run's own traces."""

from __future__ import annotations

import csv
import json
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.load import steady
from sim.load.loadgen import (
    Moments,
    Window,
    measure_closed,
    measure_open,
    new_histogram,
    values_at_percentiles,
)
from sim.runtime.core import Runtime, run

if TYPE_CHECKING:
    from pathlib import Path


# --- the checks -------------------------------------------------------------------------


def test_littles_law_band_is_fifteen_percent() -> None:
    assert steady.littles_note(1.0) == ""
    assert steady.littles_note(0.86) == ""
    assert steady.littles_note(1.14) == ""
    assert "1.20" in steady.littles_note(1.2)
    assert steady.littles_note(0.8)
    assert steady.littles_note(None)


def test_window_must_be_ten_mean_latencies() -> None:
    assert steady.window_note(1.0, 0.1) == ""
    assert "5.0x" in steady.window_note(1.0, 0.2)
    assert steady.window_note(1.0, None) == ""


def test_halves_allow_a_batch_but_not_a_trend() -> None:
    # Batches of 64 completing at once, 3 or 4 to a slice: one batch more in
    # the first half than in the second is the system's granularity.
    batched = [steady.Slices((192, 256, 192, 256, 256, 192, 256, 192, 256, 192), 0.2)] * 3
    assert steady.halves_note(batched, 0.0) == ""
    # A steady climb of the same size over smooth slices is a trend.
    trend = [steady.Slices((100, 101, 99, 100, 100, 110, 111, 109, 110, 110), 0.1)] * 3
    assert "halves differ" in steady.halves_note(trend, 0.0)
    # ...unless the passes disagree more than that among themselves.
    assert steady.halves_note(trend, 50_000.0) == ""
    # One pass alone is judged by its own slices.
    assert "halves differ" in steady.halves_note(trend[:1], None)


def test_growth_at_least_doubles_and_respects_the_cap() -> None:
    assert steady.grown_length(0.2, 0.001, 30.0) == 0.4
    assert steady.grown_length(0.2, 1.3, 30.0) == pytest.approx(1.25 * 10 * 1.3)
    assert steady.grown_length(20.0, 5.0, 30.0) == 30.0


def test_saturation_by_shortfall_or_growing_latency() -> None:
    ok = steady.saturation_note(arrivals=1000, completions=990, first_mean_s=0.01, second_mean_s=0.011,
                                first_n=500, second_n=500)
    assert ok == ""
    assert "saturated" in steady.saturation_note(arrivals=1000, completions=700, first_mean_s=0.01,
                                                 second_mean_s=0.01, first_n=500, second_n=500)
    assert "grew" in steady.saturation_note(arrivals=1000, completions=990, first_mean_s=0.01,
                                            second_mean_s=0.05, first_n=500, second_n=500)


def test_moments_merge_as_the_pooled_sample() -> None:
    xs, ys = [0.1, 0.2, 0.4], [1.0, 3.0]
    a, b, pooled = Moments(), Moments(), Moments()
    for x in xs:
        a.add(x)
        pooled.add(x)
    for y in ys:
        b.add(y)
        pooled.add(y)
    m = a.merged(b)
    assert (m.n, m.least, m.greatest) == (5, 0.1, 3.0)
    assert m.mean == pytest.approx(pooled.mean)
    assert m.stdev == pytest.approx(pooled.stdev)


# --- the load generators ----------------------------------------------------------------


def test_closed_loop_measures_every_operation_it_starts_to_completion() -> None:
    """Operations of 0.3 s in a 1 s window: before, only those completing in
    the window counted; now each one started in it is measured, including
    those completing after it, and none starts after the window."""
    starts: list[float] = []

    async def main(rt: Runtime) -> list[int]:
        async def op(c: int, k: int) -> None:
            starts.append(rt.now())
            await rt.sleep(0.3)

        w = Window(warmup_s=0.5, duration_s=1.0)
        (r,) = await measure_closed(rt, op, concurrency=4, window=w)
        assert rt.now() < 0.5 + 1.0 + 0.3 + 1e-9  # the drain is the measured work only
        return [r.measured, r.censored, round(r.latency.mean * 1000)]

    measured, censored, mean_ms = run(main, virtual=True)
    # Each client starts at 0.6, 0.9, 1.2 (and 1.5 is not < 1.5): 3 each in the window.
    assert measured == 4 * 3
    assert censored == 0
    assert mean_ms == 300
    assert max(starts) < 1.5


def test_drain_limit_counts_stragglers_as_censored_at_their_lower_bound() -> None:
    async def main(rt: Runtime) -> tuple[int, float, float]:
        async def op(c: int, k: int) -> None:
            await rt.sleep(50.0 if c == 0 and rt.now() >= 0.1 else 0.01)

        w = Window(warmup_s=0.1, duration_s=1.0, drain_s=2.0)
        (r,) = await measure_closed(rt, op, concurrency=2, window=w)
        return r.censored, r.latency.greatest, rt.now()

    censored, longest, _ = run(main, virtual=True)
    assert censored == 1
    # Started at 0.1, censored at the window's end (1.1) + 2 s of drain.
    assert longest == pytest.approx(3.0, abs=0.011)


def test_window_grows_until_littles_law_and_length_hold() -> None:
    """256 clients behind one server of 5 ms each: a mean latency of ~1.28 s,
    so a 0.2 s window is 0.16 mean latencies. It must grow to 10x."""

    async def main(rt: Runtime) -> tuple[float, float | None, int]:
        busy = [0.0]

        async def op(c: int, k: int) -> None:
            start = max(rt.now(), busy[0])
            busy[0] = start + 0.005
            await rt.sleep(busy[0] - rt.now())

        w = Window(warmup_s=0.05, duration_s=0.2, max_duration_s=30.0)
        (r,) = await measure_closed(rt, op, concurrency=256, window=w)
        return r.elapsed_s, r.littles_law_ratio, r.censored

    length, ratio, censored = run(main, virtual=True)
    assert length >= 10 * 1.28
    assert ratio == pytest.approx(1.0, abs=0.15)
    assert censored == 0


def test_open_loop_charges_intended_start_and_censors_the_backlog() -> None:
    async def main(rt: Runtime) -> tuple[int, int, float]:
        async def op(c: int, k: int) -> None:
            await rt.sleep(0.02)  # one slot of 20 ms against 100 arrivals/s: saturated

        w = Window(warmup_s=0.0, duration_s=1.0, drain_s=0.5)
        (r,) = await measure_open(rt, op, rate=100.0, max_in_flight=1, window=w)
        return r.measured, r.censored, r.ops

    measured, censored, ops = run(main, seed=3, virtual=True)
    assert censored > 0  # the backlog at the drain limit
    assert ops < measured  # fewer completed in the window than arrived in it


# --- compare end to end -----------------------------------------------------------------


def _check_steady_cells_against_traces(out: Path) -> list[dict[str, str]]:
    """Every cell steady, Little's law within 15 %, and p50 the median of the
    traced operations started in the cell's windows (within one bucket)."""
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows
    for row in rows:
        cell = f"{row['workload']} {row['config']} c={row['concurrency']}"
        assert row["steady"] == "true", f"{cell}: {row['steady_note']}"
        assert 0.85 <= float(row["littles_law_ratio"]) <= 1.15, cell
        assert float(row["window_s"]) >= 10 * float(row["mean_ms"]) / 1000, cell
        assert row["censored"] == "0", cell
        c = int(row["concurrency"])
        base = out / "traces" / row["workload"] / row["config"]
        latencies: list[float] = []
        for trace in [base, *sorted(base.glob("pass*"))]:
            meta = json.loads((trace / "meta.json").read_text())
            windows = [(w["start_s"] * 1e9, w["end_s"] * 1e9) for w in meta["windows"] if w["concurrency"] == c]
            assert len(windows) == 1
            lo, hi = windows[0]
            ops = pq.read_table(trace / "ops.parquet", columns=["client", "invoke_ns", "complete_ns"]).to_pylist()
            latencies += [(o["complete_ns"] - o["invoke_ns"]) / 1e3 for o in ops
                          if (o["client"] or "").startswith(f"L{c}/") and lo <= o["invoke_ns"] < hi]
        assert len(latencies) == int(row["latency_samples"]), cell
        h = new_histogram()
        for us in latencies:
            h.record_value(max(1, round(us)))
        (median,) = values_at_percentiles(h, (50,))
        bucket = h.get_highest_equivalent_value(median) - h.get_lowest_equivalent_value(median) + 1
        assert abs(float(row["p50_ms"]) * 1000 - median) <= bucket, cell
    return rows


def test_compare_cells_are_steady_and_match_their_traces(tmp_path: Path) -> None:
    """The issue's check on a smaller sweep (the full one is the slow test
    below): windows grow until every cell is steady."""
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["compare", "-w", "update,insert", "--configs", "event-loop,decoupled",
                                      "--concurrency", "16,64", "--repeat", "2", "--no-check", "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = _check_steady_cells_against_traces(out)
    grown = [r for r in rows if float(r["window_s"]) > 0.2]
    assert grown, "the event loop's updates at 64 clients need a window longer than 0.2 s"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["conclusions"]["reference"] == "event-loop"
    # Under CliRunner the command line is pytest's: a real run records its own.
    assert summary["provenance"]["command"].split(" ")[0] == "coordsim"
    assert summary["provenance"]["git_commit"]
    report = (out / "report.md").read_text()
    assert "## Conclusions" in report
    assert "## Provenance" in report


@pytest.mark.slow
def test_the_issue_sweep_is_steady_in_every_cell(tmp_path: Path) -> None:
    """`coordsim compare -w update,insert --concurrency 64,256` (virtual,
    defaults otherwise): every cell steady, Little's law and the traces agree."""
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["compare", "-w", "update,insert", "--concurrency", "64,256", "--no-check",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    _check_steady_cells_against_traces(out)
