"""The decoupled DDL path (seed 001): many tasks append to the catalog through
`compare_and_append` at oracle timestamps, retrying on conflict, while a
subscriber started at the beginning follows along."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from catalog.api import Appended, Changes, Conflict, Progress
from catalog.objects import Table
from catalog.testing import COLUMNS
from oracle.api import CATALOG_TIMELINE
from oracle.open import open_oracles
from sim.runtime.core import Runtime

if TYPE_CHECKING:
    from collections.abc import Callable

    from catalog.api import DurableCatalog
    from catalog.objects import CatalogState
    from catalog.testing import OpenCatalog
    from oracle.api import TimestampOracle
    from tests.catalog.conftest import CatalogImpl

TASKS = 16
ROUNDS = 2  # each round: one CREATE TABLE and one DROP TABLE


async def ddl(catalog: DurableCatalog, oracle: TimestampOracle, plan: str, name: str) -> tuple[int, int, int]:
    """One DDL statement on the decoupled path: returns (ts, item id, attempts)."""
    attempts = 0
    while True:
        attempts += 1
        tx = catalog.transaction()
        if plan == "create":
            item_id = tx.create_table(1, name, COLUMNS).id
        else:
            found = tx.find_item(1, name)
            assert found is not None, f"{name} vanished"
            item_id = found.id
            tx.drop_item(item_id)
        w = await oracle.write_ts()
        result = await catalog.compare_and_append(tx.upper, w.advance_to, tx.updates(w.ts))
        if isinstance(result, Appended):
            return w.ts, item_id, attempts
        assert isinstance(result, Conflict)  # the cache is fresh now: re-plan


async def run_concurrent_ddl(
    impl: CatalogImpl | Callable[[TimestampOracle], OpenCatalog], rt: Runtime, rounds: int = ROUNDS
) -> None:
    """TASKS tasks, each `rounds` times CREATE TABLE then DROP TABLE, retrying on
    conflict, with a subscriber from the start; checks exactly-once and order."""
    oracle = await (await open_oracles("mem://", rt)).timeline(CATALOG_TIMELINE, owns_backend=True)
    location = impl(oracle) if callable(impl) else impl.new_location(rt, oracle=oracle)()
    acked: list[tuple[int, str, str, int]] = []  # (ts, op, table, id)
    events: list[Changes | Progress] = []
    attempts = 0
    async with location() as catalog:
        await catalog.open()
        start = catalog.cached_upper
        initial = catalog.state()
        sub = await catalog.subscribe_at(start - 1)

        async def worker(n: int) -> None:
            nonlocal attempts
            for r in range(rounds):
                name = f"t{n}_{r}"
                for op in ("create", "drop"):
                    ts, item_id, tries = await ddl(catalog, oracle, op, name)
                    acked.append((ts, op, name, item_id))
                    attempts += tries

        target: list[int] = []
        caught_up = anyio.Event()

        async def follow() -> None:
            async for event in sub:
                events.append(event)
                if isinstance(event, Progress) and target and event.upper >= target[0]:
                    caught_up.set()
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)  # concurrently with the writers, from the start
            async with anyio.create_task_group() as writers:
                for n in range(TASKS):
                    writers.start_soon(worker, n)
            target.append(catalog.cached_upper)
            progress = [e.upper for e in events if isinstance(e, Progress)]
            if progress and progress[-1] >= target[0]:
                tg.cancel_scope.cancel()
            else:
                with anyio.fail_after(60):
                    await caught_up.wait()
        await sub.aclose()
        final = catalog.state()
        # Every acknowledged write is readable at the oracle's read_ts.
        assert await oracle.read_ts() >= max(ts for ts, *_ in acked)

    assert len(acked) == TASKS * rounds * 2
    assert attempts > len(acked), "the tasks should have conflicted at least once"
    # Ids unique; timestamps unique (one append per ts); nothing left over.
    creates = [(ts, name, i) for ts, op, name, i in acked if op == "create"]
    assert len({i for *_, i in creates}) == len(creates)
    assert len({ts for ts, *_ in acked}) == len(acked)
    assert final.objects(Table) == []
    # The subscriber saw every change once, in timestamp order, with frontiers
    # that only advance.
    replay: CatalogState = sub.snapshot.copy()
    assert replay == initial
    last_ts, last_upper = -1, start
    seen: list[tuple[int, str, str, int]] = []
    for event in events:
        if isinstance(event, Progress):
            assert event.upper > last_upper
            last_upper = event.upper
            continue
        assert event.ts > last_ts
        assert event.ts >= start - 1
        last_ts = event.ts
        replay.apply(event.updates)
        for u in event.updates:
            if u.kind == "table":
                t = u.decode()
                assert isinstance(t, Table)
                seen.append((event.ts, "create" if u.diff == 1 else "drop", t.name, t.id))
    assert sorted(seen) == sorted(acked)
    assert replay == final


@pytest.mark.asyncio
async def test_concurrent_ddl_with_subscriber(mem_catalog_impl: CatalogImpl) -> None:
    await run_concurrent_ddl(mem_catalog_impl, Runtime(seed=21))


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_concurrent_ddl_on_postgres(pg_catalog_impl: CatalogImpl) -> None:
    await run_concurrent_ddl(pg_catalog_impl, Runtime(seed=22))


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(5))
async def test_concurrent_ddl_many_seeds(mem_catalog_impl: CatalogImpl, seed: int) -> None:
    await run_concurrent_ddl(mem_catalog_impl, Runtime(seed=100 + seed), rounds=6)
