"""BatchingOracle: coalescing, the batching hazard constructed step by step (the
correct oracle is immune, the known-bad variant is caught), errors and shutdown.

All on the virtual-time loop over a memory oracle, so every interleaving here is
exact and the same on every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import anyio
import pytest

from oracle.api import TimestampOracle, WriteTimestamp
from oracle.batching import BatchingOracle
from oracle.testing import RecordingOracle, check_history, open_timeline
from sim.runtime.core import Runtime
from sim.runtime.errors import Determinate, InvalidUsage

if TYPE_CHECKING:
    from oracle.metrics import OracleStatistics

pytestmark = [pytest.mark.virtual, pytest.mark.asyncio]


@final
class GatedOracle(TimestampOracle):
    """Wraps an oracle; a backing `read_ts()` chooses its timestamp, reports that it
    is in flight, and returns only once the gate opens. Other calls pass through."""

    def __init__(self, inner: TimestampOracle) -> None:
        self.inner = inner
        self.gate = anyio.Event()
        self.in_flight = anyio.Event()
        self.calls = 0
        self.fail_next: Exception | None = None

    @property
    def timeline(self) -> str:
        return self.inner.timeline

    async def read_ts(self) -> int:
        self.calls += 1
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        ts = await self.inner.read_ts()
        self.in_flight.set()
        await self.gate.wait()
        return ts

    async def write_ts(self) -> WriteTimestamp:
        return await self.inner.write_ts()

    async def peek_write_ts(self) -> int:
        return await self.inner.peek_write_ts()

    async def apply_write(self, ts: int) -> None:
        await self.inner.apply_write(ts)

    def statistics(self) -> OracleStatistics:
        return self.inner.statistics()

    async def close(self) -> None:
        await self.inner.close()


async def _gated(rt: Runtime) -> GatedOracle:
    return GatedOracle(await open_timeline("mem://", "realtime", rt))


@pytest.mark.parametrize("known_bad", [False, True], ids=["correct", "known-bad-join-in-flight"])
async def test_read_after_apply_write_is_not_answered_by_the_batch_in_flight(
    known_bad: bool,
) -> None:
    """The hazard: A's backing read chose r0 and is in flight; apply_write(t > r0)
    completes; then B calls read_ts. B must get >= t — so it must not join A's call.
    """
    rt = Runtime(seed=11)
    gated = await _gated(rt)
    async with BatchingOracle(gated, rt, known_bad_join_in_flight=known_bad) as batching:
        rec = RecordingOracle(batching, rt)
        w = await rec.write_ts()
        r0 = await gated.inner.read_ts()
        assert r0 < w.ts
        got: dict[str, int] = {}

        async def read(name: str) -> None:
            got[name] = await rec.read_ts()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read, "A")
            await gated.in_flight.wait()  # A's backing call has chosen r0
            await rec.apply_write(w.ts)  # completes while A's call is in flight
            await rt.sleep(0.001)  # B begins strictly after (ties are concurrent)
            tg.start_soon(read, "B")
            await rt.sleep(0.001)  # B has queued its request
            assert "B" not in got
            gated.gate.set()
        violations = check_history(rec.history)
        stats = batching.statistics()

    assert got["A"] == r0
    if known_bad:
        assert got["B"] == r0  # B joined the call that began before it
        assert stats.batches_count == 1
        assert [v.kind for v in violations] == ["stale-read-ts"]
        assert violations[0].cause is not None
        assert violations[0].cause.op == "apply_write"
    else:
        assert got["B"] == w.ts  # B waited for the next backing call
        assert stats.batches_count == 2
        assert violations == []
    assert gated.calls == stats.batches_count


async def test_requests_queued_together_share_one_backing_call() -> None:
    rt = Runtime(seed=12)
    gated = await _gated(rt)
    gated.gate.set()
    async with BatchingOracle(gated, rt) as batching:
        await gated.inner.apply_write(42)
        results: list[int] = []

        async def read() -> None:
            results.append(await batching.read_ts())

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(read)
        assert results == [42] * 50
        stats = batching.statistics()
        assert (stats.batched_op_count, stats.batches_count) == (50, 1)
        assert stats.avg_batch_size == 50.0
        assert gated.calls == 1
        # Callers' latencies are `read_ts`; the backing calls are `read_ts_backing`.
        assert stats.op("read_ts").succeeded_count == 50
        assert stats.op("read_ts_backing").succeeded_count == 1
        assert stats.implementation == "batching(memory)"
        samples = stats.metrics()
        assert samples['ts_oracle_batched_op_count{timeline="realtime"}'] == 50
        assert samples['ts_oracle_batches_count{timeline="realtime"}'] == 1


async def test_requests_arriving_during_a_call_form_the_next_batch() -> None:
    rt = Runtime(seed=13)
    gated = await _gated(rt)
    async with BatchingOracle(gated, rt) as batching:
        async with anyio.create_task_group() as tg:
            tg.start_soon(batching.read_ts)
            await gated.in_flight.wait()
            for _ in range(10):
                tg.start_soon(batching.read_ts)
            await rt.sleep(0.001)
            gated.gate.set()
        stats = batching.statistics()
    # 1 + 10 requests, 2 backing calls: the 10 waited, together, for the second.
    assert (stats.batched_op_count, stats.batches_count) == (11, 2)


async def test_writes_pass_through_unbatched() -> None:
    rt = Runtime(seed=14)
    gated = await _gated(rt)
    async with BatchingOracle(gated, rt) as batching:
        w = await batching.write_ts()
        assert await batching.peek_write_ts() == w.ts
        await batching.apply_write(w.ts)
        assert await gated.inner.read_ts() == w.ts
        assert batching.timeline == "realtime"
        assert gated.calls == 0


async def test_a_failed_backing_call_fails_its_batch_only() -> None:
    rt = Runtime(seed=15)
    gated = await _gated(rt)
    gated.gate.set()
    async with BatchingOracle(gated, rt) as batching:
        gated.fail_next = Determinate("oracle 'realtime': read_ts failed: boom")
        errors: list[BaseException] = []

        async def read() -> None:
            try:
                await batching.read_ts()
            except Determinate as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(read)
        assert len(errors) == 5
        assert len({id(e) for e in errors}) == 5  # one exception object per waiter
        assert await batching.read_ts() == 0  # the worker carries on
        assert batching.statistics().op("read_ts").failed_count == 5


async def test_close_fails_waiters_and_later_calls() -> None:
    rt = Runtime(seed=16)
    gated = await _gated(rt)
    batching = BatchingOracle(gated, rt)
    with pytest.raises(InvalidUsage, match="no worker"):
        await batching.read_ts()
    failed: list[BaseException] = []

    async def read() -> None:
        try:
            await batching.read_ts()
        except Determinate as exc:  # nothing was read: a crashed process's statements fail cleanly
            failed.append(exc)

    async with batching, anyio.create_task_group() as tg:
        tg.start_soon(read)
        await gated.in_flight.wait()
        tg.start_soon(read)  # queued behind the call in flight
        await rt.sleep(0.001)
        await batching.close()
    assert len(failed) == 2
    assert all("closed before answering" in str(e) for e in failed)
    with pytest.raises(InvalidUsage, match="closed"):  # a call after close is the caller's bug
        await batching.read_ts()
