"""Today's timestamp oracle: state in memory, durability through the timestamp store.

Operations are free (in memory) except that handing out a timestamp at or above
the persisted upper first persists a new upper `ts + window_ms` (one durable
store transaction). The invariant: every write timestamp ever returned (and
every `peek_write_ts`) is below the persisted upper, and every `read_ts` at or
below it, so an oracle restarted on the same store resumes at the upper and
never re-issues a timestamp.

Not linearizable across processes by itself: a process that lost leadership
keeps answering from memory until `confirm_leadership()` (a store transaction
checking its epoch) fails — which is why today's coordinator confirms
leadership before returning linearized results (seed 000).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import anyio
from anyio.lowlevel import checkpoint

from oracle.api import TimestampOracle, WriteTimestamp, check_timeline, check_timestamp
from oracle.metrics import OracleMetrics, OracleStatistics
from sim.runtime.errors import Fenced, InvalidUsage

if TYPE_CHECKING:
    from oracle.timestamp_store import TimestampStore
    from sim.runtime.core import Runtime

__all__ = ["DEFAULT_WINDOW_MS", "MemoryOracle"]

#: How far ahead of a handed-out timestamp the persisted upper is set (1 s).
DEFAULT_WINDOW_MS: Final = 1000

_BIGINT_MAX: Final = 2**63 - 1


@final
class MemoryOracle(TimestampOracle):
    """The in-memory oracle of one timeline, backed by a `TimestampStore`.

    Rules (Materialize's in-memory oracle): `write_ts = max(write_ts + 1,
    wall_ms)`; `apply_write(t)` raises `read_ts` and `write_ts` to at least `t`.
    After a restart both start at the persisted upper.

    Open with `MemoryOracle.open`.
    """

    def __init__(
        self,
        *,
        store: TimestampStore,
        epoch: int,
        timeline: str,
        rt: Runtime,
        start: int,
        window_ms: int,
        owns_store: bool,
        unguarded_clock: bool = False,
    ) -> None:
        """Use `open`."""
        self._store = store
        self._epoch = epoch
        self._timeline = timeline
        self._rt = rt
        self._read = start
        self._write = start
        # The upper persisted by this process (or found at open): every write
        # timestamp returned so far is below it.
        self._upper = start
        self._window_ms = window_ms
        self._owns_store = owns_store
        self._unguarded_clock = unguarded_clock
        self._persist_lock = anyio.Lock()
        self._metrics = OracleMetrics(rt, timeline=timeline, implementation="memory")
        self._fenced: Fenced | None = None
        self._closed = False

    @classmethod
    async def open(
        cls,
        store: TimestampStore,
        timeline: str,
        rt: Runtime,
        *,
        epoch: int | None = None,
        window_ms: int = DEFAULT_WINDOW_MS,
        owns_store: bool = False,
        unguarded_clock: bool = False,
        at_upper: bool = True,
    ) -> MemoryOracle:
        """Opens the oracle of `timeline`, resuming at the store's upper for it.

        Args:
            epoch: this process's epoch from `store.open()`, shared by the
                oracles of all its timelines; None opens the store here (a new
                epoch, fencing every older opener).
            window_ms: how far ahead the persisted upper is set (> 0).
            owns_store: close the store with the oracle.
            unguarded_clock: known-bad variant (issue 38): `write_ts` is the
                wall clock without the `max` (see `_write_ts`).
            at_upper: False: `read_ts` and `write_ts` start at 0, the upper
                only bounding what needs persisting — for a caller that
                fast-forwards it at once to another oracle's state
                (`advance`, `oracle.switching`) instead of a restart's jump
                to the upper (which reads would wait for the tables to reach).
        """
        check_timeline(timeline)
        if not isinstance(window_ms, int) or window_ms < 1:
            raise InvalidUsage(f"window_ms must be an int >= 1, got {window_ms!r}")
        if epoch is None:
            epoch = await store.open()
        # Read after the epoch bump: every upper of an older process is visible.
        upper = await store.read_upper(timeline)
        oracle = cls(
            store=store,
            epoch=epoch,
            timeline=timeline,
            rt=rt,
            start=(upper or 0) if at_upper else 0,
            window_ms=window_ms,
            owns_store=owns_store,
            unguarded_clock=unguarded_clock,
        )
        oracle._upper = upper or 0
        return oracle

    @property
    def timeline(self) -> str:
        return self._timeline

    @property
    def epoch(self) -> int:
        return self._epoch

    def __repr__(self) -> str:
        return (
            f"MemoryOracle({self._timeline!r}, epoch {self._epoch}, read {self._read}, "
            f"write {self._write}, upper {self._upper})"
        )

    # --- the TimestampOracle interface

    async def write_ts(self) -> WriteTimestamp:
        return await self._metrics.observe("write_ts", self._write_ts)

    async def _write_ts(self) -> WriteTimestamp:
        self._check_usable()
        await checkpoint()
        self._check_usable()
        wall = self._rt.wall_ms()
        if self._unguarded_clock:
            # The known-bad variant: the clock as read, bumped only where it
            # would repeat the last timestamp; a clock behind it goes back.
            ts = self._write + 1 if wall == self._write else wall
        else:
            ts = max(self._write + 1, wall)
        if ts > _BIGINT_MAX - 1:
            raise InvalidUsage(f"timeline {self._timeline!r} has run out of timestamps")
        assert self._unguarded_clock or self._read < ts, (self._read, ts)
        self._write = ts  # allocated atomically (no await since the read above)
        await self._persist_above(ts)
        return WriteTimestamp.at(ts)

    async def peek_write_ts(self) -> int:
        return await self._metrics.observe("peek_write_ts", self._peek_write_ts)

    async def _peek_write_ts(self) -> int:
        self._check_usable()
        await checkpoint()
        self._check_usable()
        ts = self._write
        # A concurrent allocation may not have persisted its upper yet; a peek
        # must not reveal a timestamp a restarted oracle could hand out again.
        await self._persist_above(ts)
        return ts

    async def read_ts(self) -> int:
        return await self._metrics.observe("read_ts", self._read_ts)

    async def _read_ts(self) -> int:
        self._check_usable()
        await checkpoint()
        self._check_usable()
        return self._read

    async def apply_write(self, ts: int) -> None:
        check_timestamp(ts, "apply_write ts")
        await self._metrics.observe("apply_write", lambda: self._apply_write(ts))

    async def _apply_write(self, ts: int) -> None:
        self._check_usable()
        await checkpoint()
        self._check_usable()
        self._write = max(self._write, ts)
        # Persist before anyone can read at `ts`: a read_ts above the persisted
        # upper could be followed, after a crash, by a write_ts below it.
        await self._persist_above(ts)
        self._read = max(self._read, ts)

    async def advance(self, *, read_ts: int, write_ts: int) -> None:
        """Fast-forwards to another oracle's state (`oracle.switching.Advancing`):
        persists an upper above it first, then raises `write_ts` and `read_ts`."""
        check_timestamp(read_ts, "advance read_ts")
        check_timestamp(write_ts, "advance write_ts")
        self._check_usable()
        await checkpoint()
        self._check_usable()
        self._write = max(self._write, write_ts, read_ts)
        await self._persist_above(self._write)
        self._read = max(self._read, read_ts)

    async def confirm_leadership(self) -> None:
        """One store transaction checking this process's epoch is still current.

        Raises:
            Fenced: a newer process opened the store (this oracle is unusable
                from now on).
        """
        self._check_usable()
        try:
            await self._metrics.observe(
                "confirm_leadership", lambda: self._store.confirm_leadership(self._epoch)
            )
        except Fenced as exc:
            self._fenced = exc
            raise

    def statistics(self) -> OracleStatistics:
        return OracleStatistics("memory", self._timeline, self._metrics.snapshot())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_store:
            await self._store.close()

    # --- durability

    async def _persist_above(self, ts: int) -> None:
        """Returns once the persisted upper is > `ts` (one store transaction if it
        was not already)."""
        if ts < self._upper:
            return
        async with self._persist_lock:
            if ts < self._upper:
                return  # a concurrent caller persisted a high enough upper
            # Cover every allocation made so far, not just ours.
            upper = min(max(ts, self._write) + self._window_ms, _BIGINT_MAX)
            try:
                await self._metrics.observe(
                    "stash_write_upper",
                    lambda: self._store.write_upper(self._timeline, upper, self._epoch),
                )
            except Fenced as exc:
                self._fenced = exc
                raise
            self._upper = max(self._upper, upper)

    def _check_usable(self) -> None:
        if self._closed:
            raise InvalidUsage(f"{self!r} is closed")
        if self._fenced is not None:
            raise Fenced(f"timeline {self._timeline!r}: {self._fenced}")
