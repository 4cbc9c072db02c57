"""Restarts and fencing.

The memory oracle's only durable state is the store's upper: after a crash (in
the middle of load, with store writes in flight, and a wall clock that does not
help) a new oracle must never re-issue a timestamp. The Postgres oracle keeps
nothing outside its row, so a "restart" is just another client. Fencing: once a
second process opens the store, the first one's `confirm_leadership()` fails.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import anyio
import pytest

from oracle.memory import MemoryOracle
from oracle.open import open_oracles
from oracle.postgres import PostgresOracle
from oracle.testing import (
    ManualWallClock,
    OpRecord,
    RecordingOracle,
    assert_linearizable,
    fresh_timeline,
    run_random_workload,
)
from oracle.timestamp_store import MemTimestampStore
from oracle.timestamp_store_postgres import PostgresTimestampStore
from sim.runtime.core import Runtime
from sim.runtime.errors import Fenced, InvalidUsage
from sim.runtime.latency import Constant, LatencyModel

if TYPE_CHECKING:
    from collections.abc import Callable

    from oracle.api import TimestampOracle


def _handed_out(history: list[OpRecord]) -> int:
    """The largest timestamp any successful call returned or applied."""
    return max(r.ts for r in history if r.ok and r.ts is not None)


async def _load_then_crash(
    rec: RecordingOracle, rt: Runtime, ops: int, crash: Callable[[], None]
) -> None:
    """Runs a random workload and, once `ops` calls have succeeded (polled every
    millisecond, so more are in flight), crashes in one step: `crash()`
    and cancelling every operation in flight, with no await in between. Calls
    that a client task still starts before its cancellation lands fail on the
    closed client (`InvalidUsage`); they are in the history as failed."""
    try:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: run_random_workload(
                        rec, rt, tasks=16, ops_per_task=10_000, think_s=0.001
                    )
                )
                while sum(1 for r in rec.history if r.ok) < ops:
                    await rt.sleep(0.001)
                crash()
                scope.cancel()
    except* InvalidUsage:
        pass


async def _after_restart(o2: TimestampOracle, rt: Runtime, history: list[OpRecord]) -> None:
    """Checks the restarted oracle against what the crashed one handed out."""
    floor = await o2.read_ts()
    rec2 = RecordingOracle(o2, rt, client="after")
    first = await rec2.write_ts()
    assert first.ts > _handed_out(history)
    await run_random_workload(rec2, rt, tasks=16, ops_per_task=20)
    assert_linearizable([*history, *rec2.history], read_floor=floor)


# --- The memory oracle ---------------------------------------------------------------------


@pytest.mark.virtual
@pytest.mark.asyncio
@pytest.mark.parametrize("window_ms", [1, 1000])
async def test_memory_oracle_never_reissues_after_a_crash(window_ms: int) -> None:
    # The wall clock is frozen, then steps back an hour: only the store can
    # keep the restarted oracle above what was handed out.
    clock = ManualWallClock()
    rt = Runtime(seed=21, wall_clock=clock, latency=LatencyModel({"stash.txn": Constant(0.002)}))
    store = MemTimestampStore(rt)
    o1 = await MemoryOracle.open(store, "realtime", rt, window_ms=window_ms)
    rec1 = RecordingOracle(o1, rt, client="before")
    await _load_then_crash(rec1, rt, 500, lambda: None)  # o1 is simply abandoned
    assert sum(1 for r in rec1.history if r.ok) >= 500
    clock.advance(-3_600_000)
    o2 = await MemoryOracle.open(store, "realtime", rt, window_ms=window_ms)
    assert o2.epoch == o1.epoch + 1
    # It resumes at the persisted upper: about a window above what o1 handed out
    # (allocations cancelled in flight, 16 tasks' worth, may have reserved more).
    assert await o2.peek_write_ts() <= _handed_out(rec1.history) + window_ms + 20
    await _after_restart(o2, rt, rec1.history)


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_the_window_amortizes_timestamp_store_transactions() -> None:
    """One store transaction per window of allocations, not one per allocation."""
    rt = Runtime(seed=22)  # virtual wall clock: 1 ms per allocation below
    store = MemTimestampStore(rt)
    o = await MemoryOracle.open(store, "realtime", rt, window_ms=1000)
    before = store.transactions
    for _ in range(3000):
        w = await o.write_ts()
        await o.apply_write(w.ts)
        await rt.sleep(0.001)
    assert 3 <= store.transactions - before <= 5
    upper = await store.read_upper("realtime")
    assert upper is not None
    assert w.ts < upper <= w.ts + 1000
    assert o.statistics().op("stash_write_upper").succeeded_count == store.transactions - before - 1


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_memory_oracle_on_a_postgres_timestamp_store_never_reissues_after_a_crash(pg_url: str) -> None:
    clock = ManualWallClock()
    rt = Runtime(seed=23, wall_clock=clock)
    name = f"restart-{uuid.uuid4().hex[:12]}"
    store1 = await PostgresTimestampStore.connect(pg_url, rt, name=name)
    o1 = await MemoryOracle.open(store1, "realtime", rt, window_ms=3, owns_store=True)
    rec1 = RecordingOracle(o1, rt, client="before")
    # The process dies with store transactions in flight: its connections drop.
    await _load_then_crash(rec1, rt, 200, store1.client.terminate)
    assert sum(1 for r in rec1.history if r.ok) > 100
    async with await PostgresTimestampStore.connect(pg_url, rt, name=name) as store2:
        o2 = await MemoryOracle.open(store2, "realtime", rt, window_ms=3)
        await _after_restart(o2, rt, rec1.history)


# --- The Postgres oracle -------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_postgres_oracle_is_stateless(pg_url: str) -> None:
    """All state is the row: a new client continues exactly where a crashed one
    stopped (no window skipped, `initially` ignored), and clients interleave as one."""
    clock = ManualWallClock()
    rt = Runtime(seed=24, wall_clock=clock)
    timeline = fresh_timeline("stateless")
    o1 = await PostgresOracle.open(pg_url, timeline, rt)
    ws = [await o1.write_ts() for _ in range(5)]
    await o1.apply_write(ws[2].ts)
    o1.client.terminate()  # a crash, quiescent

    async with (
        await PostgresOracle.open(pg_url, timeline, rt, initially=10**15) as o2,
        await PostgresOracle.open(pg_url, timeline, rt) as o3,
    ):
        assert await o2.read_ts() == ws[2].ts
        assert await o2.peek_write_ts() == ws[4].ts
        assert (await o2.write_ts()).ts == ws[4].ts + 1
        assert (await o3.write_ts()).ts == ws[4].ts + 2
        assert (await o2.write_ts()).ts == ws[4].ts + 3
        await o3.apply_write(ws[4].ts + 3)
        assert await o2.read_ts() == ws[4].ts + 3

        # A crash with statements in flight: whatever they did, nothing regresses.
        rec = RecordingOracle(o2, rt, client="before")
        await _load_then_crash(rec, rt, 100, o2.client.terminate)
        assert sum(1 for r in rec.history if r.ok) > 50
        await _after_restart(o3, rt, rec.history)


# --- Fencing -------------------------------------------------------------------------------


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_a_newer_opener_fences_the_memory_oracle() -> None:
    clock = ManualWallClock()
    rt = Runtime(seed=25, wall_clock=clock)
    store = MemTimestampStore(rt)
    o1 = await MemoryOracle.open(store, "realtime", rt)
    w = await o1.write_ts()
    txns = store.transactions
    await o1.confirm_leadership()
    assert store.transactions == txns + 1  # one durable transaction

    o2 = await MemoryOracle.open(store, "realtime", rt)
    assert o2.epoch > o1.epoch
    # Until it confirms, o1 still answers from memory inside its window: this
    # is why today's coordinator confirms leadership before replying.
    assert (await o1.write_ts()).ts == w.ts + 1
    with pytest.raises(Fenced, match="epoch"):
        await o1.confirm_leadership()
    for op in (o1.read_ts, o1.write_ts, o1.peek_write_ts, lambda: o1.apply_write(1)):
        with pytest.raises(Fenced):
            await op()
    assert o1.statistics().op("confirm_leadership").failed_count == 1
    await o2.confirm_leadership()
    assert (await o2.write_ts()).ts > w.ts + 1


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_a_fenced_memory_oracle_cannot_extend_its_window() -> None:
    """Without confirming, o1 fails as soon as it needs the store."""
    rt = Runtime(seed=26, wall_clock=ManualWallClock())
    store = MemTimestampStore(rt)
    o1 = await MemoryOracle.open(store, "realtime", rt, window_ms=10)
    await MemoryOracle.open(store, "realtime", rt)
    allocated = 0

    async def allocate_past_the_window() -> None:
        nonlocal allocated
        for _ in range(20):
            await o1.write_ts()
            allocated += 1

    with pytest.raises(Fenced):
        await allocate_past_the_window()
    assert allocated < 10  # within the window only
    with pytest.raises(Fenced):
        await o1.read_ts()


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_a_newer_process_fences_the_older_one_on_a_postgres_timestamp_store(pg_url: str) -> None:
    """Two processes (`open_oracles` each, with their own pools) on one store:
    opening the second fences every timeline of the first."""
    rt = Runtime(seed=27)
    url = pg_url.replace("postgresql://", "memory+postgresql://", 1).replace(
        "postgres://", "memory+postgres://", 1
    )
    url += ("&" if "?" in url else "?") + f"stash=fence-{uuid.uuid4().hex[:12]}"
    async with await open_oracles(url, rt) as first:
        realtime = await first.timeline()
        catalog = await first.timeline("catalog")
        assert isinstance(realtime, MemoryOracle)
        assert isinstance(catalog, MemoryOracle)
        await realtime.confirm_leadership()
        w = await realtime.write_ts()
        async with await open_oracles(url, rt) as second:
            new = await second.timeline()
            assert first.epoch is not None
            assert second.epoch is not None
            assert second.epoch > first.epoch
            for o in (realtime, catalog):
                with pytest.raises(Fenced):
                    await o.confirm_leadership()
            assert isinstance(new, MemoryOracle)
            await new.confirm_leadership()
            assert (await new.write_ts()).ts > w.ts
