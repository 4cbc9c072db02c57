"""Storage controller: group commit advances every table, conflicts surface,
unknown tables are reported, sinces follow the window and read holds."""

from __future__ import annotations

import pytest

from controllers.commands import (
    AdvanceCatalogFrontier,
    AllowCompaction,
    Append,
    CreateTable,
    DropTable,
    table_shard_id,
)
from controllers.storage import AppendConflict, AppendOk, StorageConfig, StorageController
from controllers.transform import decode_row, encode_row
from persist.client import PersistClient
from persist.codec import Update
from persist.frontier import Frontier
from persist.open import open_location
from sim.runtime.core import Runtime
from sim.runtime.errors import InvalidUsage

pytestmark = [pytest.mark.virtual, pytest.mark.asyncio]


def _table(tid: int) -> CreateTable:
    return CreateTable(tid, table_shard_id(tid), ("a",))


async def test_group_commit_advances_every_table_and_reads_are_exact() -> None:
    rt = Runtime(seed=1)
    async with PersistClient(*await open_location(), rt) as persist, StorageController(persist, rt) as s:
        for tid in (1, 2, 3):
            await s.apply(_table(tid))
        await s.apply(AdvanceCatalogFrontier(1))
        assert await s.append(Append(5, {1: [((1,), 1)]})) == AppendOk(5)
        assert [s.upper(t) for t in (1, 2, 3)] == [Frontier.at(6)] * 3
        assert await s.append(Append(9, {2: [(("x",), 2)], 3: [((True,), 1)]})) == AppendOk(9)
        assert [s.upper(t) for t in (1, 2, 3)] == [Frontier.at(10)] * 3
        _, reader = await persist.open(table_shard_id(2))
        assert [decode_row(u.key) for u in await reader.snapshot(9)] == [("x",)]
        assert await reader.snapshot(8) == []
        assert await reader.fetch_recent_upper() == Frontier.at(10)
        stats = s.statistics()
        assert (stats.appends, stats.table_appends, stats.empty_table_appends) == (2, 3, 3)


async def test_rows_for_unknown_tables_are_reported_not_written() -> None:
    rt = Runtime(seed=2)
    async with PersistClient(*await open_location(), rt) as persist, StorageController(persist, rt) as s:
        await s.apply(_table(1))
        await s.apply(_table(2))
        await s.apply(DropTable(2))
        await s.apply(AdvanceCatalogFrontier(3))
        result = await s.append(Append(0, {1: [((1,), 1)], 2: [((2,), 1)], 7: []}, catalog_ts=2))
        assert result == AppendOk(0, unknown=(2, 7))
        assert s.table_ids() == (1,)


async def test_a_second_writer_at_the_same_ts_is_a_conflict_not_a_skip() -> None:
    rt = Runtime(seed=3)
    blob, consensus = await open_location()
    async with (
        PersistClient(blob, consensus, rt.derive("a")) as pa,
        PersistClient(blob, consensus, rt.derive("b")) as pb,
        StorageController(pa, rt) as a,
        StorageController(pb, rt) as b,
    ):
        for s in (a, b):
            await s.apply(_table(1))
            await s.apply(_table(2))
            await s.apply(AdvanceCatalogFrontier(1))
        assert await a.append(Append(4, {1: [((1,), 1)]})) == AppendOk(4)
        # b still believes the uppers are 0: writing at 4 again must not vanish.
        result = await b.append(Append(4, {2: [((2,), 1)]}))
        assert result == AppendConflict(4, ((1, Frontier.at(5)), (2, Frontier.at(5))), ())
        # A later timestamp is fine: the other writer's upper is below it.
        assert await b.append(Append(7, {2: [((2,), 1)]})) == AppendOk(7)
        assert b.statistics().foreign_advances == 0  # b's cached uppers were refreshed by the conflict
        # a is now behind: its cached upper 5 <= 8, so it retries against 8.
        assert await a.append(Append(8, {})) == AppendOk(8)
        assert a.statistics().foreign_advances == 2


async def test_since_follows_the_window_and_holds() -> None:
    rt = Runtime(seed=4)
    async with (
        PersistClient(*await open_location(), rt) as persist,
        StorageController(persist, rt, config=StorageConfig(compaction_window=10)) as s,
    ):
        await s.apply(_table(1))
        await s.apply(AdvanceCatalogFrontier(1))
        hold = s.read_hold(1, 3)
        for ts in range(0, 40, 4):
            await s.append(Append(ts, {1: [((ts,), 1)]}))
        await persist.wait_idle()
        assert s.since(1) == 3  # held
        hold.release()
        hold.release()  # idempotent
        await s.append(Append(40, {}))
        await _settle(rt)
        assert s.since(1) == 41 - 10
        with pytest.raises(InvalidUsage, match="below its since"):
            s.read_hold(1, 5)
        await s.apply(AllowCompaction(1, 40))
        await _settle(rt)
        assert s.since(1) == 40
        # The shard's since followed (the controller's reader is its only one).
        _, reader = await persist.open(table_shard_id(1))
        assert reader.since == Frontier.at(40)
        rows = await reader.snapshot(40)
        assert sorted(decode_row(u.key) for u in rows) == [(ts,) for ts in range(0, 40, 4)]
        assert all(isinstance(u, Update) and u.value == b"" for u in rows)
        assert encode_row((1, "a", None, True)) == b'[1,"a",null,true]'


async def _settle(rt: Runtime) -> None:
    await rt.sleep(0.1)
