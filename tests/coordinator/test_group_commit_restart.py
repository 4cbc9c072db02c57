"""Group commit batching under load, and recovery: a coordinator stopped mid-run
and a new one started on the same stores loses no acknowledged write or DDL."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from coordinator.config import GroupCommitPolicy, OracleCalls
from sim.runtime.core import run
from tests.coordinator.harness import (
    CONFIG_NAMES,
    build_coordinator,
    config,
    latency_model,
    virtual_env,
)

if TYPE_CHECKING:
    from coordinator.session import Coordinator
    from sim.runtime.core import Runtime

pytestmark = pytest.mark.virtual


def _writes_per_commit(name: str, clients: int, **overrides: object) -> float:
    """Writes per group commit with `clients` closed-loop inserters (10 each)."""

    async def main(rt: Runtime) -> float:
        async with build_coordinator(config(name, **overrides), virtual_env(rt), rt) as coord:
            assert (await coord.connect().execute("CREATE TABLE t (a int)")).ok
            before = coord.statistics()

            async def client(i: int) -> None:
                s = coord.connect()
                for k in range(10):
                    r = await s.execute(f"INSERT INTO t VALUES ({i * 100 + k})")
                    assert r.ok, r.error

            async with anyio.create_task_group() as tg:
                for i in range(clients):
                    tg.start_soon(client, i)
            after = coord.statistics()
            r = await coord.connect().execute("SELECT count(*) FROM t")
            assert r.rows == ((clients * 10,),)
            commits = after.group_commits - before.group_commits
            writes = after.writes_group_committed - before.writes_group_committed
            return writes / commits

    return run(main, seed=3, latency=latency_model())


LOADS = (1, 8, 64)


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_after_draining_batches_every_queued_write(name: str) -> None:
    """After draining, a commit takes every write the clients queued: the
    batch grows with the load (on an event loop, every client's write; the
    decoupled design has no client queue to drain, only what arrived while
    the previous commit was in flight)."""
    batches = [_writes_per_commit(name, c, group_commit=GroupCommitPolicy.AFTER_DRAINING) for c in LOADS]
    print(f"{name}: after-draining writes per commit at {LOADS} clients: {batches}")
    assert batches[0] == 1.0
    assert 2 < batches[1] < batches[2]
    assert batches[2] > 16


def test_immediate_batch_size_is_an_outcome_of_the_loop() -> None:
    """The batch size under `immediate` is not configured (no `pending[:1]`):
    with the Postgres oracle's calls awaited on the loop (before PR #37363:
    peek_write_ts and write_ts before the append, read_ts after it) the loop
    takes client messages only while the append and apply_write run in their
    task, so fewer writes queue for the next commit; with the calls off the
    loop, writes that arrive at any time during a commit in flight join the
    next one, so the batch grows faster with the load."""
    name = "event-loop+pg-oracle"
    on = [_writes_per_commit(name, c, group_commit=GroupCommitPolicy.IMMEDIATE,
                             oracle_calls=OracleCalls.ON_LOOP) for c in LOADS]
    off = [_writes_per_commit(name, c, group_commit=GroupCommitPolicy.IMMEDIATE,
                              oracle_calls=OracleCalls.OFF_LOOP) for c in LOADS]
    print(f"immediate, writes per commit at {LOADS} clients: on-loop {on}, off-loop {off}")
    assert on[0] == off[0] == 1.0
    assert 1.0 < off[1] < off[2]
    assert on[2] < off[2]


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
