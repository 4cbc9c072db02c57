"""Modeled CPU: a pool of cores that coordinator work queues for."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from sim.runtime.loop import wake
from sim.runtime.patches import get_running_loop

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from sim.runtime.core import Runtime

__all__ = ["REAL_CPU_QUANTUM_S", "CorePool", "CorePoolStatistics", "Hold"]

# --- Modeled CPU ------------------------------------------------------------------------

#: Real time: the least modeled CPU slept at once (see `CorePool.owe`).
REAL_CPU_QUANTUM_S: Final = 0.001


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

    The cores are counted as `asyncio.Semaphore` counts them, step for step
    (the same futures, woken in the same order), without its per-call
    overhead: `hold` runs about ten times per simulated statement (issue 20).
    """

    def __init__(self, runtime: Runtime, cores: int, name: str) -> None:
        if cores < 1:
            raise ValueError(f"a core pool needs >= 1 core, got {cores}")
        self._rt = runtime
        self.cores = cores
        self.name = name
        self._free = cores
        self._waiters: collections.deque[asyncio.Future[bool]] | None = None
        self._busy_s = 0.0
        self._wait_s = 0.0
        self._acquisitions = 0
        #: Real time only: modeled CPU not yet slept off (see `Runtime.cpu`).
        self.owed_s = 0.0

    def _locked(self) -> bool:
        return self._free == 0 or any(not w.cancelled() for w in (self._waiters or ()))

    async def _acquire(self) -> None:
        """`asyncio.Semaphore.acquire`: takes a free core at once, else waits
        in line."""
        if not self._locked():
            self._free -= 1
            return
        if self._waiters is None:
            self._waiters = collections.deque()
        fut = get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            try:
                await fut
            finally:
                self._waiters.remove(fut)
        except asyncio.CancelledError:
            if not fut.cancelled():
                self._free += 1
                self._wake_up_next()
            raise
        if self._free > 0:
            self._wake_up_next()

    def _release(self) -> None:
        self._free += 1
        self._wake_up_next()

    def _wake_up_next(self) -> None:
        if not self._waiters:
            return
        for fut in self._waiters:
            if not fut.done():
                self._free -= 1
                fut.set_result(True)
                return

    @contextlib.asynccontextmanager
    async def core(self) -> AsyncIterator[None]:
        """Holds one core for the duration of the block."""
        start = self._rt.now()
        await self._acquire()
        try:
            got = self._rt.now()
            self._wait_s += got - start
            self._acquisitions += 1
            try:
                yield
            finally:
                self._busy_s += self._rt.now() - got
        finally:
            self._release()

    async def hold(self, seconds: float) -> None:
        """Holds one core for `seconds` of virtual time: `core()` around a sleep,
        without an async context manager's generator (the virtual loop's hot
        path; same order of events)."""
        loop = get_running_loop()
        start = loop.time()
        if self._free > 0 and not self._waiters:
            self._free -= 1  # `_acquire`'s first branch, inline
        else:
            await self._acquire()
        got = loop.time()
        self._wait_s += got - start
        self._acquisitions += 1
        try:
            # `Runtime.sleep`'s steps, inline (one coroutine layer less).
            if not seconds > 0:
                await asyncio.sleep(0)
            else:
                future = loop.create_future()
                timer = loop.call_at(got + seconds, wake, future)
                try:
                    await future
                finally:
                    timer.cancel()
        finally:
            self._busy_s += loop.time() - got
            self._release()

    def hold_then(self, seconds: float, then: Callable[[], None], *, owed: bool = False) -> Hold:
        """`hold(seconds)` run by loop callbacks, then `then()`: for a component
        that is a chain of callbacks rather than a task. The same queue of
        waiters and the same accounting; `cancel()` on the result stops it at
        any point, giving back a core it holds or was just granted. With
        `owed` (real time), the core is held for what `owe(seconds)` says once
        it is granted, as `Runtime.cpu` does."""
        hold = Hold(self, seconds, then, owed=owed)
        hold.start()
        return hold

    def owe(self, seconds: float) -> float:
        """Real time only: adds `seconds` of modeled CPU to what the pool owes and
        returns what to sleep off now: all of it once `REAL_CPU_QUANTUM_S` is
        owed, else 0. The stock loop's timers are about a millisecond coarse (a
        50 µs sleep takes over 1 ms), so small costs are slept off together:
        the total stays right, each cost is not inflated twentyfold."""
        self.owed_s += seconds
        if self.owed_s < REAL_CPU_QUANTUM_S:
            return 0.0
        owed, self.owed_s = self.owed_s, 0.0
        return owed

    def statistics(self) -> CorePoolStatistics:
        return CorePoolStatistics(self.name, self.cores, self._busy_s, self._acquisitions, self._wait_s)


@final
class Hold:
    """One `CorePool.hold_then`: waiting for a core, then holding it."""

    __slots__ = ("_got", "_loop", "_owed", "_pool", "_seconds", "_start", "_then", "_timer", "_waiter")

    def __init__(self, pool: CorePool, seconds: float, then: Callable[[], None], *, owed: bool = False) -> None:
        self._pool = pool
        self._seconds = seconds
        self._owed = owed
        self._then = then
        self._loop = get_running_loop()
        self._start = self._loop.time()
        self._got: float | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._timer: asyncio.Handle | None = None

    def start(self) -> None:
        pool = self._pool
        if pool._free > 0 and not pool._waiters:
            pool._free -= 1
            self._hold()
            return
        # `_acquire`'s second branch: wait in line for `_wake_up_next`.
        if pool._waiters is None:
            pool._waiters = collections.deque()
        self._waiter = fut = self._loop.create_future()
        pool._waiters.append(fut)
        fut.add_done_callback(self._granted)

    def _granted(self, fut: asyncio.Future[bool]) -> None:
        if fut.cancelled():
            return  # `cancel()` did the rest
        self._waiter = None
        pool = self._pool
        assert pool._waiters is not None
        pool._waiters.remove(fut)
        if pool._free > 0:
            pool._wake_up_next()
        self._hold()

    def _hold(self) -> None:
        pool, loop = self._pool, self._loop
        self._got = got = loop.time()
        pool._wait_s += got - self._start
        pool._acquisitions += 1
        seconds = pool.owe(self._seconds) if self._owed else self._seconds
        # `hold`'s sleep: a timer, or the next turn for nothing.
        if not seconds > 0:
            self._timer = loop.call_soon(self._done)
        else:
            self._timer = loop.call_at(got + seconds, self._done)

    def _done(self) -> None:
        self._timer = None
        self._release()
        self._then()

    def _release(self) -> None:
        assert self._got is not None
        self._pool._busy_s += self._loop.time() - self._got
        self._pool._release()

    def cancel(self) -> None:
        """Stops the hold wherever it is: `hold`'s cancellation paths."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            pool = self._pool
            assert pool._waiters is not None
            pool._waiters.remove(waiter)
            if waiter.done():  # granted, `_granted` not yet run: give it back
                waiter.remove_done_callback(self._granted)
                pool._free += 1
                pool._wake_up_next()
            else:
                waiter.remove_done_callback(self._granted)
                waiter.cancel()
            return
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            self._release()
