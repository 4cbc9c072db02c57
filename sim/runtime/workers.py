"""Worker processes for runs that do not depend on each other (the seeds of an
anomaly sweep, the passes of a virtual-mode comparison): one pool policy for
every command, so Ctrl-C and process start behave the same everywhere.

Only virtual runs go to workers: their results are in simulated time, so they
do not change when several run at once. A real-mode measurement shares the
machine with nothing of its own.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import signal
from typing import TYPE_CHECKING, Final

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["MAX_JOBS", "check_jobs", "workers"]

#: More workers than this is a typo on any machine coordsim runs on.
MAX_JOBS: Final = 1024


def check_jobs(jobs: int) -> None:
    """Raises `InvalidUsage` for a worker count outside 1..MAX_JOBS."""
    if not 1 <= jobs <= MAX_JOBS:
        raise InvalidUsage(f"--jobs must be between 1 and {MAX_JOBS}, got {jobs}")


@contextlib.contextmanager
def workers(jobs: int, *, preload: str | Sequence[str]) -> Iterator[concurrent.futures.ProcessPoolExecutor | None]:
    """A pool of `jobs` worker processes for the block, or None for one job
    (run in this process).

    The workers ignore SIGINT and SIGHUP: they share the terminal's process
    group, and the parent owns the run. On leaving the block, even by an
    interrupt or an error, what is queued is dropped, the work in flight
    finishes, and no process is left behind. They are started by forkserver
    where it exists (Linux), whose server imports `preload` (a module, or
    several: what the work imports, when its own module imports it lazily)
    once and never forks a threaded parent; by spawn elsewhere."""
    check_jobs(jobs)
    if jobs == 1:
        yield None
        return
    ctx: multiprocessing.context.BaseContext
    if "forkserver" in multiprocessing.get_all_start_methods():
        server = multiprocessing.get_context("forkserver")
        server.set_forkserver_preload([preload] if isinstance(preload, str) else list(preload))
        ctx = server
    else:
        ctx = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_ignore_interrupts)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
