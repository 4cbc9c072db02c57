"""`coordsim compare` end to end (virtual and real mode) with the report's
numbers checked against the Parquet traces, determinism, the load generators'
accounting, and bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import csv
import json
import math
import tomllib
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.compare.report import COLUMNS
from sim.compare.rows import LevelRow
from sim.compare.runner import level_ops
from sim.load.loadgen import closed_loop, open_loop, ops_for_level
from sim.load.run_config import RunConfig
from sim.runtime.core import Runtime, run

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sim.compare.runner import RunOutput
    from tests.sim.compare.conftest import Ran

TINY = ["--workloads", "select-one,insert", "--configs", "event-loop,event-loop+pg-oracle",
        "--concurrency", "1,4", "--ops", "3", "--repeat", "2", "--seed", "1"]


def _check_output(out: Path, mode: str) -> None:
    with (out / "results.csv").open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == COLUMNS
        rows = list(reader)
    assert len(rows) == 2 * 2 * 2
    for row in rows:
        assert row["mode"] == mode
        assert row["verdict"] == "valid"
        assert row["errors"] == "0"
        assert row["repeats"] == "2"
        c = int(row["concurrency"])
        # Two passes, each a fresh deployment with its own trace and seed.
        traces = [out / "traces" / row["workload"] / row["config"] / sub for sub in ("", "pass2")]
        metas = [json.loads((t / "meta.json").read_text()) for t in traces]
        assert [(m["pass"], m["passes"], m["seed"]) for m in metas] == [(1, 2, 1), (2, 2, 2)]
        ops = [o for t in traces for o in pq.read_table(t / "ops.parquet").to_pylist()]
        mine = [o for o in ops if (o["client"] or "").startswith(f"L{c}/")]
        per_window = level_ops(RunConfig(ops_per_level=3), row["workload"], c)
        assert len(mine) == int(row["ops"]) == 2 * per_window == int(row["latency_samples"])
        assert all(o["status"] == "ok" for o in mine)
        lat = sorted((o["complete_ns"] - o["invoke_ns"]) / 1e6 for o in mine)
        # HdrHistogram: 3 significant digits; p50 is shown from 20 samples on.
        p50 = lat[math.ceil(len(lat) * 0.5) - 1]
        if len(lat) >= 20:
            if mode == "virtual":
                # The generator and the recorder read the same clock at the same instants.
                assert float(row["p50_ms"]) == pytest.approx(p50, rel=0.01, abs=0.002)
            else:
                # The generator's interval encloses the recorder's, op by op.
                assert float(row["p50_ms"]) >= p50 * 0.999
        else:
            assert row["p50_ms"] == ""  # too few samples to estimate
        assert row["p999_ms"] == ""  # never 10 samples beyond p99.9 in so few
        samples = [float(x) for x in row["throughput_samples"].split(";")]
        assert len(samples) == 2
        assert float(row["throughput_ops_s"]) == pytest.approx(sum(samples) / 2, rel=1e-4)
        assert float(row["throughput_ci95"]) >= 0
        assert float(row["oracle_queries_per_op"]) > 0
        for t in traces:
            assert pq.read_table(t / "events.parquet").num_rows > 0
        _check_backend(row, metas, mode)
    report = (out / "report.md").read_text()
    assert "select-one-throughput.png" in report
    assert "[configuration.event-loop]" in report  # every knob, in the report
    assert 'group_commit = "immediate"' in (out / "config.toml").read_text()
    assert (out / "select-one-throughput.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(out.parent.glob(f".{out.name}.tmp-*"))


def _check_backend(row: dict[str, str], metas: list[dict[str, object]], mode: str) -> None:
    """Issue 35: real mode reports its isolation level, the 40001 retries and
    the backends' round trips per kind; virtual mode leaves them empty."""
    if mode == "virtual":
        assert row["pg_isolation"] == row["retries_40001"] == row["backend_ms"] == row["oracle_rtt_n"] == ""
        assert all(m["pg_isolation"] is None for m in metas)
        return
    assert row["pg_isolation"] == "serializable"
    assert all(m["pg_isolation"] == "serializable" for m in metas)
    assert int(row["retries_40001"]) <= int(row["backend_retries"])
    # A SELECT touches persist only through the periodic table advancement,
    # which a short cell on a loaded host may miss: a count, not a promise.
    assert int(row["consensus_n"]) >= 0
    kinds = dict(part.split("=", 1) for part in row["backend_ms"].split(";"))
    assert sum(int(v.split("/")[0]) for k, v in kinds.items() if k.startswith("consensus.")) == int(row["consensus_n"])
    if row["config"] == "event-loop+pg-oracle":  # the Postgres oracle: its statements by kind
        assert int(row["oracle_rtt_n"]) > 0
        assert float(row["oracle_rtt_p50_ms"]) <= float(row["oracle_rtt_p99_ms"])
        by_kind = sum(int(row[f"oracle_{k}_n"] or 0) for k in ("read_ts", "write_ts", "apply_write", "peek_write_ts"))
        assert by_kind == int(row["oracle_rtt_n"])
        if row["workload"] == "insert":
            assert int(row["oracle_write_ts_n"]) > 0
            assert int(row["oracle_apply_write_n"]) > 0
    else:  # today's oracle: in memory, its timestamp store's transactions in Postgres
        assert row["oracle_rtt_n"] == "0"


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
    assert "Postgres isolation: SERIALIZABLE (as CockroachDB); 40001 serialization failures retried:" in r.output
    doc = json.loads((out / "summary.json").read_text())
    assert doc["pg_isolation"] == "serializable"
    assert isinstance(doc["retries_40001"], int)
    for cell in doc["cells"]:
        # SELECTs reach persist only through the periodic table advancement,
        # which a short cell on a loaded host may miss (see `_check_backend`).
        assert cell["backend"]["consensus.*"]["count"] >= 0
        assert sum(s["count"] for s in cell["backend"].values()) > 0
        for stats in cell["backend"].values():
            assert set(stats) == {"count", "p50_ms", "p99_ms", "retries", "retries_40001", "mean_ms"}
    assert "Postgres isolation: SERIALIZABLE" in (out / "report.md").read_text()


@pytest.mark.postgres
def test_compare_real_read_committed_is_labelled_everywhere(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COORDSIM_POSTGRES_URL", pg_url)
    out = tmp_path / "out"
    args = ["--workloads", "insert", "--configs", "event-loop+pg-oracle", "--concurrency", "2", "--ops", "3",
            "--repeat", "1", "--no-check"]
    r = CliRunner().invoke(app, ["compare", "--mode", "real", *args, "--pg-isolation", "read-committed",
                                 "-o", str(out)])
    assert r.exit_code == 0, r.output
    label = "READ COMMITTED (not CockroachDB-like"
    assert label in " ".join(r.output.split())
    assert label in (out / "report.md").read_text()
    doc = json.loads((out / "summary.json").read_text())
    assert doc["pg_isolation"] == "read-committed"
    assert label in doc["pg_isolation_note"]
    assert [c["pg_isolation"] for c in doc["cells"]] == ["read-committed"]
    assert doc["cells"][0]["oracle_write_ts_n"] > 0
    meta = json.loads((out / "traces" / "insert" / "event-loop+pg-oracle" / "meta.json").read_text())
    assert meta["pg_isolation"] == "read-committed"
    assert label in meta["pg_isolation_note"]
    assert 'isolation=read-committed' in (out / "config.toml").read_text()


def test_pg_isolation_needs_real_mode(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["compare", "--mode", "virtual", *TINY, "--pg-isolation", "read-committed",
                                 "-o", str(tmp_path / "out")])
    assert r.exit_code != 0
    assert "--pg-isolation sets real mode's Postgres isolation level" in str(r.exception)


def test_same_seed_same_trace(run_twice: Callable[[RunConfig, str, str], RunOutput]) -> None:
    cfg = RunConfig(mode="virtual", workloads=("insert",), concurrency=(1, 4), duration_s=0.01, warmup_s=0.005,
                 warmup_ops=2)
    run_twice(cfg, "decoupled", "insert")


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


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--workloads", "nope"], "unknown workload 'nope'"),
        (["--configs", "nope"], "unknown configuration 'nope'"),
        (["--config-file", "{bad}"], "bad TOML"),
        (["--concurrency", "0"], "concurrency levels must be >= 1"),
        # A dead COORDSIM_POSTGRES_URL server is an external failure, exit 1,
        # no longer bad input: tests/sim/cli/test_pg_reachable.py (issue 38 item 1).
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
    coordsim: Callable[..., Ran],
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("mode = [unclosed\n")
    f = tmp_path / "file"
    f.write_text("")
    args = [a.replace("{bad}", str(bad)).replace("{file}", str(f)) for a in args]
    out = tmp_path / "out"
    if "--output" not in args:
        args += ["--output", str(out)]
    if "--mode" not in args:
        args = ["--mode", "virtual", *args]
    code, _, err = coordsim("compare", *args)
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
    assert tomllib.loads(r.output)["workloads"] == ["update"]  # tomli-w puts each item on a line
    assert "parse_plan = 0.0002" in r.output
    again = tmp_path / "again.toml"
    again.write_text(r.output)
    assert RunConfig.from_toml(again).seed == 9


def test_run_seed001_scenario(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["run", "seed001", "--config", "decoupled", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "trace" / "ops.parquet").is_file()
    assert "FAIL" not in (out / "verdict.txt").read_text()


def _row(c: int, samples: tuple[float, ...]) -> LevelRow:
    mean = sum(samples) / len(samples)
    return LevelRow("insert", "decoupled", "virtual", c, len(samples), 1.0, 100, 0, (), mean, None, samples,
                    100, 1.0, None, None, (1.0,) * len(samples), (2.0,) * len(samples), 0.5, 0.1)


def _base(c: int, samples: str) -> dict[str, str]:
    return {"workload": "insert", "config": "decoupled", "concurrency": str(c), "throughput_samples": samples,
            "p50_samples_ms": "1;1;1", "p99_samples_ms": "2;2;2"}


def test_baseline_flags_a_drop_beyond_threshold_and_noise() -> None:
    from sim.compare.report import compare_baseline

    base = [_base(1, "100;101;99"), _base(2, "100;101;99"), _base(4, "100;150;50")]
    rows = [_row(1, (81.0, 82.0, 80.0)), _row(2, (69.0, 70.0, 71.0)), _row(4, (60.0, 100.0, 20.0))]
    checked = compare_baseline(rows, base)
    # c=1: -19 %, within the threshold; c=2: -30 % and outside the noise;
    # c=4: -40 % but the passes scatter far more than that: noise.
    assert [(r.concurrency, r.measure) for r in checked.regressions] == [(2, "throughput")]
    assert checked.compared == 6  # throughput and p50 per cell; p99 needs 100 samples per pass
    assert checked.untested == 0
    assert "Holm-adjusted over 6 comparisons" in checked.regressions[0].reason
    assert checked.line().startswith("baseline: 1 regression(s): 1 of 6 comparisons beyond 20% and significant")
    assert not compare_baseline(rows, base, threshold=0.5).regressions


def test_baseline_corrects_for_the_number_of_comparisons() -> None:
    """A -30 % drop with one-sided Welch p ≈ 0.01 is a regression as the
    run's only comparison, but not among 20 (Holm's first step needs p <=
    0.05 / 20 = 0.0025): the chance that one of 20 unchanged cells crosses
    0.01 is ~18 %."""
    from sim.compare.report import compare_baseline
    from sim.compare.stats import compare_samples

    base_tput, new_tput = "100;110;90", (70.0, 75.0, 65.0)
    alone = compare_samples([100, 110, 90], new_tput, threshold=0.2, higher_is_better=True)
    assert alone.p_value == pytest.approx(0.0098, abs=5e-4)
    assert alone.regressed
    one = compare_baseline([_row(1, new_tput)], [_base(1, base_tput)])
    assert [r.measure for r in one.regressions] == ["throughput"]
    # Nine more cells, unchanged: 20 comparisons (throughput and p50 each).
    rows = [_row(1, new_tput)] + [_row(c, (100.0, 110.0, 90.0)) for c in range(2, 11)]
    base = [_base(c, base_tput) for c in range(1, 11)]
    many = compare_baseline(rows, base)
    assert many.compared == 20
    assert many.regressions == []
    assert many.line() == ("baseline: no regression: 0 of 20 comparisons beyond 20% and significant at "
                           "family-wise 5% (Welch, one-sided; Holm); 1 more beyond 20% but within the noise")


def test_baseline_with_one_sample_uses_the_threshold_alone() -> None:
    from sim.compare.report import compare_baseline

    base = [{**_base(1, "100"), "p50_samples_ms": "1", "p99_samples_ms": "2"}]
    checked = compare_baseline([_row(1, (70.0,))], base)
    assert [r.measure for r in checked.regressions] == ["throughput"]
    assert "threshold alone" in checked.regressions[0].reason
    assert checked.compared == checked.untested == 3  # p99 too: 100 samples in the one pass
    assert "3 with one sample on a side, decided by the threshold alone" in checked.line()


@pytest.mark.postgres
def test_calibrate_writes_a_profile_virtual_mode_reads(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sim.load.latency_profile import load_profile

    monkeypatch.setenv("COORDSIM_POSTGRES_URL", pg_url)
    out = tmp_path / "p.toml"
    # --force: the test machine may be busy with other tests (the refusal has its
    # own tests in tests/sim/model/test_calibrate.py).
    r = CliRunner().invoke(app, ["calibrate", "--samples", "5", "-o", str(out), "--force"])
    assert r.exit_code == 0, r.output
    model = load_profile(out)
    for name in ("oracle.pg.read_ts", "stash.txn", "consensus.cas", "blob.get"):
        assert model.configures(name)
        assert model.distribution(name).mean() > 0


def test_unknown_scenario_is_invalid_usage() -> None:
    from sim.load.scenarios import load, shipped
    from sim.runtime.errors import InvalidUsage

    assert {"seed001", "ddl-dml", "select-one"} <= set(shipped())
    assert load("seed001").name == load("seed001").name == "seed001"
    with pytest.raises(InvalidUsage, match="unknown scenario"):
        load("no-such-scenario")
    assert load("update").workload == "update"  # type: ignore[union-attr]


def test_config_show_lists_every_knob_of_every_configuration() -> None:
    import tomllib

    r = CliRunner().invoke(app, ["config", "show", "--mode", "virtual"])
    assert r.exit_code == 0, r.output
    shown = tomllib.loads(r.output)
    assert shown["duration_s"] == 0.2  # the mode's default, filled in
    for name, knobs in shown["configuration"].items():
        assert knobs["group_commit"] in ("immediate", "after-draining"), name
        assert knobs["costs"]["parse_plan"] > 0, name
        assert "cores" in knobs
    assert "confirm_leadership" not in shown["configuration"]["decoupled"]
    assert shown["configuration"]["event-loop"]["group_commit"] == "immediate"


def test_a_knob_that_does_not_apply_is_exit_2(
    tmp_path: Path, coordsim: Callable[..., Ran]
) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[overrides]\nconfirm_leadership = true\n")
    code, _, err = coordsim("config", "show", "--configs", "decoupled", "-c", str(f))
    assert code == 2
    assert "confirm_leadership does not apply to decoupled" in err


def test_an_anomaly_fails_the_comparison(
    tmp_path: Path, coordsim: Callable[..., Ran]
) -> None:
    """A known-bad variant in a comparison: the verdict is in every output and
    compare exits 1 naming the anomaly and the command that shows it."""
    f = tmp_path / "c.toml"
    f.write_text("[overrides.known_bad]\napply_write_before_append = true\n")
    out = tmp_path / "out"
    code, printed, _ = coordsim(
        "compare", "--mode", "virtual", "-c", str(f), "--workloads", "insert",
        "--configs", "event-loop+pg-oracle", "--concurrency", "4", "--duration", "0.02", "--warmup", "0.01",
        "-o", str(out),
    )
    assert code == 1
    assert "timestamp-regression" in printed
    assert "coordsim check" in printed
    with (out / "results.csv").open() as fh:
        assert {row["verdict"] for row in csv.DictReader(fh)} == {"invalid"}
    assert "invalid" in (out / "report.md").read_text()


def test_errors_fail_the_comparison_unless_allowed(
    tmp_path: Path, coordsim: Callable[..., Ran]
) -> None:
    """Statements that fail are counted by SQLSTATE in every output, and an
    error rate above the threshold is exit 1 unless --allow-errors. (A script
    whose every other statement reads a table that does not exist: `42P01`.)"""
    script = tmp_path / "failing.py"
    script.write_text(
        "async def scenario(sim):\n"
        "    s = sim.session('c1')\n"
        "    await sim.sql(s, 'CREATE TABLE t (a int)')\n"
        "    for n in range(10):\n"
        "        await sim.sql(s, f'INSERT INTO t VALUES ({n})')\n"
        "        await sim.sql(s, 'SELECT * FROM missing')\n"
    )
    args = ["compare", "--mode", "virtual", "-w", str(script), "--configs", "decoupled", "--repeat", "2", "--no-check"]
    code, printed, _ = coordsim(*args, "-o", str(tmp_path / "a"))
    with (tmp_path / "a" / "results.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert int(row["errors"]) == 20, printed  # 10 per run, 2 runs
    assert row["errors_by_code"] == "42P01:20"
    assert code == 1
    assert "errors above" in printed
    assert "42P01" in (tmp_path / "a" / "report.md").read_text()
    code, _, _ = coordsim(*args, "--allow-errors", "-o", str(tmp_path / "b"))
    assert code == 0


def test_a_since_that_overtakes_read_ts_is_read_at_not_an_error(
    coordsim: Callable[..., Ran], tmp_path: Path
) -> None:
    """With a 500 ms oracle round trip a peek's read_ts is routinely older than
    its index's since when it arrives (issue 18 measured 25-98 % of SELECTs
    failing with XX000). The coordinator reads at the since instead, under a
    read hold, and holds the answer until the oracle gets there, as the seeds'
    system does: no such read is answered with an error."""
    import tomllib

    from sim.load.run_config import DEFAULT_PROFILE

    # Every oracle statement (the profile names each: oracle.pg.read_ts, …) takes 500 ms.
    latency = tomllib.loads(DEFAULT_PROFILE.read_text())["latency"]
    slow = [name for name in latency if name.startswith("oracle.pg")]
    assert "oracle.pg.read_ts" in slow
    latency.update({name: {"kind": "constant", "ms": 500.0} for name in slow})
    profile = tmp_path / "slow.json"
    profile.write_text(json.dumps({"latency": latency}))
    code, printed, _ = coordsim(
        "compare", "--mode", "virtual", "--latency-profile", str(profile), "--workloads",
        "select-one", "--configs", "event-loop+pg-oracle,decoupled", "--concurrency", "64", "--duration", "2",
        "--warmup", "0.5", "--repeat", "2", "-o", str(tmp_path / "out"),
    )
    with (tmp_path / "out" / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert code == 0, printed
    assert all(r["errors"] == "0" and int(r["ops"]) > 50 and r["verdict"] == "valid" for r in rows), rows


def test_ablation_attributes_the_insert_difference_to_its_mechanisms(
    tmp_path: Path, coordsim: Callable[..., Ran]
) -> None:
    """event-loop..event-loop+pg-oracle changes the oracle, the leadership
    check, read_ts batching and the group-commit trigger: each is a step of
    its own, and the steps' changes add up to the whole difference."""
    out = tmp_path / "out"
    code, printed, err = coordsim(
        "compare", "--mode", "virtual", "--workloads", "insert",
        "--ablate", "event-loop..event-loop+pg-oracle", "--concurrency", "16", "--duration", "0.05",
        "--warmup", "0.02", "--repeat", "2", "--no-check", "-o", str(out),
    )
    assert code == 0, err
    rows = [line for line in printed.splitlines() if line.startswith("| event-loop") and " · " in line]
    mechanisms = [line.split("(")[1].split(")")[0] for line in rows]
    assert mechanisms == ["start", "oracle", "confirm_leadership", "batch_read_ts", "commits_in_flight", "oracle_calls", "group_commit"]
    deltas = [float(line.split("|")[2].split("(")[0].replace(",", "")) for line in rows[1:]]
    with (out / "results.csv").open() as fh:
        tput = {r["config"]: float(r["throughput_ops_s"]) for r in csv.DictReader(fh)}
    assert sum(deltas) == pytest.approx(tput["event-loop+pg-oracle"] - tput["event-loop"], abs=len(deltas))
    assert (out / "insert-ablation.png").is_file()
    assert "## Ablation" in (out / "report.md").read_text()


#: Seed 001's steps as a user writes them: c1 creates a table, c2 inserts,
#: c1 reads, each after the previous returned.
_SEED001_SCRIPT = """
async def scenario(sim):
    c1, c2 = sim.session("c1"), sim.session("c2")
    for n in range(20):
        r = await sim.sql(c1, f"CREATE TABLE foo{n} (a int)")
        sim.expect(r.ok, f"CREATE TABLE foo{n} failed: {r.error}")
        r = await sim.sql(c2, f"INSERT INTO foo{n} VALUES ({n})")
        sim.expect(r.ok, f"insert-unknown-table: INSERT INTO foo{n} failed: {r.error}")
        r = await sim.sql(c1, f"SELECT * FROM foo{n}")
        sim.expect(r.ok and r.rows == ((n,),), f"SELECT * FROM foo{n}: {r.rows} / {r.error}")
"""


def test_scenario_files_are_compared_beside_workloads(tmp_path: Path) -> None:
    """`-w` takes the user's own scenarios: a TOML one (a workload with its own
    sweep) and a Python script (run --repeat times, one row per configuration)."""
    script = tmp_path / "my_script.py"
    script.write_text(_SEED001_SCRIPT)
    toml = tmp_path / "my_insert.toml"
    toml.write_text('workload = "insert"\nconcurrency = [1, 8]\n')
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["compare", "--mode", "virtual", "-w", f"{script},{toml}", "--configs",
                                 "event-loop,decoupled", "--duration", "0.02", "--warmup", "0.01", "--repeat", "2",
                                 "-o", str(out)])
    assert r.exit_code == 0, r.output
    with (out / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    cells = {(row["workload"], row["config"], row["concurrency"]) for row in rows}
    assert ("my_insert", "decoupled", "8") in cells
    script_rows = [row for row in rows if row["workload"] == "my_script"]
    assert len(script_rows) == 2
    assert all(row["repeats"] == "2" and row["verdict"] == "valid" and int(row["ops"]) > 0 for row in script_rows)
    assert all(row["oracle_queries_per_op"] == "" for row in script_rows)  # not sampled, not zero
    assert (out / "traces" / "my_script" / "decoupled" / "ops.parquet").is_file()
