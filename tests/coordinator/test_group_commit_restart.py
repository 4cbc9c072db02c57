"""Group commit batching under load, and recovery: a coordinator stopped mid-run
and a new one started on the same stores loses no acknowledged write or DDL."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from coordinator.config import GroupCommitPolicy
from sim.runtime import run
from tests.coordinator.harness import (
    CONFIG_NAMES,
    build_coordinator,
    config,
    latency_model,
    virtual_env,
)

if TYPE_CHECKING:
    from coordinator.session import Coordinator
    from sim.runtime import Runtime

pytestmark = pytest.mark.virtual


def _writes_per_commit(name: str, policy: GroupCommitPolicy) -> float:
    async def main(rt: Runtime) -> float:
        async with build_coordinator(
            config(name, group_commit=policy), virtual_env(rt), rt
        ) as coord:
            assert (await coord.connect().execute("CREATE TABLE t (a int)")).ok
            before = coord.statistics()

            async def client(i: int) -> None:
                s = coord.connect()
                for k in range(10):
                    r = await s.execute(f"INSERT INTO t VALUES ({i * 100 + k})")
                    assert r.ok, r.error

            async with anyio.create_task_group() as tg:
                for i in range(64):
                    tg.start_soon(client, i)
            after = coord.statistics()
            r = await coord.connect().execute("SELECT count(*) FROM t")
            assert r.rows == ((640,),)
            commits = after.group_commits - before.group_commits
            writes = after.writes_group_committed - before.writes_group_committed
            return writes / commits

    return run(main, seed=3, latency=latency_model())


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_group_commit_batches_after_draining(name: str) -> None:
    draining = _writes_per_commit(name, GroupCommitPolicy.AFTER_DRAINING)
    immediate = _writes_per_commit(name, GroupCommitPolicy.IMMEDIATE)
    print(
        f"{name}: writes per group commit: after-draining {draining:.1f}, immediate {immediate:.1f}"
    )
    assert draining > 8
    assert immediate == pytest.approx(1.0, abs=0.05)


async def _load(
    rt: Runtime, coord: Coordinator, acked: list[int], tables: list[str], stop: anyio.Event
) -> None:
    """Writers and DDL until `stop`; records what was acknowledged."""

    async def writer(i: int) -> None:
        s = coord.connect()
        for k in range(1000):
            if stop.is_set():
                return
            v = i * 10_000 + k
            r = await s.execute(f"INSERT INTO t VALUES ({v})")
            if r.ok:
                acked.append(v)
            else:
                return  # the coordinator went away

    async def ddl() -> None:
        s = coord.connect()
        for k in range(1000):
            if stop.is_set():
                return
            r = await s.execute(f"CREATE TABLE d{k} (a int)")
            if r.ok:
                tables.append(f"d{k}")
            else:
                return
            await rt.sleep(0.003)

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(writer, i)
        tg.start_soon(ddl)


@pytest.mark.parametrize("name", CONFIG_NAMES)
@pytest.mark.parametrize("seed", range(3))
def test_restart_mid_run_loses_nothing_acknowledged(name: str, seed: int) -> None:
    async def main(rt: Runtime) -> None:
        env = virtual_env(rt)
        acked: list[int] = []
        tables: list[str] = []
        async with build_coordinator(config(name), env, rt.derive("first")) as first:
            assert (await first.connect().execute("CREATE TABLE t (a int)")).ok
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(_load, rt, first, acked, tables, stop)
                await rt.sleep(0.02 + rt.rng.uniform(0, 0.02))
                # The crash: the coordinator's tasks are cancelled mid-flight.
                tg.cancel_scope.cancel()
        assert acked
        assert tables
        async with build_coordinator(config(name), env, rt.derive("second")) as second:
            s = second.connect()
            r = await s.execute("SELECT * FROM t")
            assert r.ok, r.error
            seen = {row[0] for row in r.rows}
            missing = set(acked) - seen
            assert not missing, f"acknowledged inserts lost: {sorted(missing)[:10]}"
            for name_ in tables:
                r = await s.execute(f"SELECT count(*) FROM {name_}")
                assert r.ok, f"acknowledged CREATE TABLE {name_} lost: {r.error}"
            r = await s.execute("INSERT INTO t VALUES (-1)")
            assert r.ok, r.error

    run(main, seed=seed, latency=latency_model())
