"""The one oracle conformance suite, on every implementation — and on known-bad
variants it must reject."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from oracle.observed import ObservedOracle, OracleCall
from oracle.open import OracleBackend, OracleSpec
from oracle.postgres import PostgresOracle
from oracle.testing import (
    ConformanceFailure,
    ManualWallClock,
    check_oracle,
    fresh_timeline,
    open_timeline,
)
from oracle.timestamp_store import MemTimestampStore
from sim.runtime.core import Runtime
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from oracle.api import TimestampOracle
    from tests.oracle.conftest import OracleImpl


@pytest.mark.asyncio
async def test_conformance(oracle_impl: OracleImpl) -> None:
    """Every documented scenario, with the wall clock injected."""
    clock = ManualWallClock()
    rt = Runtime(seed=1, wall_clock=clock)
    await check_oracle(oracle_impl.maker(rt), rt, clock=clock)


@pytest.mark.asyncio
async def test_conformance_on_the_real_clock(oracle_impl: OracleImpl) -> None:
    """Without an injected clock, allocations sit at the Runtime's wall clock."""
    rt = Runtime(seed=2)
    await check_oracle(oracle_impl.maker(rt), rt)
    async with await oracle_impl.maker(rt)(fresh_timeline("wall-now")) as o:
        before = rt.wall_ms()
        w = await o.write_ts()
        assert w.ts >= before
        assert w.ts <= max(rt.wall_ms(), before) + 1_000  # at most a window past now


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_memory_oracle_sharing_one_store() -> None:
    """Oracles opened one after another on one store (each a new epoch) conform."""
    clock = ManualWallClock()
    rt = Runtime(seed=3, wall_clock=clock)
    spec = OracleSpec(OracleBackend.MEMORY, store=MemTimestampStore(rt), window_ms=7)

    async def make(timeline: str) -> TimestampOracle:
        return await open_timeline(spec, timeline, rt)

    await check_oracle(make, rt, clock=clock)


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_observed_oracle_reports_each_call_as_its_caller_saw_it() -> None:
    """The conformance runs check the wrapper's answers; this checks its reports."""
    clock = ManualWallClock()
    rt = Runtime(seed=5, wall_clock=clock)
    calls: list[OracleCall] = []
    inner = await open_timeline("mem://", "observed", rt)
    async with ObservedOracle(inner, rt, calls.append) as o:
        w = await o.write_ts()
        peeked = await o.peek_write_ts()
        await o.apply_write(w.ts)
        read = await o.read_ts()
        with pytest.raises(InvalidUsage):
            await o.apply_write(-1)
    with pytest.raises(InvalidUsage):  # closing it closed the inner oracle
        await inner.read_ts()
    assert [(c.op, c.timeline, c.ts, c.ok) for c in calls] == [
        ("write_ts", "observed", w.ts, True),
        ("peek_write_ts", "observed", peeked, True),
        ("apply_write", "observed", w.ts, True),
        ("read_ts", "observed", read, True),
        ("apply_write", "observed", None, False),
    ]
    assert all(c.start_s <= c.end_s for c in calls)


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_suite_rejects_the_seeds_literal_apply_write(pg_url: str) -> None:
    """Known-bad: `read_ts = GREATEST(read_ts, write_ts)` exposes allocated but
    unapplied timestamps to readers; the suite must catch it."""
    clock = ManualWallClock()
    rt = Runtime(seed=4, wall_clock=clock)

    async def make(timeline: str) -> TimestampOracle:
        return await PostgresOracle.open(pg_url, timeline, rt, seed_literal_apply_write=True)

    with pytest.raises(ConformanceFailure, match="must not change read_ts"):
        await check_oracle(make, rt, clock=clock)
