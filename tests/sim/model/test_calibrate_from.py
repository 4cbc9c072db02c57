"""Issue 35, "one profile, two predictions": a real compare records each
coordinator handler's Python CPU per cell, `coordsim calibrate --from RUN_DIR`
turns the run into a profile of this host's Python coordinator (latencies with
their sources, per-configuration `[costs]`, provenance), virtual mode runs on
it, and a run directory that cannot give one is refused in one line, exit 2."""

from __future__ import annotations

import asyncio
import csv
import json
import sys
import time
import tomllib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from coordinator.config import Costs, Interpreter
from sim.cli.main import app, main
from sim.load.latency_profile import load_profile, profile_costs, profile_interpreter
from sim.load.run_config import RunConfig
from sim.model.from_run import DESCRIBES, costs_from_handlers, interpreter_from_cells
from sim.runtime.backend_stats import BackendStats
from sim.runtime.latency import TimerRealized

if TYPE_CHECKING:
    from pathlib import Path

REAL = ["--workloads", "select-one,insert", "--configs", "event-loop,decoupled", "--concurrency", "1,2",
        "--ops", "4", "--repeat", "2", "--seed", "1"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Path:
    """One small real compare, shared by the tests that read it."""
    out = tmp_path_factory.mktemp("real") / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COORDSIM_POSTGRES_URL", pg_url)
        r = CliRunner().invoke(app, ["compare", "--mode", "real", *REAL, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.postgres
def test_real_run_records_handler_cpu(real_run: Path) -> None:
    doc = json.loads((real_run / "summary.json").read_text())
    expect = {("select-one", "event-loop"): "client.Select", ("insert", "event-loop"): "client.Insert",
              ("select-one", "decoupled"): "statement.Select", ("insert", "decoupled"): "statement.Insert"}
    for cell in doc["cells"]:
        cpu = cell["handler_cpu"]
        kind = expect[(cell["workload"], cell["config"])]
        assert cpu[kind]["count"] >= cell["ops"], cell  # every measured statement, at least
        for h in cpu.values():
            assert set(h) == {"count", "total_ms", "mean_us"}
            assert h["count"] > 0
            assert h["total_ms"] >= 0
        if cell["config"] == "event-loop":  # the staged loop's own messages
            assert cpu["command.catalog_snapshot"]["count"] >= cell["ops"]
    with (real_run / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert all("=" in row["handler_cpu_us"] for row in rows)


def test_virtual_run_records_no_handler_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["compare", "--mode", "virtual", *REAL, "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "summary.json").read_text())
    assert all(cell["handler_cpu"] == {} and cell["handler_cpu_us"] == "" for cell in doc["cells"])


@pytest.mark.postgres
def test_calibrate_from_a_real_run(real_run: Path, tmp_path: Path) -> None:
    profile = tmp_path / "this-host.toml"
    r = CliRunner().invoke(app, ["calibrate", "--from", str(real_run), "-o", str(profile)])
    assert r.exit_code == 0, r.output
    data = tomllib.loads(profile.read_text())
    meta = data["meta"]
    assert meta["describes"] == DESCRIBES
    assert "NOT the published system" in profile.read_text().splitlines()[1]
    assert meta["run_dir"] == str(real_run.resolve())
    assert meta["fitted_levels"] == [1]
    assert meta["run"]["mode"] == "real"
    assert "load_avg_1m_start" in meta["provenance"]
    assert isinstance(meta["host_busy"], bool)
    # Recorded round trips are fitted, each naming its run and cells; the rest is carried.
    sources = meta["latency_sources"]
    for name in ("oracle.pg.read_ts", "consensus.head", "stash.txn"):
        assert sources[name].startswith(f"run {real_run.resolve()}: "), name
        assert "@1" in sources[name]
        assert data["latency"][name]["kind"] == "lognormal"
    assert sources["blob.get"].startswith("carried from ")
    # Costs: the run's modeled ones plus the Python CPU measured per handler.
    for config in ("event-loop", "decoupled"):
        costs = data["costs"][config]
        assert costs["parse_plan"] > Costs().parse_plan
        assert costs["loop_dispatch"] == pytest.approx(Costs().loop_dispatch)
        assert meta["cost_sources"][config].startswith(f"run {real_run.resolve()}: ")
    assert data["cpu"]["cores"] >= 1
    # The process's one interpreter, per configuration and workload.
    for config in ("event-loop", "decoupled"):
        for wl in ("select-one", "insert"):
            fit = data["interpreter"][config][wl]
            assert set(fit) == {"python_share", "base_cores", "per_op_s", "slice_s"}
            assert 0 < fit["python_share"] < 1
            # A background step, from the run's loop lag: well under the 10 ms
            # a step was assumed to take before it was measured.
            assert 2e-5 <= fit["slice_s"] < 0.005
            assert meta["cost_sources"][f"interpreter.{config}.{wl}"].startswith(f"run {real_run.resolve()}: ")
    # How the run's host realized timers (its provenance's probe), applied to
    # the latencies real mode realizes as timers.
    assert set(data["timer"]) == {"granularity_ms", "overshoot_ms"}
    assert meta["timer_source"].startswith(f"run {real_run.resolve()}: ")
    # Virtual mode reads it: latencies, cores, and each configuration's costs.
    model = load_profile(profile)
    assert isinstance(model.distribution("replica.command"), TimerRealized)
    assert not isinstance(model.distribution("oracle.pg.read_ts"), TimerRealized)
    cfg = RunConfig(mode="virtual", configurations=("event-loop", "decoupled"), latency_profile=str(profile))
    assert cfg.coordinator("event-loop").costs.parse_plan == pytest.approx(data["costs"]["event-loop"]["parse_plan"])
    assert cfg.coordinator("decoupled").cores == data["cpu"]["cores"]
    assert cfg.coordinator("decoupled", "insert").interpreter is not None
    out = tmp_path / "virtual"
    r = CliRunner().invoke(app, ["compare", "--mode", "virtual", *REAL, "--latency-profile", str(profile),
                                 "-o", str(out)])
    assert r.exit_code == 0, r.output


def _coordsim(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    """The real entry point in process (errors map to one line and exit 2)."""
    monkeypatch.setattr(sys, "argv", ["coordsim", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def _summary(**changes: Any) -> str:
    doc: dict[str, Any] = {"generator": "coordsim compare", "mode": "real", "configurations": ["event-loop"],
                           "cells": [{"workload": "insert", "config": "event-loop", "concurrency": 1, "backend": {}}]}
    doc.update(changes)
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("summary", "needle"),
    [
        (None, "no summary.json"),
        ("{not json", "summary.json is unreadable"),
        (json.dumps({"generator": "coordsim run"}), "not written by `coordsim compare`"),
        (_summary(mode="virtual"), "a 'virtual'-mode run"),
        (_summary(), "no cell recorded backend round trips"),
    ],
)
def test_bad_run_dirs_exit_2(
    tmp_path: Path, summary: str | None, needle: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    if summary is not None:
        (run / "summary.json").write_text(summary)
    out = tmp_path / "p.toml"
    code, err = _coordsim(capsys, monkeypatch, "calibrate", "--from", str(run), "-o", str(out))
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_levels_needs_from(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = _coordsim(capsys, monkeypatch, "calibrate", "--levels", "1", "-o", str(tmp_path / "p.toml"))
    assert code == 2
    assert "--levels applies only with --from" in err


def test_costs_from_handlers_maps_each_handler_to_its_cost() -> None:
    us = 1e-6
    loop = costs_from_handlers("event-loop", {
        "client.Select": (10, 100 * 10 * us), "client.Insert": (10, 60 * 10 * us),
        "command.catalog_snapshot": (20, 20 * 10 * us), "command.commit": (20, 20 * 12 * us),
        "internal.stage.ready": (10, 10 * 30 * us), "response": (10, 10 * 15 * us), "confirm_flush": (4, 50 * us),
        "internal.trigger_group_commit.initiate": (5, 5 * 40 * us), "internal.downgrade_on_loop": (5, 5 * 20 * us),
    })
    assert loop == pytest.approx({
        "parse_plan": 60 * us, "peek_sequence": 40 * us, "catalog_snapshot": 10 * us, "commit": 12 * us,
        "peek_stage": 30 * us, "controller_response": 20 * us, "group_commit": 60 * us,
    })
    decoupled = costs_from_handlers("decoupled", {"statement.Select": (4, 4 * 80 * us),
                                                  "statement.Insert": (2, 2 * 90 * us), "group_commit": (2, 0.001)})
    assert decoupled == pytest.approx({"parse_plan": 80 * us, "write_sequence": 10 * us, "group_commit": 500 * us})


def test_profile_costs_layer_under_the_runs_own(tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text('[costs]\nparse_plan = 0.001\n\n[costs."decoupled"]\nparse_plan = 0.002\ncommit = 0.003\n'
                       '\n[latency."default"]\nkind = "constant"\nms = 0.0\n')
    assert profile_costs(profile, "event-loop") == {"parse_plan": 0.001}
    assert profile_costs(profile, "decoupled") == {"parse_plan": 0.002, "commit": 0.003}
    cfg = RunConfig(mode="virtual", latency_profile=str(profile))
    assert cfg.coordinator("decoupled").costs.parse_plan == 0.002
    assert cfg.with_overrides(costs={"parse_plan": 0.5}).coordinator("decoupled").costs.parse_plan == 0.5
    # Real mode runs a coordinator: its modeled CPU stays `Costs`.
    assert RunConfig(mode="real", latency_profile=str(profile)).coordinator("decoupled").costs == Costs()
    profile.write_text('[costs]\nbogus = 1.0\n[latency."default"]\nkind = "constant"\nms = 0.0\n')
    with pytest.raises(ValueError, match="unknown cost 'bogus'"):
        profile_costs(profile, "event-loop")


def test_timed_handler_counts_only_its_own_steps() -> None:
    """A handler's CPU excludes what other tasks burn while it awaits; values,
    exceptions and cancellation pass through."""
    stats = BackendStats()

    def burn(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    async def handler() -> int:
        burn(0.01)
        await asyncio.sleep(0.05)  # meanwhile `other` burns 0.05 s
        return 7

    async def other() -> None:
        await asyncio.sleep(0)
        burn(0.05)

    async def failing() -> None:
        await asyncio.sleep(0)
        raise KeyError("x")

    async def main() -> None:
        results = await asyncio.gather(stats.timed("h", handler()), other())
        assert results[0] == 7
        with pytest.raises(KeyError):
            await stats.timed("f", failing())
        task = asyncio.ensure_future(stats.timed("c", asyncio.sleep(10)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    window = stats.since(BackendStats().mark())
    by = {h.kind: h for h in window.handlers()}
    assert by["h"].count == 1
    assert 0.009 <= by["h"].total_ms / 1000 < 0.04  # its 10 ms, not `other`'s 50
    assert by["f"].count == by["c"].count == 1


def _cell(thr: float, cpu: float, handler_ms: float, ops: int) -> dict[str, Any]:
    return {"throughput_ops_s": thr, "coordsim_cpu": cpu, "ops": ops // 2,
            "handler_cpu": {"statement.Select": {"count": ops, "total_ms": handler_ms, "mean_us": 0.0}}}


def test_interpreter_fit_recovers_base_and_per_op_load() -> None:
    """The process's CPU is base + k x throughput; per-op is k less the
    handlers' own Python (the costs carry that part)."""
    cells = [_cell(thr, 0.2 + 0.0004 * thr, handler_ms=100 * 0.1, ops=100) for thr in (100.0, 400.0, 1600.0)]
    fit = interpreter_from_cells(cells, python_share=0.6)
    assert fit is not None
    assert fit["base_cores"] == pytest.approx(0.2, abs=1e-3)
    assert fit["per_op_s"] == pytest.approx(0.0004 - 0.0001, rel=1e-3)
    assert fit["python_share"] == 0.6
    # A negative intercept goes through the origin; one cell is not a fit.
    through = interpreter_from_cells([_cell(100.0, 0.05, 0.0, 10), _cell(200.0, 0.2, 0.0, 10)], python_share=0.5)
    assert through is not None
    assert through["base_cores"] == 0.0
    assert through["per_op_s"] > 0
    assert interpreter_from_cells([_cell(100.0, 0.1, 0.0, 10)], python_share=0.5) is None


def test_a_rate_that_does_not_vary_puts_the_cpu_on_the_statements() -> None:
    """A workload whose rate a lock fixes (UPDATE at 90-100/s at every level)
    cannot split base from per-statement load: all of it goes on the
    statements, not into a background that no statement would wait for."""
    cells = [_cell(thr, 0.65, handler_ms=0.0, ops=100) for thr in (92.0, 96.0, 93.0)]
    fit = interpreter_from_cells(cells, python_share=0.4)
    assert fit is not None
    assert fit["base_cores"] == 0.0
    assert fit["per_op_s"] == pytest.approx(0.65 / 93.7, rel=0.02)


def test_the_background_step_is_twice_the_loop_lag_less_the_timer_overshoot() -> None:
    cells = [{**_cell(thr, 0.2 + 0.0004 * thr, 0.0, 100), "loop_lag_ms": lag}
             for thr, lag in ((100.0, 0.25), (400.0, 0.35), (1600.0, 0.3))]
    fit = interpreter_from_cells(cells, python_share=0.5, timer_overshoot_ms=0.1)
    assert fit is not None
    assert fit["slice_s"] == pytest.approx(2 * (0.3 - 0.1) / 1000)


def test_profile_interpreter_is_per_configuration_and_workload(tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text('[interpreter."decoupled"."select-one"]\npython_share = 0.5\nbase_cores = 0.25\n'
                       'per_op_s = 0.0001\n\n[latency."default"]\nkind = "constant"\nms = 0.0\n')
    assert profile_interpreter(profile, "decoupled", "select-one") == Interpreter(0.5, 0.25, 0.0001)
    assert profile_interpreter(profile, "decoupled", "insert") is None
    cfg = RunConfig(mode="virtual", latency_profile=str(profile))
    assert cfg.coordinator("decoupled", "select-one").interpreter == Interpreter(0.5, 0.25, 0.0001)
    assert cfg.coordinator("decoupled").interpreter is None  # no workload named: none applies
    # Real mode runs a real interpreter.
    assert RunConfig(mode="real", latency_profile=str(profile)).coordinator("decoupled", "select-one").interpreter is None
    profile.write_text('[interpreter."decoupled"."select-one"]\nbase_cores = "lots"\n'
                       '[latency."default"]\nkind = "constant"\nms = 0.0\n')
    with pytest.raises(ValueError, match="must map"):
        profile_interpreter(profile, "decoupled", "select-one")
    profile.write_text('[interpreter."decoupled"."select-one"]\nbase_cores = 1.5\n'
                       '[latency."default"]\nkind = "constant"\nms = 0.0\n')
    with pytest.raises(ValueError, match="base_cores"):
        profile_interpreter(profile, "decoupled", "select-one")


def test_one_interpreter_caps_python_bound_cores() -> None:
    """Real mode's Python runs on one thread: a CPU-bound decoupled adapter
    with two modeled cores whose costs are all Python gets what one core
    gets; with none of it Python, the second core counts; and background
    interpreter load takes its share."""
    from sim.model.experiments import throughput
    from sim.model.validate import _config

    def ops(cores: int, interp: Interpreter | None) -> float:
        cfg = _config("decoupled", {"cores": cores})
        cfg = cfg.with_overrides(costs=replace(cfg.costs, parse_plan=0.002), interpreter=interp)
        return throughput(cfg, "select-constant", clients=16).ops_per_s

    one, two = ops(1, None), ops(2, None)
    all_python = ops(2, Interpreter(python_share=1.0))
    no_python = ops(2, Interpreter(python_share=0.0))
    half_busy = ops(2, Interpreter(python_share=1.0, base_cores=0.5))
    print(f"select-constant, 2 ms parse_plan: 1 core {one:.0f}, 2 cores {two:.0f}, 2 cores all Python "
          f"{all_python:.0f}, none Python {no_python:.0f}, all Python + 0.5 background {half_busy:.0f} ops/s")
    assert two > 1.8 * one
    assert all_python == pytest.approx(one, rel=0.1)
    assert no_python == pytest.approx(two, rel=0.1)
    assert half_busy == pytest.approx(one / 2, rel=0.15)
