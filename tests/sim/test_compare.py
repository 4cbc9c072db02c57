"""`coordsim compare` end to end (virtual and real mode) with the report's
numbers checked against the Parquet traces, determinism, the load generators'
accounting, and bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import csv
import math
import sys
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sim.cli import app, main
from sim.config import Config
from sim.loadgen import closed_loop, open_loop, ops_for_level
from sim.report import COLUMNS
from sim.runner import level_ops, run_pair
from sim.runtime import Runtime, run

if TYPE_CHECKING:
    from pathlib import Path

TINY = ["--workloads", "select-one,insert", "--configs", "event-loop,event-loop+pg-oracle",
        "--concurrency", "1,4", "--ops", "3", "--warmup", "2"]


def _check_output(out: Path, mode: str) -> None:
    with (out / "results.csv").open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == COLUMNS
        rows = list(reader)
    assert len(rows) == 2 * 2 * 2
    for row in rows:
        assert row["mode"] == mode
        c = int(row["concurrency"])
        ops = pq.read_table(out / "traces" / row["workload"] / row["config"] / "ops.parquet").to_pylist()
        mine = [o for o in ops if (o["client"] or "").startswith(f"L{c}/")]
        assert len(mine) == int(row["ops"]) == level_ops(Config(ops_per_level=3), row["workload"], c)
        assert all(o["status"] == "ok" for o in mine)
        lat = sorted((o["complete_ns"] - o["invoke_ns"]) / 1e6 for o in mine)
        # HdrHistogram: 3 significant digits; its p50 is the value at rank ceil(n/2).
        p50 = lat[math.ceil(len(lat) * 0.5) - 1]
        if mode == "virtual":
            # The generator and the recorder read the same clock at the same instants.
            assert float(row["p50_ms"]) == pytest.approx(p50, rel=0.01, abs=0.002)
            assert float(row["p999_ms"]) == pytest.approx(lat[-1], rel=0.01, abs=0.002)
        else:
            # Real time passes between them (parsing, recording), and the
            # generator's interval encloses the recorder's, op by op, so every
            # order statistic is at least the trace's (HdrHistogram: 3 digits).
            assert float(row["p50_ms"]) >= p50 * 0.999
            assert float(row["p999_ms"]) >= lat[-1] * 0.999
        span = (max(o["complete_ns"] for o in mine) - min(o["invoke_ns"] for o in mine)) / 1e9
        assert float(row["elapsed_s"]) >= span * 0.999
        assert float(row["throughput_ops_s"]) == pytest.approx(int(row["ops"]) / float(row["elapsed_s"]), rel=1e-3)
        assert float(row["oracle_queries_per_op"]) > 0
        events = pq.read_table(out / "traces" / row["workload"] / row["config"] / "events.parquet")
        assert events.num_rows > 0
    report = (out / "report.md").read_text()
    assert "select-one-throughput.png" in report
    assert (out / "select-one-throughput.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(out.parent.glob(f".{out.name}.tmp-*"))


def test_compare_cli_virtual(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["compare", "--mode", "virtual", *TINY, "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "select-one" in r.output
    _check_output(out, "virtual")


@pytest.mark.postgres
def test_compare_cli_real(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDSIM_POSTGRES_URL", pg_url)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["compare", "--mode", "real", *TINY, "-o", str(out)])
    assert r.exit_code == 0, r.output
    _check_output(out, "real")


def test_same_seed_same_trace(tmp_path: Path) -> None:
    cfg = Config(mode="virtual", workloads=("insert",), concurrency=(1, 4), ops_per_level=3, warmup_ops=2)
    a = run_pair(cfg, "decoupled", "insert", tmp_path / "a")
    b = run_pair(cfg, "decoupled", "insert", tmp_path / "b")
    assert a.rows == b.rows
    for name in ("ops.parquet", "events.parquet"):
        assert pq.read_table(tmp_path / "a" / name).equals(pq.read_table(tmp_path / "b" / name))


def test_open_loop_charges_a_stall_to_every_delayed_operation() -> None:
    """A system that stalls for 1 s once: with one connection, the ~100
    operations due during the stall wait for it, and the open loop counts that
    wait (a closed loop would report one slow operation)."""

    async def main(rt: Runtime) -> tuple[float, float, int]:
        stalled = [False]

        async def op(client: int, k: int) -> bool:
            if not stalled[0]:
                stalled[0] = True
                await rt.sleep(1.0)
            else:
                await rt.sleep(0.0005)
            return True

        res = await open_loop(rt, op, rate=100.0, ops=300, max_in_flight=1)
        return res.percentile_ms(75), res.percentile_ms(100), res.ops

    p75, worst, n = run(main, seed=3)
    assert n == 300
    assert worst >= 990
    assert p75 >= 100  # a quarter of all operations waited >= 100 ms for the stall

    async def closed(rt: Runtime) -> float:
        first = [True]

        async def op(client: int, k: int) -> bool:
            await rt.sleep(1.0 if first[0] else 0.0005)
            first[0] = False
            return True

        return (await closed_loop(rt, op, concurrency=1, ops=300)).percentile_ms(75)

    assert run(closed, seed=3) < 1  # the omission the open loop avoids


def test_ops_for_level_scales_with_sqrt() -> None:
    assert [ops_for_level(16, c) for c in (1, 4, 16, 256)] == [16, 32, 64, 256]


def _coordsim(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str]:
    """Runs the real entry point (`sim.cli.main`, which maps errors to exit 2) in process."""
    monkeypatch.setattr(sys, "argv", ["coordsim", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--workloads", "nope"], "unknown workload 'nope'"),
        (["--configs", "nope"], "unknown configuration 'nope'"),
        (["--config-file", "{bad}"], "bad TOML"),
        (["--concurrency", "0"], "concurrency levels must be >= 1"),
        (["--mode", "real", "--env-url"], "cannot reach Postgres"),
        (["--output", "{file}/out"], "not writable"),
        # Typer's own usage errors: one line too, not a boxed usage screen.
        (["--bogus"], "No such option: --bogus"),
        (["--seed", "abc"], "Invalid value for '--seed'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    args: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("mode = [unclosed\n")
    f = tmp_path / "file"
    f.write_text("")
    if "--env-url" in args:
        args = [a for a in args if a != "--env-url"]
        monkeypatch.setenv("COORDSIM_POSTGRES_URL", "postgresql://nobody@127.0.0.1:1/none")
    args = [a.replace("{bad}", str(bad)).replace("{file}", str(f)) for a in args]
    out = tmp_path / "out"
    if "--output" not in args:
        args += ["--output", str(out)]
    if "--mode" not in args:
        args = ["--mode", "virtual", *args]
    code, err = _coordsim(capsys, monkeypatch, "compare", *args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0], err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml", "file"]


def test_config_show_reads_toml_and_flags(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('mode = "virtual"\nworkloads = ["update"]\nseed = 7\n[costs]\nparse_plan = 0.0002\n')
    r = CliRunner().invoke(app, ["config", "show", "--config-file", str(f), "--seed", "9"])
    assert r.exit_code == 0, r.output
    assert 'mode = "virtual"' in r.output
    assert "seed = 9" in r.output
    assert 'workloads = ["update"]' in r.output
    assert "parse_plan = 0.0002" in r.output
    again = tmp_path / "again.toml"
    again.write_text(r.output)
    assert Config.from_toml(again).seed == 9


def test_run_seed001_scenario(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["run", "seed001_ddl_then_dml", "--config", "decoupled", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "trace" / "ops.parquet").is_file()
    assert "FAIL" not in (out / "verdict.txt").read_text()


def test_baseline_flags_a_drop_of_more_than_20_percent() -> None:
    from sim.report import compare_baseline
    from sim.runner import LevelRow

    def row(c: int, thr: float) -> LevelRow:
        return LevelRow("insert", "decoupled", "virtual", c, 10, 0, 10 / thr, thr, 1.0, 2.0, 3.0, 0.5, 0.1)

    base = [{"workload": "insert", "config": "decoupled", "concurrency": str(c), "throughput_ops_s": "100"}
            for c in (1, 2)]
    flagged = compare_baseline([row(1, 81.0), row(2, 79.0)], base)
    assert len(flagged) == 1
    assert "c=2" in flagged[0]


@pytest.mark.postgres
def test_calibrate_writes_a_profile_virtual_mode_reads(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sim.config import load_profile

    monkeypatch.setenv("COORDSIM_POSTGRES_URL", pg_url)
    out = tmp_path / "p.toml"
    r = CliRunner().invoke(app, ["calibrate", "--samples", "5", "-o", str(out)])
    assert r.exit_code == 0, r.output
    model = load_profile(out)
    for name in ("oracle.pg.read_ts", "stash.txn", "consensus.cas", "blob.get"):
        assert model.configures(name)
        assert model.distribution(name).mean() > 0


def test_unknown_scenario_is_invalid_usage() -> None:
    from persist.location import InvalidUsage
    from sim.scenarios import load, shipped

    assert "seed001_ddl_then_dml" in shipped()
    with pytest.raises(InvalidUsage, match="unknown scenario"):
        load("no-such-scenario")
    assert load("update").workload == "update"  # type: ignore[union-attr]
