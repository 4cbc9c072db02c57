"""CPU accounting from /proc: how much of the machine a run used and how much
other processes took from it over the same wall time, so that a busy host is
reported instead of being mistaken for a slower design (issue 33).

Linux only: where /proc is missing (macOS, Windows) the CPU figures are None,
never guesses. Nothing here holds state between calls except a started
`HostSampler`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = [
    "HostSampler",
    "HostUsage",
    "own_cpu_s",
    "process_tree_cpu_s",
    "usable_cores",
]

_PROC: Final = Path("/proc")

#: /proc/stat's per-CPU columns that are work: user, nice, system, irq, softirq,
#: steal (indexes after the name). Idle and iowait are waiting; guest and
#: guest_nice are already inside user and nice.
_BUSY_COLUMNS: Final = (0, 1, 2, 5, 6, 7)


@final
@dataclass(frozen=True)
class HostUsage:
    """CPU used over a sampled interval of `wall_s` seconds, in cores (CPU
    seconds per wall second). `host_busy_cores` counts every process on the
    CPUs this process may run on; `own_cores` this process tree (and any extra
    roots the sampler was given); `other_cores` the rest, floored at 0 because
    the kernel accounts /proc/stat and per-process times separately and they
    differ by a tick or two. The three are None without /proc."""

    wall_s: float
    host_busy_cores: float | None
    own_cores: float | None
    other_cores: float | None
    usable_cores: int


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask), else all of them.
    A cgroup CPU quota is not seen here."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def own_cpu_s() -> float:
    """This process's CPU seconds (user + system, every thread; not children)."""
    return time.process_time()


def process_tree_cpu_s(root_pid: int) -> float | None:
    """CPU seconds of `root_pid` and its live descendants, including the
    children each of them has already waited for (cutime/cstime): a postmaster
    reaps its backends as connections close, and their CPU must not vanish.
    Take the difference of two readings for a window.

    Returns:
        None without /proc or when `root_pid` is not running.
    """
    table = _process_table()
    if table is None or root_pid not in table:
        return None
    return _tree_ticks(table, (root_pid,)) / _ticks_per_s()


@final
class HostSampler:
    """Measures CPU use between `start()` and `stop()`: the whole host's (over
    the CPUs in this process's affinity mask, so a container pinned to 2 of 64
    CPUs is not charged with the other 62) and this process tree's.

    "This process tree" is this process and every live descendant, found by
    following /proc's parent links at each reading, plus the children already
    reaped (a process's cutime/cstime). `also_own` names more roots whose trees
    count as this run's: a postmaster started through `pg_ctl` is not our
    descendant (pg_ctl exits and it is re-parented), yet its backends serve our
    load. A process that runs and is reaped by someone else between the two
    readings (an orphan reaped by init) is charged to "other".

    Args:
        also_own: called at each reading for extra root pids (e.g. a
            postmaster's); a pid that is not running is ignored.
        clock: wall seconds, monotonic (injected for tests).
    """

    def __init__(
        self,
        *,
        also_own: Callable[[], Iterable[int]] = tuple,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._also_own = also_own
        self._clock = clock
        self._start: _Reading | None = None

    def start(self) -> None:
        """Takes the first reading.

        Raises:
            InvalidUsage: already started and not stopped.
        """
        if self._start is not None:
            raise InvalidUsage("HostSampler.start() called twice without stop()")
        self._start = self._read()

    def stop(self) -> HostUsage:
        """Takes the second reading; the sampler may then be started again.

        Raises:
            InvalidUsage: not started.
        """
        if self._start is None:
            raise InvalidUsage("HostSampler.stop() called before start()")
        first, self._start = self._start, None
        last = self._read()
        wall = last.t - first.t
        n = usable_cores()
        if first.host is None or last.host is None or wall <= 0:
            return HostUsage(
                wall_s=wall, host_busy_cores=None, own_cores=None, other_cores=None, usable_cores=n
            )
        per_s = _ticks_per_s() * wall
        host = (last.host - first.host) / per_s
        own = max(0, last.own - first.own) / per_s
        return HostUsage(
            wall_s=wall,
            host_busy_cores=host,
            own_cores=own,
            other_cores=max(0.0, host - own),
            usable_cores=n,
        )

    def _read(self) -> _Reading:
        cpus = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        table = _process_table()
        host = _busy_ticks(cpus)
        t = self._clock()
        if table is None:
            return _Reading(t=t, host=None, own=0)
        own = _tree_ticks(table, (os.getpid(), *self._also_own()))
        return _Reading(t=t, host=host, own=own)


@final
@dataclass(frozen=True)
class _Reading:
    t: float
    host: int | None  # busy ticks since boot on the sampled CPUs; None without /proc
    own: int  # ticks of the own process trees


def _ticks_per_s() -> int:
    return os.sysconf("SC_CLK_TCK")


def _busy_ticks(cpus: frozenset[int] | None) -> int | None:
    """Busy ticks since boot summed over `cpus` (every CPU when None)."""
    try:
        text = (_PROC / "stat").read_text()
    except OSError:
        return None
    total = 0
    found = False
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu"):
            break  # the cpu lines come first
        cpu = name.removeprefix("cpu")
        if (cpus is None and not cpu) or (cpus is not None and cpu.isdigit() and int(cpu) in cpus):
            columns = rest.split()
            total += sum(int(columns[i]) for i in _BUSY_COLUMNS if i < len(columns))
            found = True
    return total if found else None


def _process_table() -> dict[int, tuple[int, int]] | None:
    """pid -> (parent pid, utime + stime + cutime + cstime in ticks) of every
    process /proc shows now; None without /proc."""
    try:
        entries = list(os.scandir(_PROC))
    except OSError:
        return None
    table: dict[int, tuple[int, int]] = {}
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
        except OSError:  # exited while we walked (ENOENT, ESRCH) or not ours to read
            continue
        # The command name may hold spaces and parentheses: split after the last ")".
        fields = stat.rpartition(b")")[2].split()
        try:
            ppid = int(fields[1])
            ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        except (IndexError, ValueError):
            continue
        table[int(entry.name)] = (ppid, ticks)
    return table


def _tree_ticks(table: dict[int, tuple[int, int]], roots: Iterable[int]) -> int:
    """Ticks of `roots` and all their descendants in `table`, each counted once."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, ()))
    return sum(table[pid][1] for pid in seen)
