"""The embedded Postgres dying under a real-mode run (issue 38, item 1): its
postmaster SIGKILLed mid-run ends `compare` within 60 s with exit 1 and one
line naming it; a postmaster that hangs (SIGSTOP) does not stop Ctrl-C from
ending the run within 5 s. `bench/faults.py` repeats the first at random moments.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

_COORDSIM: Final = [sys.executable, "-c", "from sim.cli.entry import main; main()"]
_ROOT: Final = Path(__file__).resolve().parents[3]


@pytest.fixture
def where() -> Iterator[Path]:
    """A private TMPDIR for the run, in the system's temporary directory
    (pytest's is 0700 to root, which the unprivileged Postgres cannot enter)."""
    path = Path(tempfile.mkdtemp(prefix="coordsim-death-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _compare(tmp: Path) -> subprocess.Popen[str]:
    tmp.chmod(0o711)  # as root the cluster runs as an unprivileged user
    argv = [*_COORDSIM, "compare", "--mode", "real", "--workloads", "select-one,insert",
            "--configs", "event-loop,decoupled", "--concurrency", "1,8", "--ops", "300",
            "-o", str(tmp / "out")]
    env = {**os.environ, "TMPDIR": str(tmp)}
    env.pop("COORDSIM_POSTGRES_URL", None)  # the embedded server is the subject
    return subprocess.Popen(argv, cwd=_ROOT, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _postmaster_once_running(proc: subprocess.Popen[str], tmp: Path) -> int:
    """The postmaster's pid, once the run has measured its first level (read
    from stderr: `compare: … pass 1 c=1: …`)."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("compare: ") and " c=" in line:
            break
    else:
        rest = proc.stderr.read()
        pytest.fail(f"the run ended before its first level (exit {proc.wait()}): {rest}")
    for pidfile in tmp.glob("coordsim-pg-*/data/postmaster.pid"):
        return int(pidfile.read_text().split("\n", 1)[0])
    pytest.fail("no embedded postmaster found")


def test_sigkilled_postmaster_ends_the_run_with_one_line(where: Path) -> None:
    proc = _compare(where)
    try:
        pid = _postmaster_once_running(proc, where)
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("coordsim:")]
    assert len(lines) == 1, err
    assert f"the embedded Postgres (pid {pid}) died during the run" in lines[0], err
    assert "nothing was written" in lines[0]
    assert not (where / "out" / "report.md").exists()
    assert took < 60


def test_ctrl_c_ends_a_run_whose_postgres_hangs_within_5_s(where: Path) -> None:
    proc = _compare(where)
    pid = None
    try:
        pid = _postmaster_once_running(proc, where)
        # The whole cluster stops answering: the postmaster and its backends.
        members = [pid, *_children(pid)]
        for p in members:
            os.kill(p, signal.SIGSTOP)
        time.sleep(1.0)  # calls are now stuck on the driver
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if pid is not None:
            for p in [pid, *_children(pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < 5.0, f"took {took:.2f} s: {err}"
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            kids.append(int(entry))
    return kids
