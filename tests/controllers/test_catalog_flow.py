"""End to end from catalog transactions: DDL planned with `catalog.transaction`,
its updates derived into commands, applied to both controllers in order, then
writes and peeks: what a coordinator does after each catalog commit."""

from __future__ import annotations

import anyio
import pytest

from catalog.migrations import initial_state
from catalog.objects import Column
from catalog.transaction import Transaction
from controllers.commands import (
    UNKNOWN_COLLECTION,
    AdvanceCatalogFrontier,
    CreateDataflow,
    CreateTable,
    DropDataflow,
    DropTable,
    PeekError,
)
from controllers.derive import derive
from controllers.transform import Comparison, Transform
from persist.client import PersistClient
from persist.open import open_location
from sim.runtime.core import Runtime
from tests.controllers.harness import Harness

pytestmark = [pytest.mark.virtual, pytest.mark.asyncio]


async def test_ddl_from_the_catalog_then_writes_and_peeks() -> None:
    rt = Runtime(seed=1)
    state = initial_state()
    async with PersistClient(*await open_location(), rt) as persist, Harness(persist, rt) as h:
        for cmd in derive(state.as_updates(0)):  # the builtin default cluster and replica
            await h.send(cmd)
        await h.send(AdvanceCatalogFrontier(1))

        view = Transform((Comparison("v", "<>", "b"),), project=("k",))
        tx = Transaction(state, 1)
        table = tx.create_table(1, "t", [Column("k", "int"), Column("v", "text")])
        index = tx.create_index(1, "t_idx", table.id, ["k"], 1)
        mv = tx.create_materialized_view(1, "mv", view.to_sql("t"), [Column("k", "int")], [table.id], 1)
        commands = derive(tx.updates(1))
        assert [type(c) for c in commands] == [CreateTable, CreateDataflow, CreateDataflow]
        for cmd in commands:
            await h.send(cmd)
        await h.send(AdvanceCatalogFrontier(2))
        h.catalog_ts = 1
        state = tx.state

        await h.append(5, {table.id: [((1, "a"), 1), ((2, "b"), 1), ((3, "c"), 2)]})
        cols = ("k", "v")
        assert await h.rows(h.peek(index.id, 5)) == h.model.expected(table.id, 5, cols, Transform())
        assert await h.rows(h.peek(mv.id, 5)) == ((1,), (3,), (3,))
        assert await h.rows(h.peek(table.id, 5, transform=Transform(count=True))) == ((4,),)

        tx = Transaction(state, 2)
        assert tx.drop_item(table.id, cascade=True) == [index.id, mv.id, table.id]
        commands = derive(tx.updates(2))
        assert commands == [DropDataflow(mv.id), DropDataflow(index.id), DropTable(table.id)]
        for cmd in commands:
            await h.send(cmd)
        await h.send(AdvanceCatalogFrontier(3))
        for cid in (index.id, mv.id, table.id):
            response = await h.result(h.peek(cid, 5, catalog_ts=2))
            assert isinstance(response.result, PeekError)
            assert response.result.code == UNKNOWN_COLLECTION
        await anyio.sleep(1)
