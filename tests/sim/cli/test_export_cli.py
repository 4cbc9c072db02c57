"""`coordsim export`: export -> `coordsim check` round-trips give the verdicts
the original gets, on the checked-in corpus (the golden traces, the known-bad
trace among them, and every hand-written EDN history with its expected
verdict, stored as a trace); Porcupine JSON and CSV hold every operation; and
the command refuses, with one line and exit 2, to overwrite what it did not
write."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
from typer.testing import CliRunner

from sim.cli.export import CSV_COLUMNS, EDN_SIGNATURE
from sim.cli.main import app
from sim.history.export import history_to_porcupine
from sim.history.import_edn import read_edn
from sim.history.traces import read_trace, write_trace

DATA: Final = Path(__file__).resolve().parents[2] / "data"
TRACES: Final = sorted(p for p in (DATA / "traces").iterdir() if (p / "meta.json").is_file())
HISTORIES: Final = sorted((DATA / "histories").glob("*.edn"))
_ENTRY: Final = Path(sys.executable).parent / "coordsim"
_COORDSIM: Final = [str(_ENTRY)] if _ENTRY.exists() else [sys.executable, "-c", "from sim.cli.main import main; main()"]
runner = CliRunner()


def _copy_of(src: Path, tmp_path: Path) -> Path:
    """A trace of the corpus in a scratch directory: `check` may write a
    verdict beside a trace, and the checked-in data must stay as it is."""
    if src.suffix == ".edn":
        h, events = read_edn(src)
        return write_trace(tmp_path / "trace" / src.stem, h, events, run=src.stem)
    return Path(shutil.copytree(src, tmp_path / "trace" / src.name))


def _report(args: list[str]) -> tuple[int, list[str]]:
    """`coordsim check`'s exit code and report up to its verdict line, less
    the first line (it names the input) and the checkers' times."""
    r = runner.invoke(app, ["check", *args])
    # A table's column widths follow its widest cell, times included: compare
    # the cells, not the padding.
    lines = [" ".join(re.sub(r"-{2,}", "--", re.sub(r"[|\s]*[\d.]+m?s$", "", ln)).split())
             for ln in r.output.splitlines()[1:]]
    end = next((i for i, ln in enumerate(lines) if ln.startswith("verdict: ")), len(lines))
    return r.exit_code, lines[: end + 1]


def test_the_corpus_is_there() -> None:
    assert len(TRACES) >= 3
    assert len(HISTORIES) >= 20
    assert any("known-bad" in p.name or "ignore" in p.name for p in TRACES)


@pytest.mark.parametrize("src", TRACES + HISTORIES, ids=[p.stem for p in TRACES + HISTORIES])
def test_export_then_check_gives_the_same_verdicts(src: Path, tmp_path: Path) -> None:
    trace = _copy_of(src, tmp_path)
    out = tmp_path / "out.edn"
    r = runner.invoke(app, ["export", str(trace), "--format", "edn", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"wrote {out}"
    assert out.read_text(encoding="utf-8").startswith(EDN_SIGNATURE)
    code, lines = _report([str(trace)])
    again_code, again = _report([str(out)])
    assert code in (0, 1), lines  # a verdict, not bad input
    assert (again_code, again) == (code, lines)
    original, exported = read_trace(trace), read_edn(out)
    assert list(exported[0].ops()) == list(original.history.ops())
    assert exported[1] == original.events


def test_the_known_bad_trace_stays_invalid(tmp_path: Path) -> None:
    bad = next(p for p in TRACES if "ignore" in p.name)
    out = tmp_path / "bad.edn"
    assert runner.invoke(app, ["export", str(_copy_of(bad, tmp_path)), "-o", str(out)]).exit_code == 0
    code, lines = _report([str(out)])
    assert code == 1
    assert "verdict: invalid" in lines


def test_porcupine_and_csv_hold_every_operation(tmp_path: Path) -> None:
    trace = _copy_of(TRACES[0], tmp_path)
    h = read_trace(trace).history
    js, cs = tmp_path / "h.json", tmp_path / "h.csv"
    assert runner.invoke(app, ["export", str(trace), "-f", "porcupine", "-o", str(js)]).exit_code == 0
    assert runner.invoke(app, ["export", str(trace), "-f", "csv", "-o", str(cs)]).exit_code == 0
    assert json.loads(js.read_text()) == json.loads(history_to_porcupine(h))
    with cs.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [int(r["op_id"]) for r in rows] == list(h.op_id)
    for r, op in zip(rows, h.ops(), strict=True):
        assert (r["kind"], r["object"], r["status"]) == (op.kind, op.obj or "", op.status)
        assert r["result"] == ("" if op.result is None else " ".join(map(str, op.result)))
        assert r["read_ts"] == ("" if op.read_ts is None else str(op.read_ts))


def test_a_directory_above_traces_exports_each_into_a_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for src in TRACES:
        shutil.copytree(src, run_dir / "passes" / src.name)
    out = tmp_path / "exported"
    r = runner.invoke(app, ["export", str(run_dir), "-o", str(out)])
    assert r.exit_code == 0, r.output
    *files, last = r.stdout.strip().splitlines()
    assert last == f"wrote {out}"
    assert sorted(files) == sorted(str(out / "passes" / f"{p.name}.edn") for p in TRACES)
    assert (out / ".coordsim-output").is_file()
    for p in TRACES:
        h, _ = read_edn(out / "passes" / f"{p.name}.edn")
        assert list(h.ops()) == list(read_trace(p).history.ops())


def test_the_default_output_is_named_after_the_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _copy_of(TRACES[0], tmp_path)
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["export", str(trace), "-f", "csv"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"wrote {trace.name}.csv"
    assert (tmp_path / f"{trace.name}.csv").is_file()


@pytest.mark.parametrize("fmt", ["edn", "porcupine", "csv"])
def test_a_file_it_wrote_is_replaced(tmp_path: Path, fmt: str) -> None:
    """Recorded (size and SHA-256 in the directory's .coordsim-files), so
    replaced, whatever the format."""
    trace = _copy_of(TRACES[0], tmp_path)
    out = tmp_path / "h.out"
    assert runner.invoke(app, ["export", str(trace), "-f", fmt, "-o", str(out)]).exit_code == 0
    out.write_bytes(out.read_bytes())  # rewritten, same bytes: still provably coordsim's
    r = runner.invoke(app, ["export", str(trace), "-f", fmt, "-o", str(out)])
    assert r.exit_code == 0, r.output
    if fmt == "edn":
        assert read_edn(out)[0].n == read_trace(trace).history.n


def test_a_file_that_only_looks_like_an_export_is_never_overwritten(tmp_path: Path) -> None:
    """Issue 38: content proves nothing; the signature line is what a user's
    copy of an old export, or anyone, may have."""
    trace = _copy_of(TRACES[0], tmp_path)
    out = tmp_path / "h.edn"
    mine = f"{EDN_SIGNATURE} from an earlier export\n; and the user's notes\n".encode()
    out.write_bytes(mine)
    r = _coordsim("export", str(trace), "-f", "edn", "-o", str(out), cwd=tmp_path)
    assert r.returncode == 2, r
    assert r.stderr.splitlines() == [
        f"coordsim: invalid input: {out} exists and was not written by coordsim (coordsim has no record of "
        "writing it); choose another name"
    ], r.stderr
    assert out.read_bytes() == mine


def _coordsim(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_COORDSIM, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("args", "existing", "expect"),
    [
        pytest.param(["-f", "edn"], "h.edn", "was not written by coordsim", id="foreign-edn"),
        pytest.param(["-f", "porcupine"], "h.json", "choose another name", id="any-json"),
        pytest.param(["-f", "csv"], "h.csv", "choose another name", id="any-csv"),
    ],
)
def test_a_file_it_did_not_write_is_never_overwritten(
    tmp_path: Path, args: list[str], existing: str, expect: str
) -> None:
    trace = _copy_of(TRACES[0], tmp_path)
    target = tmp_path / existing
    target.write_text("the user's own history\n")
    r = _coordsim("export", str(trace), *args, "-o", str(target), cwd=tmp_path)
    assert r.returncode == 2, r
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("coordsim: invalid input:"), r.stderr
    assert expect in r.stderr
    assert target.read_text() == "the user's own history\n"


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        pytest.param(["export", "nope"], "no such trace directory or EDN file", id="missing"),
        pytest.param(["export", "empty"], "no trace directory", id="no-trace-below"),
        pytest.param(["export", "bad.edn", "-f", "csv", "-o", "x.csv"], "is never closed", id="bad-edn"),
        pytest.param(["export", "empty", "--format", "xml"], "xml", id="unknown-format"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, argv: list[str], expect: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.edn").write_text("{:type :invoke\n")
    r = _coordsim(*argv, cwd=tmp_path)
    assert r.returncode == 2, r
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert expect in r.stderr
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.edn", "empty"]  # nothing written
