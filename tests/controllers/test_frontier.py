"""What both controllers share of time: a catalog frontier that never regresses
and wakes its waiters, and read holds released exactly once."""

from __future__ import annotations

import anyio
import pytest

from controllers.frontier import CatalogFollower, ReadHold
from sim.runtime.errors import InvalidUsage

pytestmark = pytest.mark.virtual


@pytest.mark.asyncio
async def test_the_catalog_frontier_advances_wakes_waiters_and_never_regresses() -> None:
    follower = CatalogFollower()
    woken: list[int] = []

    async def wait(catalog_ts: int) -> None:
        await follower.wait_catalog_frontier(catalog_ts)
        woken.append(catalog_ts)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, 0)
        tg.start_soon(wait, 3)
        await anyio.wait_all_tasks_blocked()
        assert follower.catalog_frontier == 0
        assert follower._advance_catalog_frontier(1)
        await anyio.wait_all_tasks_blocked()
        assert woken == [0]  # beyond 0, not yet beyond 3
        assert not follower._advance_catalog_frontier(1)  # already there
        assert follower._advance_catalog_frontier(4)
    assert woken == [0, 3]
    with pytest.raises(InvalidUsage, match="cannot regress from 4 to 2"):
        follower._advance_catalog_frontier(2)
    await follower.wait_catalog_frontier(3)  # already beyond: returns at once


def test_a_read_hold_is_released_once() -> None:
    released: list[tuple[int, int]] = []
    hold = ReadHold(7, 42, lambda h: released.append((h.id, h.ts)))
    hold.release()
    hold.release()
    assert released == [(7, 42)]
