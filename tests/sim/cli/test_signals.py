"""Real-mode commands stopped by SIGINT or SIGTERM at a random point (issue 16):
each exits within 10 s, leaves no Postgres process and no temporary directory
of its own, prints no traceback, and leaves the previous output as it was.

The default run makes 2 trials per command (one per signal); the slow test 10
per command and signal. Delays come from a seeded RNG, printed on failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import pytest

from sim.runtime.outputs import LOCK, MARKER

pytestmark = pytest.mark.postgres

_COORDSIM: Final = [sys.executable, "-c", "from sim.cli.entry import main; main()"]
_EXIT_WITHIN_S: Final = 10.0
_SCENARIO: Final = 'workload = "mixed"\nconcurrency = [1, 4, 16, 64]\nops_per_level = 400\n'


def _command(name: str, out: Path, scenario: Path) -> list[str]:
    if name == "compare":
        return [*_COORDSIM, "compare", "--mode", "real", "--workloads", "select-one,insert",
                "--configs", "event-loop,decoupled", "--concurrency", "1,8,64", "--ops", "300",
                "-o", str(out)]
    if name == "run":
        return [*_COORDSIM, "run", str(scenario), "--config", "event-loop", "--mode", "real", "-o", str(out)]
    return [*_COORDSIM, "anomalies", "run", "crash-restart", "--config", "decoupled", "--mode", "real",
            "--size", "2000", "--faults", "none", "--out", str(out)]


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != LOCK  # the run's lock file (its PID): coordsim's, and harmless
    }


def _processes_under(path: Path) -> list[str]:
    """Command lines of live processes that mention `path` (the cluster lives there)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmd:
            found.append(f"{pid}: {cmd.strip()}")
    return found


def _wait_until(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return bool(predicate())  # type: ignore[operator]


def _trial(name: str, signum: signal.Signals, delay: float, where: Path) -> str:
    """One trial; returns how it ended (for the failure message and the log)."""
    where.chmod(0o711)  # the unprivileged Postgres user must reach its cluster in tmp
    tmp = where / "tmp"
    tmp.mkdir()
    tmp.chmod(0o755)
    work = where / "work"
    work.mkdir()
    scenario = work / "long.toml"
    scenario.write_text(_SCENARIO)
    out = work / "out"
    # A previous output of the same command, which the interrupted run must not harm.
    out.mkdir()
    previous = {"size": 9, "sha256": hashlib.sha256(b"previous\n").hexdigest()}
    (out / MARKER).write_text(json.dumps({"generator": "coordsim", "format": 2, "command": "x",
                                          "files": {"results.csv": previous}}) + "\n")
    (out / "results.csv").write_text("previous\n")
    before = _snapshot(work)
    env = {k: v for k, v in os.environ.items() if k != "COORDSIM_POSTGRES_URL"}
    env["TMPDIR"] = str(tmp)
    # `with`: the pipes are closed whatever happens, even when the trial fails.
    with subprocess.Popen(
        _command(name, out, scenario), cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    ) as proc:
        try:
            time.sleep(delay)
            finished_first = proc.poll() is not None
            sent = time.monotonic()
            if not finished_first:
                proc.send_signal(signum)
            try:
                stdout, stderr = proc.communicate(timeout=_EXIT_WITHIN_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{name}: still running {_EXIT_WITHIN_S:.0f} s after {signum.name} at {delay:.2f} s")
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    story = f"{name}: {signum.name} at {delay:.2f} s, exit {proc.returncode} after {took:.2f} s"
    assert "Traceback" not in stderr + stdout, f"{story}\n{stderr[-3000:]}"
    if not finished_first:
        assert proc.returncode == 128 + signum.value, f"{story}\n{stderr[-2000:]}"
        assert "stopped at once" not in stderr, story  # the cleanup finished by itself
    # Postgres (and its watchdog) gone; every temporary directory removed.
    assert _wait_until(lambda: not _processes_under(tmp), 5.0), (story, _processes_under(tmp))
    assert sorted(os.listdir(tmp)) == [], story
    after = _snapshot(work)
    if finished_first:
        assert proc.returncode == 0, f"{story}\n{stderr[-2000:]}"
        return story + " (finished before the signal)"
    assert after == before, story
    assert sorted(os.listdir(work)) == ["long.toml", "out"], story
    return story


_COMMANDS: Final = ("compare", "run", "anomalies")


@pytest.mark.parametrize("name", _COMMANDS)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_at_a_random_point_stops_cleanly(name: str, signum: signal.Signals) -> None:
    rng = random.Random(f"{name}-{signum.name}")
    where = Path(tempfile.mkdtemp(prefix="coordsim-signal-test-"))
    try:
        print(_trial(name, signum, rng.uniform(0.5, 5.0), where))
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", _COMMANDS)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ten_signals_at_random_points(name: str, signum: signal.Signals) -> None:
    rng = random.Random(f"slow-{name}-{signum.name}")
    for trial in range(10):
        where = Path(tempfile.mkdtemp(prefix="coordsim-signal-test-"))
        try:
            print(trial, _trial(name, signum, rng.uniform(0.2, 8.0), where))
        finally:
            shutil.rmtree(where, ignore_errors=True)
