"""`--repeat N` as N passes: each a fresh deployment with seed + k - 1,
interleaved across configurations (ABAB, not AABB), merged into one row per
level whose samples are the passes'."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

import sim.compare.runner
from sim.cli.main import app
from sim.compare.runner import PassOutput, RunOutput, run_pair, run_workload
from sim.load.run_config import RunConfig
from sim.runtime.workers import workers

if TYPE_CHECKING:
    from pathlib import Path

    from sim.compare.rows import LevelRow

CFG = RunConfig(mode="virtual", workloads=("insert",), concurrency=(1, 4), duration_s=0.01, warmup_s=0.005,
             warmup_ops=2, repeat=2, seed=5)


def test_compare_interleaves_passes_across_configurations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[tuple[str, str, int, int]] = []
    real = sim.compare.runner.run_pass

    def recording(cfg: RunConfig, config_name: str, workload_name: str, trace_dir: Path, **kw: Any) -> PassOutput:
        out = real(cfg, config_name, workload_name, trace_dir, **kw)
        order.append((workload_name, config_name, out.index, out.seed))
        return out

    monkeypatch.setattr(sim.compare.runner, "run_pass", recording)
    out = tmp_path / "out"
    # --jobs 1: the passes run here, where `recording` sees them (workers give
    # the same outputs: test_passes_on_workers_are_what_one_process_gives).
    r = CliRunner().invoke(app, ["compare", "--mode", "virtual", "--workloads", "select-one,insert", "--configs",
                                 "event-loop,decoupled", "--concurrency", "1,4", "--duration", "0.01", "--warmup",
                                 "0.005", "--repeat", "2", "--seed", "7", "--jobs", "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert order == [
        (wl, name, k, 7 + k - 1)
        for wl in ("select-one", "insert") for k in (1, 2) for name in ("event-loop", "decoupled")
    ]
    for wl in ("select-one", "insert"):
        for name in ("event-loop", "decoupled"):
            first = out / "traces" / wl / name
            metas = [json.loads((d / "meta.json").read_text()) for d in (first, first / "pass2")]
            assert [(m["pass"], m["seed"], m["run"]) for m in metas] == [
                (1, 7, f"{wl}/{name}"), (2, 8, f"{wl}/{name}/pass2")
            ]
    assert "passes interleaved across configurations" in (out / "report.md").read_text()


def test_a_row_merges_its_passes(tmp_path: Path) -> None:
    passes: list[PassOutput] = []
    outs = run_workload(CFG, ["event-loop", "decoupled"], "insert",
                        {"event-loop": tmp_path / "el", "decoupled": tmp_path / "d"},
                        on_pass=lambda name, p: passes.append(p) if name == "decoupled" else None)
    assert [(p.index, p.seed) for p in passes] == [(1, 5), (2, 6)]
    for i, row in enumerate(outs["decoupled"].rows):
        mine = [p.output.rows[i] for p in passes]
        assert all(m.repeats == 1 and m.concurrency == row.concurrency for m in mine)
        assert row.repeats == 2
        assert row.throughput_samples == tuple(m.throughput_ops_s for m in mine)
        assert row.throughput_ops_s == pytest.approx(sum(row.throughput_samples) / 2)
        assert row.throughput_ci95 is not None
        assert row.ops == sum(m.ops for m in mine)
        assert row.latency_samples == sum(m.latency_samples for m in mine)
        assert row.p50_samples_ms == tuple(m.p50_samples_ms[0] for m in mine)
        # Counters summed over the passes: the ratio lies between the passes'.
        ratios = [m.oracle_queries_per_op for m in mine]
        assert row.oracle_queries_per_op is not None
        known = [r for r in ratios if r is not None]
        assert len(known) == 2
        assert min(known) <= row.oracle_queries_per_op <= max(known)
    assert outs["decoupled"].trace_dir == tmp_path / "d"
    assert (tmp_path / "d" / "pass2" / "ops.parquet").is_file()


def test_a_pass_does_not_depend_on_what_ran_between(tmp_path: Path) -> None:
    """Virtual mode: each pass is its own deployment and seed, so a
    configuration's numbers are the same alone or interleaved with another."""
    alone = run_pair(CFG, "decoupled", "insert", tmp_path / "alone")
    both = run_workload(CFG, ["event-loop", "decoupled"], "insert",
                        {"event-loop": tmp_path / "el", "decoupled": tmp_path / "d"})
    assert alone.rows == both["decoupled"].rows


def test_fixed_ops_passes(tmp_path: Path) -> None:
    cfg = RunConfig(mode="virtual", concurrency=(1, 4), ops_per_level=5, warmup_ops=2, repeat=3)
    out = run_pair(cfg, "event-loop", "select-one", tmp_path / "t")
    assert [r.repeats for r in out.rows] == [3, 3]
    assert [len(r.throughput_samples) for r in out.rows] == [3, 3]
    assert sorted(p.name for p in (tmp_path / "t").iterdir() if p.is_dir()) == ["pass2", "pass3"]


def test_baseline_of_an_identical_run_passes_and_says_how(tmp_path: Path) -> None:
    args = ["compare", "--mode", "virtual", "--workloads", "insert", "--configs", "event-loop,decoupled",
            "--concurrency", "1,4", "--duration", "0.01", "--warmup", "0.005", "--repeat", "2", "--no-check"]
    first = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(app, [*args, "--baseline", str(tmp_path / "a"), "-o", str(tmp_path / "b")])
    assert again.exit_code == 0, again.output
    assert ("baseline: no regression: 0 of 8 comparisons beyond 20% and significant at family-wise 5% "
            "(Welch, one-sided; Holm)") in again.output


def test_passes_on_workers_are_what_one_process_gives(tmp_path: Path) -> None:
    """`run_workload` with a pool of worker processes: the same rows, latency
    histograms, callbacks in the same order, and byte-identical traces."""
    names = ["event-loop", "decoupled"]
    got: dict[int, tuple[dict[str, RunOutput], list[tuple[Any, ...]]]] = {}
    for jobs in (1, 2):
        seen: list[tuple[Any, ...]] = []

        def level(n: str, i: int, row: LevelRow, seen: list[tuple[Any, ...]] = seen) -> None:
            seen.append((n, i, row))

        def done(n: str, p: PassOutput, seen: list[tuple[Any, ...]] = seen) -> None:
            seen.append((n, p.index, p.seed, p.output.rows))

        with workers(jobs, preload="sim.compare.runner") as pool:
            assert (pool is None) == (jobs == 1)
            outs = run_workload(CFG, names, "insert", {n: tmp_path / f"j{jobs}" / n for n in names},
                                on_level=level, on_pass=done, pool=pool)
        got[jobs] = (outs, seen)
    (one, seen_one), (two, seen_two) = got[1], got[2]
    assert seen_two == seen_one
    assert len(seen_one) == 2 * 2 * (1 + 2)  # per pass: a pass callback and one per level
    for n in names:
        assert two[n].rows == one[n].rows
        assert two[n].events == one[n].events
        assert two[n].events
        for a, b in zip(one[n].rows, two[n].rows, strict=True):
            assert a.histogram is not None
            assert b.histogram is not None
            assert b.histogram.get_total_count() == a.histogram.get_total_count() > 0
            for q in (50, 99, 99.9, 100):
                assert b.histogram.get_value_at_percentile(q) == a.histogram.get_value_at_percentile(q)
    files = sorted(p.relative_to(tmp_path / "j1") for p in (tmp_path / "j1").rglob("*") if p.is_file())
    assert files
    assert files == sorted(p.relative_to(tmp_path / "j2") for p in (tmp_path / "j2").rglob("*") if p.is_file())
    for f in files:
        assert (tmp_path / "j2" / f).read_bytes() == (tmp_path / "j1" / f).read_bytes(), f
