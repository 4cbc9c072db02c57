"""Run directories end to end: two `compare` runs keep two directories and a
`latest` link; `check`, `export` (and replay's trace expansion) take either;
each command's last stdout line is `wrote PATH`; `.hgrm` files parse."""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.runtime.run_dirs import LATEST, ROOT_ENV
from sim.spark.frames import expand_traces

if TYPE_CHECKING:
    from pathlib import Path

TINY = ["compare", "-w", "insert", "--configs", "decoupled", "--concurrency", "1,4", "--ops", "3", "--repeat", "2"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("runs") / "coordsim-out"
    runs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ROOT_ENV, str(root))
        for _ in range(2):
            r = CliRunner().invoke(app, TINY)
            assert r.exit_code == 0, r.output
            last = r.stdout.strip().splitlines()[-1]
            assert last.startswith("wrote "), r.stdout
            runs.append(root / os.path.basename(last.removeprefix("wrote ")))
    return root, runs


def test_two_compare_runs_leave_two_run_directories_and_latest(two_runs: tuple[Path, list[Path]]) -> None:
    root, runs = two_runs
    assert runs[0] != runs[1]
    assert all(re.fullmatch(r"compare-\d{8}T\d{6}Z-[0-9a-f]{6}", d.name) and d.is_dir() for d in runs)
    assert (root / LATEST).is_symlink()
    assert os.readlink(root / LATEST) == runs[1].name
    assert os.readlink(root / f"{LATEST}-compare") == runs[1].name
    assert {p.name for p in root.iterdir() if not p.name.startswith(".")} == {
        LATEST, f"{LATEST}-compare", *(d.name for d in runs)
    }


@pytest.mark.parametrize("which", ["run", "latest"])
def test_check_takes_a_run_directory_or_latest(two_runs: tuple[Path, list[Path]], which: str) -> None:
    root, runs = two_runs
    path = runs[0] if which == "run" else root / LATEST
    r = CliRunner().invoke(app, ["check", str(path)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    # One summary table: history | operations | verdict | anomalies | coverage | time.
    per_trace = [[c.strip() for c in ln.split("|")] for ln in lines if "|" in ln][1:]
    assert len(per_trace) == 2  # pass 1 and pass 2 of insert / decoupled
    assert all(row[2:4] == ["valid", "none"] for row in per_trace), lines
    assert lines[-1] == "verdict: valid (2 histories: 2 valid)"
    j = CliRunner().invoke(app, ["check", str(path), "--json"])
    assert j.exit_code == 0, j.output
    docs = json.loads(j.stdout)
    assert [d["valid"] for d in docs] == [True, True]


@pytest.mark.parametrize("which", ["run", "latest"])
def test_export_and_replay_take_a_run_directory_or_latest(
    two_runs: tuple[Path, list[Path]], which: str, tmp_path: Path
) -> None:
    root, runs = two_runs
    path = runs[1] if which == "run" else root / LATEST
    assert len(expand_traces([str(path)])) == 2  # what `coordsim replay PATH` reads
    out = tmp_path / "edn"
    r = CliRunner().invoke(app, ["export", str(path), "-f", "edn", "-o", str(out)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == f"wrote {out}"
    assert sorted(lines[:-1]) == sorted(str(p) for p in out.rglob("*.edn"))
    assert len(lines) == 3


def test_hgrm_files_parse(two_runs: tuple[Path, list[Path]], tmp_path: Path) -> None:
    _, runs = two_runs
    files = sorted((runs[0] / "hgrm").rglob("*.hgrm"))
    assert [f.relative_to(runs[0]).as_posix() for f in files] == [
        "hgrm/insert/decoupled/c1.hgrm", "hgrm/insert/decoupled/c4.hgrm"
    ]
    text = files[1].read_text()
    head, *rows = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert head.split() == ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
    values = [(float(r.split()[0]), float(r.split()[1]), int(r.split()[2])) for r in rows]
    assert values[-1][1] == 1.0
    assert [v for v, _, _ in values] == sorted(v for v, _, _ in values)
    mean = re.search(r"^#\[Mean\s+=\s+([\d.]+), StdDeviation\s+=\s+([\d.]+)\]$", text, re.M)
    total = re.search(r"^#\[Max\s+=\s+([\d.]+), Total count\s+=\s+(\d+)\]$", text, re.M)
    assert mean is not None
    assert total is not None
    assert int(total.group(2)) == values[-1][2] > 0
    assert values[0][0] <= float(mean.group(1)) <= float(total.group(1))
    # `export -f hgrm` copies them, keeping the layout.
    out = tmp_path / "lat"
    r = CliRunner().invoke(app, ["export", str(runs[0]), "-f", "hgrm", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "hgrm/insert/decoupled/c4.hgrm").read_text() == text


def test_old_spellings_work_with_one_note_each(tmp_path: Path) -> None:
    out = tmp_path / "old"
    r = CliRunner().invoke(app, ["run", "select_one", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("coordsim: note:")] == [
        "coordsim: note: select_one is deprecated; use select-one (accepted until 0.3)"
    ]
    assert r.stdout.strip().splitlines()[-1] == f"wrote {out}"
    synth = tmp_path / "synth"
    r = CliRunner().invoke(app, ["synth-trace", "--ops", "50", "--out", str(synth)])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == ["coordsim: note: --out is deprecated; use -o/--output (accepted until 0.3)"]
    assert r.stdout.strip().splitlines()[-1] == f"wrote {synth}"


def test_compare_json_prints_the_summary_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "one"
    r = CliRunner().invoke(app, [*TINY, "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # nothing else on stdout
    assert doc == json.loads((out / "summary.json").read_text())
    assert doc["output"] == str(out.absolute())
    assert doc["exit_code"] == 0
    assert doc["mode"] == "virtual"
    cells = doc["cells"]
    assert [(c["workload"], c["config"], c["concurrency"]) for c in cells] == [
        ("insert", "decoupled", 1), ("insert", "decoupled", 4),
    ]
    assert all(len(c["throughput_samples"]) == 2 and c["verdict"] == "valid" for c in cells)
    assert [p["workload"] for p in doc["peaks"]] == ["insert"]
