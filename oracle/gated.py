"""One process's view of the oracle server when that process can be paused or
cut off from it (issue 36's `adapter-pause` and `adapter-partition` faults):
`ProcessGate` holds the two switches, `GatedOracle` applies them to every call
of the process's oracle clients.

Classification (DESIGN.md §9): a call started while partitioned either finds
the connection refused (`Determinate`: it never reached the server) or hangs
until the partition heals and times out (`Indeterminate`: the caller cannot
tell). A call in flight when a partition begins ran at the server, but its
reply is lost: `Indeterminate` after the heal, the adversarial "applied, then
reported as a timeout". A paused process runs nothing: calls wait to start,
and replies wait to be read, until it resumes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, final

import anyio

from oracle.api import TimestampOracle
from sim.runtime.errors import Determinate, Indeterminate

if TYPE_CHECKING:
    import random
    from collections.abc import Awaitable, Callable

    from oracle.api import WriteTimestamp
    from oracle.metrics import OracleStatistics

__all__ = ["GatedOracle", "ProcessGate"]

T = TypeVar("T")


@final
class ProcessGate:
    """Whether a process is paused, and whether it is partitioned from the
    oracle. Off by default; events exist only while a switch is on."""

    def __init__(self) -> None:
        self._resumed: anyio.Event | None = None
        self._healed: anyio.Event | None = None
        #: Partitions begun so far: a call that saw this change lost its reply.
        self.partitions = 0

    @property
    def paused(self) -> bool:
        return self._resumed is not None

    @property
    def partitioned(self) -> bool:
        return self._healed is not None

    def pause(self) -> None:
        if self._resumed is None:
            self._resumed = anyio.Event()

    def resume(self) -> None:
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            resumed.set()

    def partition(self) -> None:
        if self._healed is None:
            self._healed = anyio.Event()
            self.partitions += 1

    def heal(self) -> None:
        healed, self._healed = self._healed, None
        if healed is not None:
            healed.set()

    async def wait_running(self) -> None:
        """Returns once the process is not paused (at once if it is not)."""
        while self._resumed is not None:
            await self._resumed.wait()

    async def wait_healed(self) -> None:
        """Returns once the process is not partitioned (at once if it is not)."""
        while self._healed is not None:
            await self._healed.wait()


@final
class GatedOracle(TimestampOracle):
    """`inner` as a client behind `gate` sees it (see the module docstring);
    `rng` chooses between a refused connection and a hang."""

    def __init__(self, inner: TimestampOracle, gate: ProcessGate, rng: random.Random) -> None:
        self._inner, self._gate, self._rng = inner, gate, rng

    @property
    def timeline(self) -> str:
        return self._inner.timeline

    def __repr__(self) -> str:
        return f"GatedOracle({self._inner!r})"

    async def _call(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        gate = self._gate
        await gate.wait_running()
        if gate.partitioned:
            if self._rng.random() < 0.5:
                raise Determinate(f"oracle {op}: connection refused (partitioned from the oracle)")
            await gate.wait_healed()
            raise Indeterminate(f"oracle {op}: timed out (partitioned from the oracle)")
        before = gate.partitions
        result = await call()
        if gate.partitions != before:
            await gate.wait_healed()
            raise Indeterminate(f"oracle {op}: connection lost mid-call (partitioned from the oracle)")
        await gate.wait_running()
        return result

    async def write_ts(self) -> WriteTimestamp:
        return await self._call("write_ts", self._inner.write_ts)

    async def peek_write_ts(self) -> int:
        return await self._call("peek_write_ts", self._inner.peek_write_ts)

    async def read_ts(self) -> int:
        return await self._call("read_ts", self._inner.read_ts)

    async def apply_write(self, ts: int) -> None:
        await self._call("apply_write", lambda: self._inner.apply_write(ts))

    def statistics(self) -> OracleStatistics:
        return self._inner.statistics()

    async def close(self) -> None:
        await self._inner.close()
