"""Reclaiming what runs of coordsim killed by SIGKILL left behind: embedded
Postgres directories, file blob stores, staging directories (DESIGN.md §9:
a command cleans up after itself, and the next one after a command that
could not).

What is a leftover, and what is never one, is `sim.runtime.owners`' rule: a
valid owner record naming a process that is gone. Before its directory is
removed, every process still running in it is stopped — a postmaster whose
owner and watchdog both died keeps running, orphaned, with the data directory
as its working directory: it gets SIGQUIT (PostgreSQL's immediate shutdown,
which frees its shared memory), stragglers SIGKILL. A leftover whose
processes will not stop, or that cannot be removed, is kept and reported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, final

from sim.runtime import owners

if TYPE_CHECKING:
    from pathlib import Path

    from sim.runtime.owners import Leftover

__all__ = ["Reclaimed", "processes_in", "reclaim", "reclaim_at_startup"]

#: At start-up, how long reclaiming may wait for orphaned processes to stop
#: (only ever spent when there are some: a run whose watchdog died too).
STARTUP_WAIT_S: Final = 2.0
#: `coordsim doctor --clean`'s wait.
CLEAN_WAIT_S: Final = 10.0
_POLL_S: Final = 0.05


@final
@dataclass(frozen=True)
class Reclaimed:
    """What one `reclaim` did: the leftovers removed, and those kept with why."""

    removed: list[Leftover] = field(default_factory=list)
    kept: list[tuple[Leftover, str]] = field(default_factory=list)


def _cwd(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd").removesuffix(" (deleted)")
    except OSError:
        return None


def processes_in(paths: list[Path]) -> dict[Path, list[int]]:
    """The live processes whose working directory is each of `paths` or below
    it (Linux /proc; elsewhere none are found). One pass over /proc."""
    # Here, not at the top: start-up reclaims, and most starts find nothing.
    from sim.services.pg_processes import alive

    roots = {os.path.realpath(p): p for p in paths}
    found: dict[Path, list[int]] = {p: [] for p in paths}
    if not roots:
        return found
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            cwd = _cwd(entry.name)
            if cwd is None:
                continue
            for real, p in roots.items():
                if (cwd == real or cwd.startswith(real + os.sep)) and alive(int(entry.name)):
                    found[p].append(int(entry.name))
    return found


def _postmasters(pids: list[int]) -> list[int]:
    """Those of `pids` that are a postmaster: named by the `postmaster.pid` of
    their own working directory (a cluster's data directory)."""
    out = []
    for pid in pids:
        cwd = _cwd(str(pid))
        if cwd is None:
            continue
        try:
            with open(os.path.join(cwd, "postmaster.pid")) as f:
                named = int(f.readline())
        except (OSError, ValueError):
            continue
        if named == pid:
            out.append(pid)
    return out


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _stop(path: Path, pids: list[int], wait_s: float) -> list[int]:
    """Stops the processes running in `path`: SIGQUIT to postmasters, then
    after half of `wait_s` SIGKILL to whatever is left. Returns the survivors."""
    # Real sleeps: these are real processes, and this is a sync clean-up.
    _signal(_postmasters(pids), signal.SIGQUIT)
    deadline = time.monotonic() + wait_s / 2
    killed = False
    while pids := processes_in([path])[path]:
        if time.monotonic() > deadline:
            if killed:
                return pids
            _signal(pids, signal.SIGKILL)
            killed, deadline = True, time.monotonic() + wait_s / 2
        time.sleep(_POLL_S)
    return []


def reclaim(root: Path | None = None, *, wait_s: float = CLEAN_WAIT_S,
            found: list[Leftover] | None = None) -> Reclaimed:
    """Removes every reclaimable leftover in TMPDIR (`root`), or of `found`
    (from `owners.scan`), stopping what still runs in it first (at most
    `wait_s` in all). Never raises for a leftover: one that cannot go is kept.
    """
    leftovers = [lo for lo in (owners.scan(root) if found is None else found) if lo.reclaimable]
    done = Reclaimed()
    if not leftovers:
        return done
    running = processes_in([lo.path for lo in leftovers])
    deadline = time.monotonic() + wait_s
    for lo in leftovers:
        pids = running[lo.path]
        if pids:
            left = _stop(lo.path, pids, max(0.0, deadline - time.monotonic()))
            if left:
                done.kept.append((lo, f"processes {left} still run in it"))
                continue
        try:
            gone = owners.remove(lo)
        except OSError as exc:
            done.kept.append((lo, f"cannot remove it: {exc.strerror or exc}"))
            continue
        if gone:
            done.removed.append(lo)
        else:
            done.kept.append((lo, "it holds files its owner record does not vouch for"))
    return done


def reclaim_at_startup() -> Reclaimed | None:
    """What every command does first (but `--help` and `doctor`, which lists
    instead): `reclaim` with a short wait. Quiet and never failing: the
    command itself must run whatever TMPDIR holds."""
    try:
        return reclaim(wait_s=STARTUP_WAIT_S)
    except Exception:  # a clean-up of others' debris must never stop this run
        return None
