"""`coordsim compare --adapters` (issue 36): the scale-out dimension in virtual
mode, its `adapters` column and summary cells, determinism with two adapters,
`config show`, and the refusals (real mode above 1, an event loop above 1)."""

from __future__ import annotations

import csv
import json
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest

from sim.load.run_config import RunConfig

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sim.compare.runner import RunOutput
    from tests.sim.compare.conftest import Ran


def test_compare_adapters_writes_the_adapters_column(
    tmp_path: Path, coordsim: Callable[..., Ran]
) -> None:
    out = tmp_path / "out"
    code, _, err = coordsim(
        "compare", "--mode", "virtual", "--configs", "decoupled", "--adapters", "1,2",
        "-w", "select-one,update", "--concurrency", "1,4", "--ops", "3", "--repeat", "2", "--seed", "1",
        "-o", str(out),
    )
    assert code == 0, err  # the checkers judged every history (update spans both adapters) valid
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    per = RunConfig().coordinator("decoupled").cores
    # Two adapters, and one adapter with their cores (more processes vs more cores).
    assert {(r["config"], r["adapters"], r["cores"]) for r in rows} == {
        ("decoupled", "1", str(per)),
        ("decoupled-2-adapters", "2", str(2 * per)),
        (f"decoupled-1-adapter-{2 * per}-cores", "1", str(2 * per)),
    }
    cells = json.loads((out / "summary.json").read_text())["cells"]
    assert sorted({c["adapters"] for c in cells}) == [1, 2]
    assert {c["verdict"] for c in cells} == {"valid"}
    assert "adapters = 2" in (out / "config.toml").read_text()
    # The scale-out section: its table per workload, where scaling stops, its plot.
    report = (out / "report.md").read_text()
    assert "## Scale-out: adapters" in report
    assert f"| 1 (cores of 2) | {2 * per} |" in report
    assert "4 clients: 1 → 2 adapters gives" in report
    for wl in ("select-one", "update"):
        assert (out / f"{wl}-scaleout.png").stat().st_size > 10_000
        assert f"![{wl}-scaleout]({wl}-scaleout.png)" in report


def test_real_mode_refuses_more_adapters_than_processes_allow(
    tmp_path: Path, coordsim: Callable[..., Ran]
) -> None:
    out = tmp_path / "out"
    code, _, err = coordsim(
        "compare", "--mode", "real", "--configs", "decoupled", "--adapters", "1,9",
        "-w", "select-one", "-o", str(out),
    )
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "real mode runs at most 8 adapters (each is an OS process), got 9" in lines[0], err
    assert not out.exists()


def test_an_event_loop_with_two_adapters_is_exit_2(
    tmp_path: Path, coordsim: Callable[..., Ran]
) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[overrides]\nadapters = 2\n")
    code, _, err = coordsim("config", "show", "--configs", "event-loop", "-c", str(f))
    assert code == 2
    assert "a single loop is single by design" in err


def test_config_show_records_adapters(
    coordsim: Callable[..., Ran]
) -> None:
    import tomllib

    code, out, err = coordsim(
        "config", "show", "--mode", "virtual", "--configs", "event-loop,decoupled",
        "--adapters", "1,4",
    )
    assert code == 0, err
    shown = tomllib.loads(out)["configuration"]
    assert shown["event-loop"]["adapters"] == 1
    assert shown["decoupled"]["adapters"] == 1
    assert shown["decoupled-4-adapters"]["adapters"] == 4


def test_same_seed_same_trace_with_two_adapters(
    tmp_path: Path, run_twice: Callable[[RunConfig, str, str], RunOutput]
) -> None:
    cfg = RunConfig(mode="virtual", configurations=("decoupled",), workloads=("insert",), concurrency=(1, 4),
                 duration_s=0.01, warmup_s=0.005, warmup_ops=2, overrides={"adapters": 2})
    a = run_twice(cfg, "decoupled", "insert")
    assert {r.adapters for r in a.rows} == {2}
    actors = set(pq.read_table(tmp_path / "a" / "events.parquet").column("actor").to_pylist())
    assert {"a/adapter-1", "a/adapter-2"} <= actors, actors


@pytest.mark.postgres
def test_real_mode_runs_each_adapter_as_a_process_and_records_their_backends(
    tmp_path: Path, pg_url: str, coordsim: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real mode with 2 adapters: two OS processes on one database; the
    histories they serve (update spans both) are judged valid, and the
    backend round trips each process made reach the cell's figures."""
    monkeypatch.setenv("COORDSIM_POSTGRES_URL", pg_url)
    out = tmp_path / "out"
    code, _, err = coordsim(
        "compare", "--mode", "real", "--configs", "decoupled", "--adapters", "2",
        "-w", "insert,update", "--concurrency", "4", "--ops", "20", "--repeat", "1", "-o", str(out),
    )
    assert code == 0, err
    doc = json.loads((out / "summary.json").read_text())
    assert {(c["workload"], c["adapters"], c["verdict"]) for c in doc["cells"]} == {
        ("insert", 2, "valid"),
        ("update", 2, "valid"),
    }
    for cell in doc["cells"]:
        assert cell["oracle_write_ts_n"] > 0, cell["workload"]
        assert cell["backend"]["consensus.*"]["count"] > 0
