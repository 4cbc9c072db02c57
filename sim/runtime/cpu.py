"""Modeled CPU: a pool of cores that coordinator work queues for."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sim.runtime.core import Runtime

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

__all__ = ['CorePool', 'CorePoolStatistics']

# --- Modeled CPU ------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class CorePoolStatistics:
    name: str
    cores: int
    busy_s: float
    acquisitions: int
    wait_s: float


@final
class CorePool:
    """N modeled cores: CPU work holds one core for its duration.

    The event loop's coordinator is a pool of 1, so its handlers serialize; the
    decoupled adapter shares a pool of N. Waiters are served in arrival order.
    """

    def __init__(self, runtime: Runtime, cores: int, name: str) -> None:
        if cores < 1:
            raise ValueError(f"a core pool needs >= 1 core, got {cores}")
        self._rt = runtime
        self.cores = cores
        self.name = name
        self._sem = asyncio.Semaphore(cores)
        self._busy_s = 0.0
        self._wait_s = 0.0
        self._acquisitions = 0
        #: Real time only: modeled CPU not yet slept off (see `Runtime.cpu`).
        self.owed_s = 0.0

    @contextlib.asynccontextmanager
    async def core(self) -> AsyncIterator[None]:
        """Holds one core for the duration of the block."""
        start = self._rt.now()
        async with self._sem:
            got = self._rt.now()
            self._wait_s += got - start
            self._acquisitions += 1
            try:
                yield
            finally:
                self._busy_s += self._rt.now() - got

    async def hold(self, seconds: float) -> None:
        """Holds one core for `seconds` of virtual time: `core()` around a sleep,
        without an async context manager's generator (the virtual loop's hot
        path; same order of events)."""
        rt = self._rt
        start = rt.now()
        await self._sem.acquire()
        got = rt.now()
        self._wait_s += got - start
        self._acquisitions += 1
        try:
            await asyncio.sleep(seconds if seconds > 0 else 0.0)
        finally:
            self._busy_s += rt.now() - got
            self._sem.release()

    def statistics(self) -> CorePoolStatistics:
        return CorePoolStatistics(self.name, self.cores, self._busy_s, self._acquisitions, self._wait_s)


