"""Several adapters as OS processes on one real Postgres (issue 36, real mode):
each is a distinct process; a write or DDL acknowledged on one is seen by a
statement that starts afterwards on another; concurrent writers on one table
lose nothing; concurrent UPDATEs of one row through different processes are
serialized by the deployment's write lock (no lost update)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import anyio
import pytest

from coordinator.config import named
from coordinator.factory import build_coordinator
from coordinator.process_adapters import ProcessAdaptersCoordinator
from sim.runtime.core import Runtime
from sim.runtime.errors import ExternalError

if TYPE_CHECKING:
    from coordinator.environment import Environment

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]


async def test_adapters_are_processes_that_see_each_others_writes_and_ddl(env: Environment) -> None:
    config = replace(named("decoupled"), adapters=2)
    async with build_coordinator(config, env, Runtime(seed=1)) as coord:
        assert isinstance(coord, ProcessAdaptersCoordinator)
        pids = coord.child_pids()
        assert len(set(pids)) == 2
        assert os.getpid() not in pids
        a, b = coord.connect(adapter=1), coord.connect(adapter=2)
        assert (await a.execute("CREATE TABLE t (k int, v int)")).ok
        # DDL on adapter 1, then a write through adapter 2 and a read on 1.
        r = await b.execute("INSERT INTO t VALUES (1, 10)")
        assert r.ok, r.error
        r = await a.execute("SELECT * FROM t")
        assert r.ok, r.error
        assert r.rows == ((1, 10),)
        # Concurrent writers in both processes: nothing lost.
        async def writer(i: int) -> None:
            s = coord.connect()
            for k in range(5):
                r = await s.execute(f"INSERT INTO t VALUES ({100 + 10 * i + k}, 0)")
                assert r.ok, r.error

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(writer, i)
        r = await b.execute("SELECT count(*) FROM t")
        assert r.rows == ((21,),), r
        # Read-then-write across processes: the write lock serializes them.
        async def bump(adapter: int) -> None:
            s = coord.connect(adapter=adapter)
            for _ in range(5):
                r = await s.execute("UPDATE t SET v = v + 1 WHERE k = 1")
                assert r.ok, r.error

        async with anyio.create_task_group() as tg:
            tg.start_soon(bump, 1)
            tg.start_soon(bump, 2)
        r = await a.execute("SELECT v FROM t WHERE k = 1")
        assert r.rows == ((20,),), r
        stats = coord.statistics()
        assert stats.writes >= 31
        assert stats.group_commits > 0
    # Every child has exited.
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_an_adapter_process_that_dies_ends_the_deployment_with_an_external_error(env: Environment) -> None:
    config = replace(named("decoupled"), adapters=2)
    killed = [0.0]

    async def kill_one_adapter() -> None:
        async with build_coordinator(config, env, Runtime(seed=1)) as coord:
            assert isinstance(coord, ProcessAdaptersCoordinator)
            s = coord.connect(adapter=1)
            assert (await s.execute("CREATE TABLE t (k int)")).ok
            os.kill(coord.child_pids()[1], signal.SIGKILL)
            killed[0] = time.monotonic()
            await anyio.sleep(30)  # the watcher ends the deployment long before

    with pytest.raises(ExternalError, match=r"adapter process 2 \(pid \d+\) exited with code -9"):
        await kill_one_adapter()
    assert time.monotonic() - killed[0] < 10
