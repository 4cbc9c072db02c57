"""The coordinator tests' core, under the real runtime against the embedded
Postgres: the oracle, the timestamp store, the catalog stash and persist
Consensus in a fresh database per test, Blob in files (fewer seeds than virtual)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from coordinator.config import GroupCommitPolicy, named
from coordinator.factory import build_coordinator
from sim.runtime.core import Runtime
from tests.coordinator.harness import CONFIG_NAMES

if TYPE_CHECKING:
    from coordinator.environment import Environment

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]


@pytest.mark.parametrize("name", CONFIG_NAMES)
async def test_seed001_scenario_and_restart(name: str, env: Environment) -> None:
    rt = Runtime(seed=1)
    async with build_coordinator(named(name), env, rt) as coord:
        c1, c2 = coord.connect(), coord.connect()
        for n in range(3):
            assert (await c1.execute(f"CREATE TABLE foo{n} (a int)")).ok
            r = await c2.execute(f"INSERT INTO foo{n} VALUES ({n})")
            assert r.ok, r.error
            r = await c1.execute(f"SELECT * FROM foo{n}")
            assert r.ok, r.error
            assert r.rows == ((n,),)
        assert (await c1.execute("CREATE DEFAULT INDEX ON foo0")).ok
        r = await c2.execute("SELECT count(*) FROM foo0")
        assert r.rows == ((1,),)

        async def writer(i: int) -> None:
            s = coord.connect()
            for k in range(5):
                assert (await s.execute(f"INSERT INTO foo1 VALUES ({100 + i * 10 + k})")).ok

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(writer, i)
        stats = coord.statistics()
        if coord.config.group_commit is GroupCommitPolicy.AFTER_DRAINING:
            assert stats.writes_group_committed > stats.group_commits  # batches formed
    async with build_coordinator(named(name), env, Runtime(seed=2)) as again:
        r = await again.connect().execute("SELECT count(*) FROM foo1")
        assert r.rows == ((41,),), r


async def test_split_brain_is_fenced_on_postgres(env: Environment) -> None:
    async with build_coordinator(named("event-loop"), env, Runtime(seed=3)) as a:
        sa = a.connect()
        assert (await sa.execute("CREATE TABLE t (a int)")).ok
        async with build_coordinator(named("event-loop"), env, Runtime(seed=4)) as b:
            assert (await b.connect().execute("INSERT INTO t VALUES (2)")).ok
            r = await sa.execute("SELECT * FROM t")
            assert r.code == "57P01", r
