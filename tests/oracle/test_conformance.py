"""The one oracle conformance suite, on every implementation — and on known-bad
variants it must reject."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from oracle.memory import MemoryOracle
from oracle.postgres import PostgresOracle
from oracle.stash import MemTimestampStash
from oracle.testing import ConformanceFailure, ManualWallClock, check_oracle, fresh_timeline
from sim.runtime.core import Runtime

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
async def test_memory_oracle_sharing_one_stash() -> None:
    """Oracles opened one after another on one stash (each a new epoch) conform."""
    clock = ManualWallClock()
    rt = Runtime(seed=3, wall_clock=clock)
    stash = MemTimestampStash(rt)

    async def make(timeline: str) -> TimestampOracle:
        return await MemoryOracle.open(stash, timeline, rt, window_ms=7)

    await check_oracle(make, rt, clock=clock)


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
