"""Modeled CPU (`sim.runtime.cpu`): a core pool serves in arrival order, as
many jobs at a time as it has cores, in virtual time exactly, and on the stock
loop sleeps its cost off in quanta.
"""

from __future__ import annotations

import anyio
import pytest

from sim.runtime.core import Runtime, run
from sim.runtime.cpu import CorePoolStatistics


async def _four_jobs(rt: Runtime, cores: int, seconds: float) -> tuple[float, CorePoolStatistics]:
    pool = rt.core_pool(cores, "coord")
    start = rt.now()
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(rt.cpu, seconds, pool)
    return rt.now() - start, pool.statistics()


def test_core_pool_of_one_serializes() -> None:
    async def main(rt: Runtime) -> tuple[float, CorePoolStatistics]:
        return await _four_jobs(rt, 1, 0.5)

    took, stats = run(main)
    assert took == 2.0
    assert stats == CorePoolStatistics("coord", 1, busy_s=2.0, acquisitions=4, wait_s=3.0)


def test_core_pool_of_two_runs_two_at_a_time() -> None:
    async def main(rt: Runtime) -> tuple[float, CorePoolStatistics]:
        return await _four_jobs(rt, 2, 0.5)

    took, stats = run(main)
    assert took == 1.0
    assert stats == CorePoolStatistics("coord", 2, busy_s=2.0, acquisitions=4, wait_s=1.0)


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_core_pool_serves_in_arrival_order_and_survives_cancellation() -> None:
    rt = Runtime()
    pool = rt.core_pool(1, "loop")
    order: list[str] = []

    async def job(name: str, seconds: float) -> None:
        await rt.cpu(seconds, pool)
        order.append(name)

    async with anyio.create_task_group() as tg:
        for name in "abc":
            tg.start_soon(job, name, 1.0)
        await rt.sleep(0.1)  # "a" holds the core now
        with anyio.move_on_after(0.5):  # gives up while waiting for the core
            await job("impatient", 1.0)
    assert order == ["a", "b", "c"]
    assert rt.now() == 3.0
    assert pool.statistics() == CorePoolStatistics("loop", 1, 3.0, acquisitions=3, wait_s=3.0)


def test_core_pool_needs_a_core() -> None:
    with pytest.raises(ValueError, match=">= 1 core"):
        Runtime().core_pool(0, "none")


def test_real_time_cpu_is_slept_in_quanta_not_per_cost() -> None:
    """A thousand 50 µs costs are slept off in about fifty 1 ms sleeps, not a
    thousand timer rounds (each at least a millisecond on the stock loop), and
    the total slept plus what is still owed is exactly what was spent."""

    async def main(rt: Runtime) -> tuple[list[float], float]:
        slept: list[float] = []
        sleep = rt.sleep

        async def counting_sleep(seconds: float) -> None:
            slept.append(seconds)
            await sleep(seconds)

        rt.sleep = counting_sleep  # type: ignore[method-assign]
        pool = rt.core_pool(1, "loop")
        for _ in range(1000):
            await rt.cpu(50e-6, pool)
        return slept, pool.owed_s

    slept, owed = run(main, virtual=False)
    assert 45 <= len(slept) <= 51
    assert sum(slept) + owed == pytest.approx(0.05)
