"""read_ts batching (seed 000, "batching get_read_ts operations"): concurrent
`read_ts()` calls share one backing call.

One worker task takes every request queued when it wakes and issues a single
backing `read_ts()` for all of them. The invariant that keeps reads
linearizable: a request is answered only by a backing call that *started after
the request was made*. A request arriving while a call is in flight waits for
the next one — joining the in-flight call would return a timestamp chosen
before the request began, possibly below an `apply_write` that completed in
between (the known-bad `known_bad_join_in_flight=True` does exactly that).

Writes are not batched here (group commit batches them): `write_ts`,
`peek_write_ts` and `apply_write` pass straight through.

With the Runtime's event log on, each backing call is a `read_ts.batch`
event: how many requests it answered (the peek batch size on the realtime
timeline), its latency and outcome. The backing call itself is the inner
oracle's `oracle.call`; the callers' requests are not reported one by one.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, final

import anyio

from oracle.api import TimestampOracle, WriteTimestamp
from oracle.metrics import OracleMetrics, OracleStatistics
from sim.runtime.errors import CoordsimError, Determinate, InvalidUsage
from sim.runtime.patches import get_running_loop
from sim.runtime.tasks import AsyncExitStack

if TYPE_CHECKING:
    import asyncio

    from anyio.abc import TaskStatus

    from sim.runtime.core import Runtime

__all__ = ["BatchingOracle"]


@final
class _Batch:
    """The requests one backing `read_ts()` answers, each waiting on a future
    of its own: what `asyncio.Event` does, inline in `read_ts` (the event's
    `wait` would be one more coroutine layer for every waiting statement;
    issue 20). `resolve` wakes them in the order they started waiting, as
    `Event.set` does."""

    __slots__ = ("done", "error", "ts", "waiters")

    def __init__(self) -> None:
        self.done = False
        self.ts: int | None = None
        self.error: BaseException | None = None
        self.waiters: list[asyncio.Future[None]] = []

    def resolve(self, ts: int | None, error: BaseException | None) -> None:
        if not self.done:
            self.ts, self.error, self.done = ts, error, True
            for waiter in self.waiters:
                if not waiter.done():
                    waiter.set_result(None)


@final
class BatchingOracle(TimestampOracle):
    """Wraps any `TimestampOracle`, coalescing concurrent `read_ts()` calls.

    Needs its worker running: either `async with BatchingOracle(inner, rt) as o:`
    (it owns a task group for the block) or `await task_group.start(o.serve)`
    from an owner that has one (a coordinator's incarnation). Closing it
    closes `inner` when `owns_inner`.

    Args:
        inner: the oracle every operation ends up at.
        known_bad_join_in_flight: the known-bad variant (DESIGN.md §2), for
            anomaly tests only: a request arriving while a backing call is in
            flight joins that call and gets a timestamp chosen before it began,
            possibly below an `apply_write` that completed in between (a stale
            read the checker must catch). Off by default.
        owns_inner: close `inner` with this oracle.
    """

    def __init__(
        self,
        inner: TimestampOracle,
        rt: Runtime,
        *,
        known_bad_join_in_flight: bool = False,
        owns_inner: bool = True,
    ) -> None:
        self._inner = inner
        self._rt = rt
        self._known_bad_join_in_flight = known_bad_join_in_flight
        self._owns_inner = owns_inner
        self._metrics = OracleMetrics(rt, emit=False)
        self._events = rt.events.bind(timeline=inner.timeline) if rt.events.on else None
        # Requests made since the backing call in flight (if any) started.
        self._pending: _Batch | None = None
        self._inflight: _Batch | None = None
        self._wake = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._stack: AsyncExitStack | None = None
        self._closed = False

    @property
    def timeline(self) -> str:
        return self._inner.timeline

    @property
    def inner(self) -> TimestampOracle:
        return self._inner

    def __repr__(self) -> str:
        return f"BatchingOracle({self._inner!r})"

    # --- lifecycle

    async def __aenter__(self) -> BatchingOracle:
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(anyio.create_task_group())
            await tg.start(self.serve)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        try:
            await self.close()
        finally:
            if stack is not None:
                await stack.aclose()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The worker: runs until `close()` (or until its task group is cancelled)."""
        if self._closed:
            raise InvalidUsage(f"{self!r} is closed")
        if self._scope is not None:
            raise InvalidUsage(f"{self!r} is already being served")
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                task_status.started()
                while True:
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    await self._serve_batch()
        finally:
            self._scope = None
            self._fail_waiting(f"{self!r} stopped")

    async def _serve_batch(self) -> None:
        # Everything queued now was requested before the backing call below
        # starts, so the timestamp it returns is a valid answer for each of them.
        batch, self._pending = self._pending, None
        if batch is None:
            return
        self._inflight = batch
        self._metrics.batches_count += 1
        # Every request of the batch queued its waiter before this call started.
        reported = (len(batch.waiters), self._rt.now()) if self._events is not None else None
        try:
            ts = await self._inner.read_ts()
        except Exception as exc:
            self._inflight = None
            if reported is not None:
                self._report(*reported, ok=False)
            batch.resolve(None, exc)
            if not isinstance(exc, CoordsimError):
                raise  # a bug: the waiters have it, and so does our owner
            return
        self._inflight = None
        if reported is not None:
            self._report(*reported, ok=True)
        # Only the known-bad variant lets requests join `batch` while in flight.
        batch.resolve(ts, None)

    def _report(self, size: int, start: float, *, ok: bool) -> None:
        assert self._events is not None
        latency_ms = round((self._rt.now() - start) * 1e6) / 1000
        self._events.emit("read_ts.batch", batch_size=size, latency_ms=latency_ms, ok=ok)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()
        self._fail_waiting(f"{self!r} closed")
        if self._owns_inner:
            await self._inner.close()

    def _fail_waiting(self, why: str) -> None:
        """Fails the calls still waiting. Determinate: a read_ts has no side
        effect, and the process whose client closed (an adapter that
        crashed) must answer its statements with an error, not crash."""
        waiting = [b for b in (self._pending, self._inflight) if b is not None]
        self._pending, self._inflight = None, None
        for batch in waiting:
            batch.resolve(None, Determinate(f"read_ts: {why} before answering"))

    # --- the TimestampOracle interface

    async def read_ts(self) -> int:
        # Counted, queued and awaited in this one coroutine: `OracleMetrics.observe`
        # around a coroutine around an event's `wait` were three layers that
        # every waiting statement resumed through (issue 20).
        metrics = self._metrics
        started = metrics.begin("read_ts")
        try:
            if self._closed:
                raise InvalidUsage(f"{self!r} is closed")
            if self._scope is None:
                raise InvalidUsage(
                    f"{self!r} has no worker: use `async with` or start `serve` in a task group"
                )
            metrics.batched_op_count += 1
            batch: _Batch | None
            if self._known_bad_join_in_flight and self._inflight is not None:
                batch = self._inflight
            else:
                batch = self._pending
                if batch is None:
                    batch = self._pending = _Batch()
                    self._wake.set()
            if not batch.done:
                waiter: asyncio.Future[None] = get_running_loop().create_future()
                batch.waiters.append(waiter)
                try:
                    await waiter
                finally:
                    batch.waiters.remove(waiter)
            if batch.error is not None:
                # One exception object per waiter: tracebacks must not pile up on a
                # shared one raised in many tasks.
                raise copy.copy(batch.error) from batch.error
            assert batch.ts is not None
            ts = batch.ts
        except BaseException as exc:
            metrics.failed(started, error=exc)
            raise
        metrics.succeeded(started)
        return ts

    async def write_ts(self) -> WriteTimestamp:
        return await self._inner.write_ts()

    async def peek_write_ts(self) -> int:
        return await self._inner.peek_write_ts()

    async def apply_write(self, ts: int) -> None:
        await self._inner.apply_write(ts)

    def statistics(self) -> OracleStatistics:
        """The inner oracle's statistics, with `read_ts` as callers see it and the
        inner's (backing) `read_ts` as `read_ts_backing`."""
        inner = self._inner.statistics()
        ops = dict(inner.ops)
        backing = ops.pop("read_ts", None)
        if backing is not None:
            ops["read_ts_backing"] = backing
        ops.update(self._metrics.snapshot())
        return OracleStatistics(
            f"batching({inner.implementation})",
            inner.timeline,
            dict(sorted(ops.items())),
            batched_op_count=self._metrics.batched_op_count,
            batches_count=self._metrics.batches_count,
        )
