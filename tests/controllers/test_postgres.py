"""The controllers on the real runtime: Postgres Consensus and a file Blob.

The same crash-and-rehydrate scenario as the virtual tests, smaller; modeled
replica costs are zero so the test does not sleep for them.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from controllers.commands import (
    UNKNOWN_COLLECTION,
    AdvanceCatalogFrontier,
    Append,
    CreateCluster,
    CreateDataflow,
    CreateReplica,
    CreateTable,
    DropDataflow,
    PeekError,
    table_shard_id,
)
from controllers.storage import AppendConflict, AppendOk, StorageController
from persist.client import PersistClient
from persist.frontier import Frontier
from persist.open import open_blob, open_consensus
from sim.runtime.core import Runtime
from sim.runtime.latency import Constant, LatencyModel
from tests.controllers.harness import Harness
from tests.controllers.scenario import crash_scenario

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.asyncio]


def _fresh_id() -> int:
    return uuid.uuid4().int % 10**12 * 10  # fresh shards on the shared server


def _rt(seed: int) -> Runtime:
    return Runtime(seed=seed, latency=LatencyModel({"replica": Constant(0.0)}))


async def test_crash_and_rehydrate_on_postgres_and_files(pg_url: str, tmp_path: Path) -> None:
    rt = _rt(1)
    consensus = await open_consensus(pg_url)
    try:
        async with PersistClient(await open_blob(f"file://{tmp_path}"), consensus, rt) as persist:
            transcript = await crash_scenario(persist, rt, steps=25, base_id=_fresh_id(), pause=0.0)
        assert len(transcript) > 10
    finally:
        await consensus.close()


async def test_group_commit_conflict_between_two_coordinators(pg_url: str, tmp_path: Path) -> None:
    rt = _rt(2)
    tid = _fresh_id()
    a_consensus, b_consensus = await open_consensus(pg_url), await open_consensus(pg_url)
    blob = await open_blob(f"file://{tmp_path}")
    try:
        async with (
            PersistClient(blob, a_consensus, rt.derive("a")) as pa,
            PersistClient(blob, b_consensus, rt.derive("b")) as pb,
            StorageController(pa, rt) as a,
            StorageController(pb, rt) as b,
        ):
            for s in (a, b):
                await s.apply(CreateTable(tid, table_shard_id(tid), ("x",)))
                await s.apply(AdvanceCatalogFrontier(1))
            assert await a.append(Append(3, {tid: [((1,), 1)]})) == AppendOk(3)
            assert await b.append(Append(3, {tid: [((2,), 1)]})) == AppendConflict(
                3, ((tid, Frontier.at(4)),), ()
            )
            assert a.upper(tid) == b.upper(tid) == Frontier.at(4)
    finally:
        await a_consensus.close()
        await b_consensus.close()


async def test_catalog_gating_on_postgres_and_files(pg_url: str, tmp_path: Path) -> None:
    rt = _rt(3)
    base = _fresh_id()
    t, idx = base, base + 1
    consensus = await open_consensus(pg_url)
    try:
        async with PersistClient(await open_blob(f"file://{tmp_path}"), consensus, rt) as persist, Harness(persist, rt) as h:
            await h.apply(CreateCluster(1), CreateReplica(1, 1), CreateReplica(1, 2))
            ts = await h.apply(CreateTable(t, table_shard_id(t), ("k",)), CreateDataflow(idx, 1, "index", t), advance=False)
            early = [h.peek(t, 0, catalog_ts=ts), h.peek(idx, 0, catalog_ts=ts)]
            # Work that takes real round trips, while the peeks must stay parked.
            assert await h.storage.append(Append(0, {}, catalog_ts=ts - 1)) == AppendOk(0)
            assert h.compute.pending_peeks() == tuple(early)
            await h.send(AdvanceCatalogFrontier(ts + 1))
            assert await h.append(1, {t: [((7,), 1)]}) == AppendOk(1)
            for peek in early:
                assert await h.rows(peek) == ()  # the table is empty at as_of 0
            assert await h.rows(h.peek(idx, 1)) == ((7,),)
            dropped = await h.apply(DropDataflow(idx))
            response = await h.result(h.peek(idx, 1, catalog_ts=dropped))
            assert isinstance(response.result, PeekError)
            assert response.result.code == UNKNOWN_COLLECTION
    finally:
        await consensus.close()
