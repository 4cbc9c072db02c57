"""Compute controller: catalog_ts gating, clean errors for dropped objects, exact
answers at `as_of`, first-answer-wins across replicas, cancellation."""

from __future__ import annotations

import math

import anyio
import pytest

from controllers.commands import (
    UNKNOWN_COLLECTION,
    AdvanceCatalogFrontier,
    AllowCompaction,
    Append,
    CancelPeek,
    ComputeResponse,
    CreateCluster,
    CreateDataflow,
    CreateReplica,
    CreateTable,
    DropDataflow,
    DroppedIds,
    DropTable,
    FrontierUppers,
    Peek,
    PeekCanceled,
    PeekError,
    PeekResponse,
    PeekRows,
    table_shard_id,
)
from controllers.compute import ComputeController
from controllers.storage import AppendOk, StorageController
from controllers.transform import Comparison, Transform
from persist.client import PersistClient
from persist.open import open_location
from sim.runtime.core import Runtime
from sim.runtime.errors import InvalidUsage
from tests.controllers.harness import Harness

pytestmark = [pytest.mark.virtual, pytest.mark.asyncio]

T, IDX, MV, CNT = 10, 11, 12, 13
COLS = ("k", "v")


def _table(tid: int = T) -> CreateTable:
    return CreateTable(tid, table_shard_id(tid), COLS)


async def _setup(h: Harness, *, replicas: int = 1) -> None:
    await h.apply(CreateCluster(1), *[CreateReplica(1, r) for r in range(1, replicas + 1)], _table())
    await h.apply(
        CreateDataflow(IDX, 1, "index", T),
        CreateDataflow(MV, 1, "materialized-view", T, Transform((Comparison("v", "=", "a"),))),
        CreateDataflow(CNT, 1, "materialized-view", T, Transform(count=True)),
    )


async def test_peek_at_as_of_is_exact_on_every_path() -> None:
    rt = Runtime(seed=1)
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt) as h:
        await _setup(h)
        await h.append(0, {T: [((1, "a"), 1), ((2, "b"), 1)]})
        await h.append(1, {T: [((3, "a"), 1)]})
        await h.append(2, {T: [((1, "a"), -1), ((2, "b"), 1)]})
        # A peek at a future as_of waits for the upper to pass it.
        future = h.peek(IDX, 4)
        for as_of in range(3):
            for cid, t in ((IDX, Transform()), (T, Transform()), (MV, Transform((Comparison("v", "=", "a"),)))):
                assert await h.rows(h.peek(cid, as_of)) == h.model.expected(T, as_of, COLS, t)
            assert await h.rows(h.peek(CNT, as_of)) == h.model.expected(T, as_of, COLS, Transform(count=True))
            # A peek's own transform composes with the view's.
            got = await h.rows(h.peek(MV, as_of, transform=Transform(count=True)))
            assert got == h.model.expected(T, as_of, COLS, Transform((Comparison("v", "=", "a"),)), Transform(count=True))
        with anyio.move_on_after(1):
            await h.result(future)
            pytest.fail("a peek at as_of 4 was answered while the upper was 3")
        await h.append(3, {T: [((9, "z"), 1)]})
        await h.append(4, {T: [((10, "z"), 1)]})
        await h.append(5, {T: [((11, "z"), 1)]})  # after as_of: must not show
        assert await h.rows(future) == h.model.expected(T, 4, COLS, Transform())
        assert (10, "z") in await h.rows(h.peek(T, 4))
        assert (11, "z") not in await h.rows(h.peek(T, 4))
        assert h.storage.upper(T).ts == 6
        assert h.compute.upper(IDX).ts == 6
        assert FrontierUppers(IDX, h.compute.upper(IDX)) in h.other


async def test_peek_ahead_of_catalog_frontier_waits_then_sees_the_object() -> None:
    rt = Runtime(seed=2)
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt) as h:
        await h.apply(CreateCluster(1), CreateReplica(1, 1))
        # The query saw the table at catalog time `ts`; the controllers have not yet.
        ts = await h.apply(_table(), CreateDataflow(IDX, 1, "index", T), advance=False)
        on_table, on_index = h.peek(T, 0, catalog_ts=ts), h.peek(IDX, 0, catalog_ts=ts)
        await anyio.sleep(1)
        assert h.compute.pending_peeks() == (on_table, on_index)
        assert h.compute.statistics().peeks_waited_on_catalog == 2
        await h.send(AdvanceCatalogFrontier(ts))  # an upper: not yet beyond catalog_ts
        await anyio.sleep(1)
        assert h.compute.pending_peeks() == (on_table, on_index)
        await h.send(AdvanceCatalogFrontier(ts + 1))
        await h.append(0, {T: [((1, "x"), 1)]})
        assert await h.rows(on_table) == ((1, "x"),)
        assert await h.rows(on_index) == ((1, "x"),)


async def test_append_waits_for_the_catalog_frontier() -> None:
    rt = Runtime(seed=6)
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt) as h:
        ts = await h.apply(_table(), advance=False)
        done: list[object] = []

        async def write() -> None:
            done.append(await h.storage.append(Append(0, {T: [((1, "x"), 1)]}, catalog_ts=ts)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await anyio.sleep(1)
            assert done == []
            await h.send(AdvanceCatalogFrontier(ts + 1))
        assert done == [AppendOk(0)]


async def test_object_dropped_at_or_before_catalog_ts_is_a_clean_error() -> None:
    rt = Runtime(seed=3)
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt) as h:
        await _setup(h)
        await h.append(0, {T: [((1, "a"), 1)]})
        drop_ts = await h.apply(DropDataflow(IDX))
        # Dropped at catalog_ts, and dropped before it.
        for catalog_ts in (drop_ts, drop_ts + 1):
            peek = h.peek(IDX, 0, catalog_ts=catalog_ts)
            await h.apply()
            response = await h.result(peek)
            assert isinstance(response.result, PeekError)
            assert response.result.code == UNKNOWN_COLLECTION
        # Planned before the drop, gated until after it: the frontier is past the
        # drop when the peek is served, so it gets the error too.
        late = h.peek(MV, 0, catalog_ts=h.catalog_ts + 1)
        await h.apply(DropDataflow(MV))
        response = await h.result(late)
        assert isinstance(response.result, PeekError)
        assert response.result.code == UNKNOWN_COLLECTION
        # Never created.
        response = await h.result(h.peek(999, 0))
        assert isinstance(response.result, PeekError)
        assert response.result.code == UNKNOWN_COLLECTION
        # A table dropped while a peek on it waits for its upper.
        waiting = h.peek(T, 50)
        await anyio.sleep(0.1)
        await h.apply(DropTable(T))
        response = await h.result(waiting)
        assert isinstance(response.result, PeekError)
        assert response.result.code == UNKNOWN_COLLECTION
        assert DroppedIds((IDX,)) in h.other
        assert DroppedIds((T,)) in h.other


async def test_first_answer_wins_and_cancel() -> None:
    rt = Runtime(seed=4)
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt) as h:
        await _setup(h, replicas=3)
        await h.append(0, {T: [((1, "a"), 1)]})
        for _ in range(5):
            assert await h.rows(h.peek(IDX, 0)) == ((1, "a"),)
        await anyio.sleep(1)  # the slower replicas' answers arrive and are dropped
        assert h.compute.statistics().responses_dropped >= 5
        stuck = h.peek(IDX, 100)
        await anyio.sleep(0.5)
        h.compute.send(CancelPeek(stuck))
        assert (await h.result(stuck)).result == PeekCanceled()
        assert h.compute.pending_peeks() == ()
        waiting = h.peek(T, 0, catalog_ts=h.catalog_ts + 3)
        h.compute.send(CancelPeek(waiting))
        assert (await h.result(waiting)).result == PeekCanceled()


async def test_unknown_column_and_non_table_input_are_clean_errors() -> None:
    rt = Runtime(seed=5)
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt) as h:
        await _setup(h)
        await h.apply(CreateDataflow(20, 1, "index", MV))  # an index on a view
        await h.append(0, {T: []})
        r = await h.result(h.peek(T, 0, transform=Transform((Comparison("nope", "=", 1),))))
        assert isinstance(r.result, PeekError)
        assert r.result.code == "42703"
        r = await h.result(h.peek(20, 0))
        assert isinstance(r.result, PeekError)
        assert r.result.code == "0A000"
        assert isinstance((await h.result(h.peek(CNT, 0))).result, PeekRows)


async def test_compaction_bounds_what_peeks_can_read() -> None:
    rt = Runtime(seed=7)
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt, window=5) as h:
        await _setup(h)
        for ts in range(0, 30, 2):
            await h.append(ts, {T: [((ts, "a"), 1)]})
        await anyio.sleep(0.5)
        since = h.compute.replica(1, 1).since(IDX)
        assert since is not None
        assert 0 < since <= 28 - 5 + 1
        r = await h.result(h.peek(IDX, since - 1))
        assert isinstance(r.result, PeekError)
        assert r.result.code == "XX000"
        assert await h.rows(h.peek(IDX, since)) == h.model.expected(T, since, COLS, Transform())
        # AllowCompaction moves it further, up to the upper.
        await h.apply(AllowCompaction(IDX, 28))
        await h.append(30, {})
        await anyio.sleep(0.5)
        assert h.compute.replica(1, 1).since(IDX) == 28
        assert await h.rows(h.peek(IDX, 28)) == h.model.expected(T, 28, COLS, Transform())


async def test_read_holds_keep_the_controller_and_its_replicas_from_compacting() -> None:
    """The controller owns compaction: its since follows the window in steps,
    never passes a read hold, and no replica compacts past it."""
    rt = Runtime(seed=9)
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt, window=4) as h:
        await _setup(h, replicas=2)
        assert h.compute.read_floor(999) is None
        await h.append(0, {T: [((0, "a"), 1)]})
        await anyio.sleep(0.5)
        since = h.compute.read_floor(IDX)
        assert since is not None
        hold = h.compute.read_hold(IDX, since)
        with pytest.raises(InvalidUsage, match="cannot hold"):
            h.compute.read_hold(999, 0)
        for ts in range(2, 40, 2):
            await h.append(ts, {T: [((ts, "a"), 1)]})
        await anyio.sleep(0.5)
        assert h.compute.read_floor(IDX) == since  # held
        for r in (1, 2):
            replica_since = h.compute.replica(1, r).since(IDX)
            assert replica_since is not None
            assert replica_since <= since
        assert await h.rows(h.peek(IDX, since)) == h.model.expected(T, since, COLS, Transform())
        hold.release()
        await h.append(40, {})
        await anyio.sleep(0.5)
        after = h.compute.read_floor(IDX)
        assert after is not None
        assert after > since
        assert after >= 41 - 4 - 4 // 4  # the window, in steps of a quarter window
        with pytest.raises(InvalidUsage, match="cannot hold"):
            h.compute.read_hold(IDX, since)
        for r in (1, 2):
            replica_since = h.compute.replica(1, r).since(IDX)
            assert replica_since is not None
            assert replica_since <= after


async def test_shutdown_cancels_replicas_dataflows_and_waiting_peeks() -> None:
    rt = Runtime(seed=8)
    async with PersistClient(*await open_location(), rt) as persist:
        with anyio.fail_after(5):
            async with Harness(persist, rt) as h:
                await _setup(h, replicas=2)
                await h.append(0, {T: [((1, "a"), 1)]})
                h.peek(IDX, 100)  # waits for an upper that never comes
                h.peek(T, 100)
                h.peek(IDX, 0, catalog_ts=99)  # waits for the catalog
                await anyio.sleep(0.5)
                assert len(h.compute.pending_peeks()) == 3
        # Nothing of the controllers is left running: the persist client exits too.


async def test_responses_can_go_to_a_memory_stream() -> None:
    rt = Runtime(seed=9)
    send, receive = anyio.create_memory_object_stream[ComputeResponse](math.inf)
    with send, receive:
        async with (
            PersistClient(*await open_location(), rt) as persist,
            StorageController(persist, rt) as storage,
            ComputeController(persist, rt, send) as compute,
        ):
            for cmd in (CreateCluster(1), CreateReplica(1, 1), _table(), AdvanceCatalogFrontier(1)):
                if isinstance(cmd, CreateTable | AdvanceCatalogFrontier):
                    await storage.apply(cmd)
                compute.send(cmd)
            await storage.append(Append(0, {T: [((1, "a"), 1)]}))
            compute.send(Peek(1, T, 1, 0, 0))
            assert await receive.receive() == PeekResponse(1, PeekRows(((1, "a"),)))


async def test_after_group_commit_at_ts_every_table_is_readable_at_ts() -> None:
    rt = Runtime(seed=10)
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt) as h:
        await _setup(h, replicas=2)
        await h.apply(_table(20), CreateDataflow(21, 1, "index", 20))
        for ts in (3, 8, 9):
            assert await h.append(ts, {T: [((ts, "a"), 1)]}) == AppendOk(ts)
            assert h.storage.upper(T).ts == h.storage.upper(20).ts == ts + 1
            # The idle table and its index answer at ts at once: its upper moved too.
            with anyio.fail_after(0.1):
                assert await h.rows(h.peek(20, ts)) == ()
                assert await h.rows(h.peek(21, ts)) == ()
            for cid in (T, IDX):
                assert await h.rows(h.peek(cid, ts)) == h.model.expected(T, ts, COLS, Transform())
