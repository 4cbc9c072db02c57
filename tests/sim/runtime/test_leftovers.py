"""Nothing left behind (issue 38, item 4): what a run killed by SIGKILL leaves
in TMPDIR (and its staging directories) is reclaimed when coordsim next
starts — and nothing else ever is: not a directory without a valid owner
record of coordsim's, not one whose owner still runs, not one a reused pid
would make look dead.

The unit tests forge owner records; the last tests SIGKILL a real-mode
`coordsim compare` mid-run (once with its watchdogs, so its postmaster is
orphaned) and start coordsim again.
"""

from __future__ import annotations

import json
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
from typer.testing import CliRunner

from sim.cli.main import app
from sim.runtime import owners
from sim.runtime.owners import (
    OWNER_FILE,
    Owner,
    make_dir,
    private_tmpdir,
    process_start,
    release,
    scan,
)
from sim.services import leftovers
from sim.services.leftovers import processes_in, reclaim

if TYPE_CHECKING:
    from collections.abc import Iterator

_COORDSIM: Final = [sys.executable, "-c", "from sim.cli.entry import main; main()"]


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private TMPDIR for this test: what `mkdtemp` and `scan` use."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def _forge(d: Path, /, **changes: object) -> None:
    """Rewrites directory `d`'s owner record with `changes` (as a dead run's would be)."""
    record = json.loads((d / OWNER_FILE).read_text())
    record.update(changes)
    (d / OWNER_FILE).write_text(json.dumps(record))


# --- owners and their processes -----------------------------------------------------------------


def test_the_start_time_is_field_22_of_proc_stat() -> None:
    fields = Path("/proc/self/stat").read_bytes().rpartition(b")")[2].split()
    assert process_start(os.getpid()) == int(fields[19])
    assert process_start(_dead_pid()) is None


def test_an_owner_is_alive_dead_reused_or_foreign() -> None:
    here = Owner.current()
    assert here.state() == "alive"
    assert Owner(_dead_pid(), 1, here.boot, here.pidns, here.host).state() == "dead"
    assert here.start is not None
    # Our pid, another start time: an earlier process whose pid we reuse.
    assert Owner(here.pid, here.start - 1, here.boot, here.pidns, here.host).state() == "reused"
    assert Owner(1, None, here.boot, here.pidns, here.host).state() == "alive"  # pid 1 runs; start unknown
    assert Owner(here.pid, here.start, "another-boot", here.pidns, here.host).state() == "dead"
    assert Owner(_dead_pid(), 1, here.boot, "pid:[1]", here.host).state() == "foreign"
    assert Owner(_dead_pid(), 1, here.boot, here.pidns, "elsewhere").state() == "foreign"


def test_a_claimed_directory_carries_a_private_record(tmp_root: Path) -> None:
    d = private_tmpdir("coordsim-test-", "blob")
    assert d.parent == tmp_root.resolve()
    assert os.stat(d / OWNER_FILE).st_mode & 0o777 == 0o600
    record = json.loads((d / OWNER_FILE).read_text())
    assert (record["pid"], record["start"], record["kind"], record["path"]) == (
        os.getpid(), process_start(os.getpid()), "blob", str(d))
    assert [(lo.path, lo.state) for lo in scan()] == [(d, "alive")]
    with pytest.raises(ValueError, match="prefix"):
        private_tmpdir("mine-", "blob")


# --- what is, and is never, reclaimed ---------------------------------------------------------


def test_a_dead_runs_directory_is_reclaimed_and_nothing_else(tmp_root: Path) -> None:
    dead = private_tmpdir("coordsim-pg-", "postgres")
    (dead / "data").mkdir()
    (dead / "data" / "PG_VERSION").write_text("16\n")
    _forge(dead, pid=_dead_pid())
    reused = private_tmpdir("coordsim-blob-", "blob")
    _forge(reused, start=(process_start(os.getpid()) or 0) - 1)
    live = private_tmpdir("coordsim-blob-", "blob")  # ours: we run
    unowned = tmp_root / "coordsim-blob-unowned"
    unowned.mkdir()
    (unowned / "f").write_text("no owner record: not coordsim's to take\n")
    moved = private_tmpdir("coordsim-blob-", "blob")
    _forge(moved, pid=_dead_pid(), path=str(tmp_root / "coordsim-blob-elsewhere"))
    other_host = private_tmpdir("coordsim-blob-", "blob")
    _forge(other_host, pid=_dead_pid(), host="another-host")
    linked = private_tmpdir("coordsim-blob-", "blob")
    real = linked / "real-record"
    (linked / OWNER_FILE).rename(real)
    forged = json.loads(real.read_text())
    forged["pid"] = _dead_pid()
    real.write_text(json.dumps(forged))
    (linked / OWNER_FILE).symlink_to(real)  # a link is no record
    garbled = private_tmpdir("coordsim-blob-", "blob")
    (garbled / OWNER_FILE).write_text("{not json")

    states = {lo.path: lo.state for lo in scan()}
    assert states == {dead: "dead", reused: "reused", live: "alive", unowned: "unowned", moved: "moved",
                      other_host: "foreign", linked: "unowned", garbled: "unowned"}
    done = reclaim(wait_s=1)
    assert sorted(lo.path for lo in done.removed) == sorted([dead, reused])
    assert done.kept == []
    assert not dead.exists()
    assert not reused.exists()
    for kept in (live, unowned, moved, other_host, linked, garbled):
        assert kept.is_dir(), kept
    assert (unowned / "f").exists()


def test_a_record_of_another_user_is_no_record(tmp_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = private_tmpdir("coordsim-blob-", "blob")
    _forge(d, pid=_dead_pid())
    uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: uid + 1)  # as another user sees our file
    assert [lo.state for lo in scan()] == ["unowned"]
    assert reclaim(wait_s=1).removed == []
    assert d.is_dir()


def test_a_staging_directory_elsewhere_is_found_through_its_pointer(tmp_root: Path, tmp_path: Path) -> None:
    stage = tmp_path / "work" / ".out.tmp-123"
    stage.parent.mkdir()
    make_dir(stage, "stage", inside=False)
    (stage / "results.csv").write_text("a,b\n")
    pointers = list(tmp_root.glob("coordsim-owner-*.json"))
    assert len(pointers) == 1
    assert [(lo.path, lo.state, lo.pointer) for lo in scan()] == [(stage, "alive", pointers[0])]
    # Its owner dies.
    record = json.loads(pointers[0].read_text())
    pointers[0].write_text(json.dumps({**record, "pid": _dead_pid()}))
    done = reclaim(wait_s=1)
    assert [lo.path for lo in done.removed] == [stage]
    assert not stage.exists()
    assert list(tmp_root.iterdir()) == []
    release(stage)  # idempotent: the pointer is gone already


def test_a_later_directory_of_the_same_name_is_not_taken(tmp_root: Path, tmp_path: Path) -> None:
    """A dead run's pointer names a path that another directory now holds
    (a process reusing the pid made the same staging name): not its own."""
    stage = tmp_path / ".out.tmp-123"
    make_dir(stage, "stage", inside=False)
    (pointer,) = tmp_root.glob("coordsim-owner-*.json")
    pointer.write_text(json.dumps({**json.loads(pointer.read_text()), "pid": _dead_pid()}))
    stage.rmdir()
    (tmp_path / "filler").mkdir()  # the same inode number must not come back
    stage.mkdir()
    (stage / "theirs.csv").write_text("x\n")
    done = reclaim(wait_s=1)
    assert done.removed == []
    assert (stage / "theirs.csv").exists()
    assert not pointer.exists()  # it proves nothing any more


def test_released_directories_leave_no_pointer(tmp_root: Path, tmp_path: Path) -> None:
    stage = tmp_path / ".out.tmp-1"
    make_dir(stage, "stage")
    assert (stage / OWNER_FILE).exists()
    stage.joinpath(OWNER_FILE).unlink()
    stage.rmdir()
    # Made again under the same name while the first is still held (a failed
    # run's partial trace goes out through a stage of its own): two pointers.
    make_dir(stage, "stage", inside=False)
    assert len(list(tmp_root.iterdir())) == 2
    stage.rmdir()
    release(stage)
    release(stage)
    release(stage)  # idempotent
    assert list(tmp_root.iterdir()) == []


# --- processes still running in a leftover ------------------------------------------------------


@pytest.fixture
def sleeper() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


_POSTMASTER: Final = (
    "import os, signal, sys, time\n"
    "open('postmaster.pid', 'w').write(f'{os.getpid()}\\n')\n"
    "signal.signal(signal.SIGQUIT, lambda *a: sys.exit(7))\n"  # an immediate shutdown: exit 7
    "print('up', flush=True)\n"
    "time.sleep(120)\n"
)


def test_an_orphaned_postmaster_is_stopped_before_its_directory_goes(
    tmp_root: Path, sleeper: list[subprocess.Popen[bytes]]
) -> None:
    d = private_tmpdir("coordsim-pg-", "postgres")
    (d / "data").mkdir()
    postmaster = subprocess.Popen([sys.executable, "-c", _POSTMASTER], cwd=d / "data", stdout=subprocess.PIPE)
    backend = subprocess.Popen(["sleep", "120"], cwd=d / "data")  # ignores nothing: SIGKILLed
    sleeper += [postmaster, backend]
    assert postmaster.stdout is not None
    assert postmaster.stdout.readline() == b"up\n"
    _forge(d, pid=_dead_pid())
    assert processes_in([d]) == {d: sorted([postmaster.pid, backend.pid])}
    done = reclaim(wait_s=2)
    assert [lo.path for lo in done.removed] == [d]
    assert postmaster.wait(timeout=5) == 7  # SIGQUIT, PostgreSQL's immediate shutdown
    assert backend.wait(timeout=5) == -signal.SIGKILL
    assert not d.exists()


def test_a_leftover_whose_processes_will_not_stop_is_kept(
    tmp_root: Path, sleeper: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = private_tmpdir("coordsim-pg-", "postgres")
    proc = subprocess.Popen(["sleep", "120"], cwd=d)
    sleeper.append(proc)
    _forge(d, pid=_dead_pid())
    monkeypatch.setattr(leftovers, "_signal", lambda pids, sig: None)  # signals that change nothing
    done = reclaim(wait_s=0.2)
    assert done.removed == []
    assert [(lo.path, why) for lo, why in done.kept] == [(d, f"processes [{proc.pid}] still run in it")]
    assert d.is_dir()


# --- the commands ---------------------------------------------------------------------------------


def test_doctor_lists_leftovers_and_clean_removes_them(tmp_root: Path) -> None:
    dead = private_tmpdir("coordsim-blob-", "blob")
    _forge(dead, pid=_dead_pid())
    live = private_tmpdir("coordsim-blob-", "blob")
    runner = CliRunner()
    listed = runner.invoke(app, ["doctor"], env={"COLUMNS": "300"})
    assert dead.is_dir(), "doctor without --clean changes nothing"
    row = next(line for line in listed.stdout.splitlines() if str(dead) in line)
    assert "left behind: its process is gone" in row
    assert "1 left behind by dead runs" in listed.stdout
    cleaned = runner.invoke(app, ["doctor", "--clean"], env={"COLUMNS": "300"})
    assert "removed" in next(line for line in cleaned.stdout.splitlines() if str(dead) in line)
    assert not dead.exists()
    assert live.is_dir()


def test_any_other_command_reclaims_at_start(tmp_root: Path) -> None:
    dead = private_tmpdir("coordsim-blob-", "blob")
    _forge(dead, pid=_dead_pid())
    result = CliRunner().invoke(app, ["config", "show"])
    assert result.exit_code == 0, result.output
    assert not dead.exists()


def test_help_does_no_reclaiming() -> None:
    """`coordsim --help` stays cheap (issue 37): it imports none of it."""
    code = ("import sys; sys.argv = ['coordsim', '--help']\n"
            "from sim.cli.main import app\n"
            "try: app()\nexcept SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m in ('sim.runtime.owners', 'sim.services.leftovers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


# --- a real SIGKILL ---------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_bytes().rpartition(b")")[2].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _wait_for(cond: object, timeout: float) -> None:
    assert callable(cond)
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.postgres
@pytest.mark.parametrize("watchdogs", ["kept", "killed too"])
def test_a_sigkilled_real_run_leaves_nothing_after_the_next_start(tmp_path: Path, watchdogs: str) -> None:
    """`compare --mode real` is SIGKILLed once its blob store exists (its
    cluster runs, its stage is made); with its watchdogs too, its postmaster
    runs on, orphaned. The next start of coordsim leaves nothing."""
    # Not under tmp_path (whose parents are 0700): as root, the cluster runs
    # as another account, which must reach its directory.
    tmp = Path(tempfile.mkdtemp(prefix="test-leftovers-", dir=_system_tmp()))
    tmp.chmod(0o755)
    try:
        _sigkill_then_start(tmp, tmp_path, watchdogs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # made above


def _system_tmp() -> str:
    return os.environ.get("TMPDIR") or "/tmp"


def _sigkill_then_start(tmp: Path, tmp_path: Path, watchdogs: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COORDSIM_POSTGRES_URL"} | {"TMPDIR": str(tmp)}
    out = tmp_path / "out"
    args = ["compare", "--mode", "real", "-w", "select-one,insert", "--configs", "decoupled",
            "--concurrency", "1", "--repeat", "2", "-T", "2", "--warmup", "0.2", "-o", str(out)]
    proc = subprocess.Popen([*_COORDSIM, *args], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: any(p.name.startswith("coordsim-blob-") for p in tmp.iterdir()), 60)
        assert proc.poll() is None
        victims = [proc.pid] + (_children(proc.pid) if watchdogs == "killed too" else [])
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    before = sorted(p.name for p in tmp.iterdir())
    assert any(n.startswith("coordsim-blob-") for n in before), before
    assert any(p.name.startswith(".out.tmp-") for p in tmp_path.iterdir())
    if watchdogs == "killed too":
        assert [p for p in tmp.iterdir() if p.name.startswith("coordsim-pg-") and (p / "data" / "postmaster.pid").exists()]

    subprocess.run([*_COORDSIM, "config", "show"], env=env, cwd=tmp_path, check=True, stdout=subprocess.DEVNULL, timeout=60)

    assert sorted(p.name for p in tmp.iterdir()) == [], before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []
    assert processes_in([tmp]) == {tmp: []}
    assert owners.scan(tmp) == []
