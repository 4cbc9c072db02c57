"""Commands that can run over 5 s show progress on stderr (issue 37 item 5;
sim/cli/heartbeat.py): off a terminal, `coordsim run` of a Python scenario
prints a line every `-P` seconds with the wall time, virtual time and
operations done, and `coordsim validate` one with the fact running, k of N;
stdout and the exit code stay what they were. The runs wait for the lines
(bounded) rather than for a time: nothing here is timed."""

from __future__ import annotations

import json
import re
import sys
import threading
from typing import TYPE_CHECKING, Any, Final

import pytest

from sim.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path

    from sim.model.validate import Fact, Outcome

def _until_two_lines(marker: str) -> str:
    """A scenario that runs until two progress lines holding `marker` were
    printed (in-process: stderr is pytest's capture), at most a few thousand
    statements."""
    return f"""\
import sys


async def scenario(sim):
    s = sim.session("c1")
    await sim.sql(s, "CREATE TABLE t (a int)")
    for n in range(3000):
        await sim.sql(s, f"INSERT INTO t VALUES ({{n}})")
        if sys.stderr.getvalue().count({marker!r}) >= 2:
            break
"""


_UNTIL_TWO_LINES: Final = _until_two_lines("operations done")


def _coordsim(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["coordsim", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    code = exc.value.code
    captured = capsys.readouterr()
    return (code if isinstance(code, int) else 1), captured.out, captured.err


def _captured() -> str:
    """What the command printed on stderr so far (pytest's capture, in-process)."""
    return str(getattr(sys.stderr, "getvalue")())  # noqa: B009 - TextIO has none; the capture has


def test_run_of_a_python_scenario_prints_a_heartbeat_off_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script = tmp_path / "long.py"
    script.write_text(_UNTIL_TWO_LINES)
    code, out, err = _coordsim(capsys, monkeypatch, "run", str(script), "-P", "0.01", "-o", str(tmp_path / "r"))
    assert code == 0, out + err
    beats = [line for line in err.splitlines() if line.startswith("run long on ")]
    assert len(beats) >= 2, err
    pattern = r"run long on decoupled, \d+\.\d s, virtual time \d+\.\d{3} s, [\d,]+ operations done"
    # (Before the deployment is up a line says "starting".)
    assert all(re.fullmatch(pattern, line) or line.endswith(", starting") for line in beats), beats
    running = [line for line in beats if line.endswith("operations done")]
    assert len(running) >= 2, beats
    done = [int(re.findall(r"([\d,]+) operations done", line)[0].replace(",", "")) for line in running]
    assert done == sorted(done)  # the count only grows
    assert "operations done" not in out  # stdout is the verdict and the directory, as before
    assert out.rstrip().endswith(str(tmp_path / "r"))


def test_validate_shows_the_fact_running_k_of_n(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sim.model.validate as validate

    real = validate.run_fact
    ids = ["loop-messages-per-select", "update-one-write-per-commit"]

    def after_a_line(fact: Fact, *args: Any, **kwargs: Any) -> Outcome:
        wait = threading.Event()
        for _ in range(1000):  # until the heartbeat named this fact (bounded)
            if re.search(rf"validate: \[\d/2\] {fact.id}, ", _captured()):
                break
            wait.wait(0.01)
        return real(fact, *args, **kwargs)

    monkeypatch.setattr(validate, "run_fact", after_a_line)
    code, out, err = _coordsim(capsys, monkeypatch, "validate", "--json", "--only", ",".join(ids), "-P", "0.01",
                               "-o", str(tmp_path / "v"))
    assert code == 0, out + err
    doc = json.loads(out)  # stdout is the document alone
    assert doc["ok"] is True
    lines = err.splitlines()
    # In the facts file's order: which runs, k of N, and for how long ...
    order = [f.id for f in validate.load_facts() if f.id in ids]
    for k, fact in enumerate(order, start=1):
        assert any(re.fullmatch(rf"validate: \[{k}/2\] {fact}, \d+\.\d s", line) for line in lines), err
        # ... and, when it is done, its value and its own elapsed time.
        assert any(re.fullmatch(rf"\[{k}/2\] {fact}: .* \(holds, \d+\.\d s\)", line) for line in lines), err


def test_progress_must_be_a_positive_period(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, out, err = _coordsim(capsys, monkeypatch, "validate", "--only", "loop-messages-per-select", "-P", "0",
                               "-o", str(tmp_path / "v"))
    assert code == 2, out + err
    assert "--progress" in err
    assert not (tmp_path / "v").exists()


def test_isolation_prints_a_heartbeat_while_each_run_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A real-mode isolation run takes its whole duration before its line: a
    heartbeat names the run meanwhile (here every millisecond, so a virtual
    run of a few hundred wall milliseconds prints some)."""
    monkeypatch.setattr("sim.cli.heartbeat.EVERY_S", 0.001)
    code, out, err = _coordsim(
        capsys, monkeypatch, "isolation", "--neighbour", "ddl-churn", "--victim-clients", "1", "-T", "0.05",
        "--warmup", "0.02", "--repeat", "1", "--jobs", "1", "-o", str(tmp_path / "iso"),
    )
    assert code == 0, err
    assert re.search(r"^isolation: event-loop / \S+ pass 1 \(1/\d+\), \d+\.\d s$", err, re.M), err
    assert "isolation:" not in out  # progress is stderr's




def test_compare_of_a_python_scenario_prints_a_heartbeat_off_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A script is one row with no level to print while it runs: off a
    terminal (and without -P), compare names it every few seconds instead."""
    monkeypatch.setattr("sim.cli.heartbeat.EVERY_S", 0.001)
    script = tmp_path / "long.py"
    script.write_text(_until_two_lines("compare: long / decoupled, "))
    code, out, err = _coordsim(
        capsys, monkeypatch, "compare", "--mode", "virtual", "-w", str(script), "--configs", "decoupled",
        "--repeat", "1", "-o", str(tmp_path / "c"),
    )
    assert code == 0, err
    assert len(re.findall(r"^compare: long / decoupled, \d+\.\d s$", err, re.M)) >= 2, err
    assert "compare: long / decoupled, " not in out
