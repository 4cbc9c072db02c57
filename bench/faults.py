"""Fault trials of real mode (issue 38, item 1): a `coordsim compare --mode
real` whose embedded postmaster is SIGKILLed at a random moment must end within
60 s, exit 1, and say so in one line on stderr, never hang nor print a
traceback; and one given Ctrl-C (SIGINT) at a random moment must end within
5 s, exit 130, say so in one line, and leave no Postgres running.

Each trial runs the command with a private TMPDIR (so its cluster is found by
its `postmaster.pid`), waits a random delay, then kills the postmaster (a kill
trial) or sends SIGINT to the coordsim process (a Ctrl-C trial: from its very
start, so start-up and set-up are among the moments hit), and records how long
the command took to exit after it.

    uv run python bench/faults.py [--quick] [--trials N] [--seed S]

Last line: `RESULT trials=… hangs=… max_exit_s=… ctrl_c_trials=… ctrl_c_hangs=…
ctrl_c_max_exit_s=…` (plus the failures of each: a wrong exit code, a
traceback, not exactly one line saying why, a Postgres left running).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: The run must end within this after the kill, or the trial is a hang.
EXIT_WITHIN_S: Final = 60.0
#: ... and within this after Ctrl-C.
CTRL_C_WITHIN_S: Final = 5.0
#: How long a Ctrl-C trial waits for the exit before it calls it a hang (and
#: kills the process): longer than the limit, to measure how far past it is.
_CTRL_C_WAIT_S: Final = 30.0
_COORDSIM: Final = [sys.executable, "-c", "from sim.cli.entry import main; main()"]


@dataclass(frozen=True)
class Trial:
    delay_s: float
    killed: int | None  # the postmaster's pid; None: the run ended before the kill
    exit_s: float | None  # seconds from the kill to the exit; None: a hang
    returncode: int | None
    death_lines: int
    traceback: bool

    @property
    def ok(self) -> bool:
        if self.killed is None:
            return self.returncode == 0
        return self.exit_s is not None and self.returncode == 1 and self.death_lines == 1 and not self.traceback


def compare_argv(out: Path) -> list[str]:
    return [*_COORDSIM, "compare", "--mode", "real", "--workloads", "select-one,insert",
            "--configs", "event-loop,decoupled", "--concurrency", "1,8", "--ops", "300",
            "-o", str(out)]


def postmaster_of(tmp: Path) -> int | None:
    """The live postmaster of the embedded cluster under `tmp`, if any."""
    for pidfile in tmp.glob("coordsim-pg-*/data/postmaster.pid"):
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
            os.kill(pid, 0)
        except (OSError, ValueError):
            continue
        return pid
    return None


def trial(delay_s: float, *, cwd: Path) -> Trial:
    with tempfile.TemporaryDirectory(prefix="coordsim-faults-") as where:
        tmp = Path(where)
        tmp.chmod(0o711)  # as root the cluster runs as an unprivileged user
        env = {**os.environ, "TMPDIR": str(tmp)}
        with subprocess.Popen(compare_argv(tmp / "out"), cwd=cwd, env=env, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
            deadline = time.monotonic() + delay_s
            pid = None
            # The delay, then the first moment a postmaster exists (it may be
            # still starting): never kill before the delay.
            while proc.poll() is None:
                if time.monotonic() >= deadline:
                    pid = postmaster_of(tmp)
                    if pid is not None:
                        break
                time.sleep(0.05)
            t_kill = time.monotonic()
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
            try:
                _, err = proc.communicate(timeout=EXIT_WITHIN_S)
                exit_s: float | None = time.monotonic() - t_kill
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                exit_s = None
        # The one line: the death during the run, or a failed set-up.
        deaths = sum(line.startswith("coordsim:") and "Postgre" in line for line in err.splitlines())
        return Trial(delay_s, pid, None if pid is None else exit_s, proc.returncode, deaths, "Traceback" in err)


@dataclass(frozen=True)
class CtrlC:
    delay_s: float
    exit_s: float | None  # seconds from SIGINT to the exit; None: a hang
    returncode: int | None  # None: it ended before the SIGINT
    lines: int  # stderr lines saying it stopped
    traceback: bool
    postgres_left: bool  # a postmaster still alive under its TMPDIR after the exit

    @property
    def ok(self) -> bool:
        if self.returncode is None:
            return True  # ended first: nothing to interrupt
        return (self.exit_s is not None and self.exit_s <= CTRL_C_WITHIN_S and self.returncode == 130
                and self.lines == 1 and not self.traceback and not self.postgres_left)


def ctrl_c_trial(delay_s: float, *, cwd: Path) -> CtrlC:
    with tempfile.TemporaryDirectory(prefix="coordsim-faults-") as where:
        tmp = Path(where)
        tmp.chmod(0o711)
        env = {**os.environ, "TMPDIR": str(tmp)}
        with subprocess.Popen(compare_argv(tmp / "out"), cwd=cwd, env=env, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
            deadline = time.monotonic() + delay_s
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            if proc.poll() is not None:
                proc.communicate()
                return CtrlC(delay_s, None, None, 0, False, False)
            t_int = time.monotonic()
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=_CTRL_C_WAIT_S)
                exit_s: float | None = time.monotonic() - t_int
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                exit_s = None
        # Its server's last moments (a fast shutdown it asked for) may end
        # just after it: a server still up 2 s after the exit was left behind.
        gone_by = time.monotonic() + 2.0
        while postmaster_of(tmp) is not None and time.monotonic() < gone_by:
            time.sleep(0.05)
        pid = postmaster_of(tmp)
        left = pid is not None
        if pid is not None:  # the trial's own debris: not left for the next one
            os.kill(pid, signal.SIGKILL)
        said = sum(line.startswith("coordsim:") and "SIGINT" in line for line in err.splitlines())
        return CtrlC(delay_s, exit_s, proc.returncode, said, "Traceback" in err, left)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2 trials, killed within the first 12 s")
    parser.add_argument("--trials", type=int, default=None, help="default 20 (2 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n = args.trials if args.trials is not None else (2 if args.quick else 20)
    rng = random.Random(args.seed)
    top = 12.0 if args.quick else 40.0
    cwd = Path(__file__).resolve().parent.parent
    trials = []
    stops = []
    for i in range(n):
        t = trial(rng.uniform(1.0, top), cwd=cwd)
        trials.append(t)
        exit_s = "hang" if t.exit_s is None else f"{t.exit_s:.2f} s"
        print(f"trial {i + 1}/{n}: kill after {t.delay_s:.1f} s (postmaster {t.killed}): exit {t.returncode} "
              f"after {exit_s}, {t.death_lines} death line(s), traceback={t.traceback}, ok={t.ok}", flush=True)
        c = ctrl_c_trial(rng.uniform(0.0, top), cwd=cwd)
        stops.append(c)
        exit_s = "hang" if c.exit_s is None and c.returncode is not None else f"{c.exit_s or 0:.2f} s"
        print(f"ctrl-c {i + 1}/{n}: SIGINT after {c.delay_s:.1f} s: exit {c.returncode} after {exit_s}, "
              f"{c.lines} line(s), traceback={c.traceback}, postgres left={c.postgres_left}, ok={c.ok}", flush=True)
    killed = [t for t in trials if t.killed is not None]
    hangs = sum(t.exit_s is None for t in killed)
    max_exit = max((t.exit_s for t in killed if t.exit_s is not None), default=0.0)
    failures = sum(not t.ok for t in trials)
    interrupted = [c for c in stops if c.returncode is not None]
    c_hangs = sum(c.exit_s is None or c.exit_s > CTRL_C_WITHIN_S for c in interrupted)
    c_max = max((c.exit_s for c in interrupted if c.exit_s is not None), default=0.0)
    c_failures = sum(not c.ok for c in stops)
    print(f"RESULT trials={n} killed={len(killed)} hangs={hangs} failures={failures} "
          f"max_exit_s={max_exit:.2f} ctrl_c_trials={len(stops)} ctrl_c_interrupted={len(interrupted)} "
          f"ctrl_c_hangs={c_hangs} ctrl_c_failures={c_failures} ctrl_c_max_exit_s={c_max:.2f}")


if __name__ == "__main__":
    main()
