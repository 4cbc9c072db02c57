"""The processes of an embedded PostgreSQL cluster, and cleaning up after them.

A postmaster and every process it forks run with the data directory as their
working directory, which /proc shows even after the postmaster died (its
backends linger until they notice) and cannot be confused with an unrelated
process that reused a stale `postmaster.pid`'s pid. That is how a cluster's
processes are found, waited for and killed here, and how the `Watchdog` — a
process that outlives an owner killed by SIGKILL — takes a cluster down and
deletes its directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

from sim.services.errors import BackendUnavailable
from sim.services.processes import wait_or_kill

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Watchdog", "alive", "cluster_pids", "postmaster_pid", "wait_exited"]

#: Seconds `Watchdog.dismiss()` waits for the watchdog to exit after telling it to.
_WATCHDOG_EXIT_S: Final = 5.0


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a container's init may never
    reap an orphaned postmaster; a zombie holds no memory, files or ports)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    fields = stat.rpartition(b")")[2].split()
    return bool(fields) and fields[0] != b"Z"


def cluster_pids(datadir: Path) -> list[int]:
    """The live processes whose working directory is `datadir` (Linux /proc;
    elsewhere none are found, and the caller relies on pg_ctl alone)."""
    want = str(datadir)
    pids = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cwd = os.readlink(f"/proc/{entry.name}/cwd")
            except OSError:  # gone, a zombie, or not ours to inspect
                continue
            if cwd.removesuffix(" (deleted)") == want and alive(int(entry.name)):
                pids.append(int(entry.name))
    return sorted(pids)


def postmaster_pid(datadir: Path) -> int | None:
    """The pid in `datadir`'s `postmaster.pid`, if it is a live process of
    that cluster (without /proc, whatever pid the file names)."""
    try:
        with (datadir / "postmaster.pid").open() as f:
            pid = int(f.readline())
    except (OSError, ValueError):
        return None
    if Path("/proc").is_dir():
        return pid if pid in cluster_pids(datadir) else None
    return pid


def wait_exited(datadir: Path, *, linger_s: float, reap_s: float, poll_s: float) -> None:
    """Waits until no process of the cluster in `datadir` is left: `linger_s`
    for them to exit by themselves, then SIGKILL and `reap_s` more.

    Raises:
        BackendUnavailable: some process would not exit.
    """
    # Real sleeps, in a sync function that already waits on subprocesses: the
    # processes are real and so is their exit.
    deadline = time.monotonic() + linger_s
    killed = False
    while pids := cluster_pids(datadir):
        if time.monotonic() > deadline:
            if killed:
                raise BackendUnavailable(f"PostgreSQL processes {pids} of {datadir} would not exit")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed, deadline = True, time.monotonic() + reap_s
        time.sleep(poll_s)


# The watchdog: a separate interpreter (stdlib only, `-I -S`, so nothing in the
# working tree can break it) that blocks reading a pipe whose only write end
# the owner holds. EOF without the owner's "q" means the owner died — even by
# SIGKILL, which no atexit handler survives — so it takes the cluster down
# (SIGQUIT to the postmaster: an immediate shutdown that still frees the shared
# memory; SIGKILL for whatever remains), deletes the directory coordsim created,
# and exits. It mirrors `cluster_pids` because it cannot import this module.
_WATCHDOG_SRC: Final = r"""# coordsim: embedded PostgreSQL watchdog
import os, shutil, signal, sys, time

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return False
    return bool(fields) and fields[0] != b"Z"

def members(datadir):
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for name in entries:
        if not name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if cwd.removesuffix(" (deleted)") == datadir and alive(int(name)):
            pids.append(int(name))
    return pids

def signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass

def take_down(datadir):
    pids = members(datadir)
    try:
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            postmaster = int(f.readline())
    except (OSError, ValueError):
        postmaster = None
    if postmaster is not None and (postmaster in pids or not os.path.isdir("/proc")):
        signal_all([postmaster], signal.SIGQUIT)
    deadline, sig = time.monotonic() + 5, None
    while pids:
        if time.monotonic() > deadline:
            if sig is not None:
                return
            sig, deadline = signal.SIGKILL, time.monotonic() + 5
        if sig is not None:
            signal_all(pids, sig)
        time.sleep(0.05)
        pids = members(datadir)

def remove(root):
    # The owner record last: should something still write here (a postmaster
    # starting as we delete), what is left stays claimed, and the next start
    # of coordsim reclaims it (sim.services.leftovers).
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if name == ".coordsim-owner":
            continue
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    try:
        if set(os.listdir(root)) <= {".coordsim-owner"}:
            shutil.rmtree(root, ignore_errors=True)
    except OSError:
        pass

def main():
    fd, root, datadirs = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    got = b""
    while True:
        try:
            chunk = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    if b"q" in got:
        return
    for datadir in datadirs:
        take_down(datadir)
    remove(root)
    for datadir in datadirs:
        take_down(datadir)
    remove(root)

for s in (signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
main()
"""


@final
class Watchdog:
    """Deletes `root` (after taking down the clusters in `datadirs`) when the
    owner process dies without calling `dismiss()` first."""

    def __init__(self, root: Path, datadirs: Sequence[Path]) -> None:
        read_end, self._write_end = os.pipe()  # both O_CLOEXEC: no other child inherits them
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_SRC, str(read_end), str(root),
                 *(str(d) for d in datadirs)],
                pass_fds=(read_end,),
                # Its own session: Ctrl-C (SIGINT to the terminal's process
                # group) or a SIGHUP must not end it before the owner.
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # nor may it hold the owner's pipes open
                stderr=subprocess.DEVNULL,
                cwd="/",
            )
        except OSError as exc:
            os.close(self._write_end)
            raise BackendUnavailable(f"cannot start the PostgreSQL watchdog: {exc}") from exc
        except BaseException:
            os.close(self._write_end)
            raise
        finally:
            os.close(read_end)

    def dismiss(self) -> None:
        """Tells the watchdog the owner cleaned up itself, and reaps it. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            with contextlib.suppress(OSError):
                os.write(self._write_end, b"q")
        finally:
            os.close(self._write_end)
        wait_or_kill(proc, _WATCHDOG_EXIT_S)
