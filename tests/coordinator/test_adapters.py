"""Several serving processes of the decoupled design (issue 36, virtual mode):
separate core pools and group commits, strict serializability and DDL across
adapters, concurrent appends to one table landing exactly once, scale-out of
throughput, and the refusal of an event loop with more than one adapter."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from coordinator.adapters import MultiAdapterCoordinator
from coordinator.config import named
from sim.runtime.core import run
from sim.runtime.errors import InvalidUsage
from tests.coordinator.harness import build_coordinator, config, latency_model, virtual_env

if TYPE_CHECKING:
    from coordinator.session import Coordinator, Session
    from sim.runtime.core import Runtime

pytestmark = pytest.mark.virtual

SEEDS = (1, 2, 3)


def _on(coord: Coordinator, index: int) -> Session:
    """A session on adapter `index` (0-based) of a multi-adapter coordinator."""
    assert isinstance(coord, MultiAdapterCoordinator)
    while True:
        s = coord.connect()
        if s.coordinator is coord.adapters[index]:
            return s


def _replay(name: str, seed: int) -> str:
    return f"replay: uv run pytest tests/coordinator/test_adapters.py -k '{name} and {seed}'"


def test_event_loop_refuses_more_than_one_adapter() -> None:
    with pytest.raises(InvalidUsage, match="a single loop is single by design"):
        named("event-loop").with_overrides(adapters=2)
    with pytest.raises(InvalidUsage, match="adapters must be >= 1"):
        named("decoupled").with_overrides(adapters=0)


def test_adapters_have_their_own_cores_and_group_commits() -> None:
    async def main(rt: Runtime) -> None:
        cfg = config("decoupled", adapters=2, cores=3)
        async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
            assert isinstance(coord, MultiAdapterCoordinator)
            assert (await _on(coord, 0).execute("CREATE TABLE t (a int)")).ok

            async def client(i: int) -> None:
                s = _on(coord, i % 2)
                for k in range(5):
                    assert (await s.execute(f"INSERT INTO t VALUES ({10 * i + k})")).ok

            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(client, i)
            each = coord.adapter_statistics()
            assert [s.loop_cores for s in each] == [3, 3]
            assert coord.statistics().loop_cores == 6
            assert all(s.writes_group_committed > 0 and s.loop_busy_s > 0 for s in each), each
            assert sum(s.writes for s in each) == coord.statistics().writes == 30

    run(main, seed=1, latency=latency_model())


@pytest.mark.parametrize("seed", SEEDS)
def test_a_write_acknowledged_on_one_adapter_is_visible_on_the_other(seed: int) -> None:
    async def main(rt: Runtime) -> None:
        async with build_coordinator(config("decoupled", adapters=2), virtual_env(rt), rt) as coord:
            a, b = _on(coord, 0), _on(coord, 1)
            assert (await a.execute("CREATE TABLE t (a int)")).ok
            stop = anyio.Event()

            async def noise(i: int) -> None:  # other writers keep both group commits busy
                s = _on(coord, i % 2)
                while not stop.is_set():
                    await s.execute(f"INSERT INTO t VALUES ({-1 - i})")
                    await rt.sleep(rt.rng.expovariate(1 / 0.0005))

            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(noise, i)
                for k in range(1, 16):
                    writer, reader = (a, b) if k % 2 else (b, a)
                    w = await writer.execute(f"INSERT INTO t VALUES ({k})")
                    assert w.ok, w.error
                    r = await reader.execute(f"SELECT count(*) FROM t WHERE a = {k}")
                    assert r.ok, r.error
                    assert r.rows == ((1,),), f"stale read across adapters: {w} then {r}"
                    assert r.read_ts is not None
                    assert w.write_ts is not None
                    assert r.read_ts >= w.write_ts
                stop.set()

    try:
        run(main, seed=seed, latency=latency_model())
    except BaseException as exc:
        exc.add_note(_replay("visible", seed))
        raise


@pytest.mark.parametrize("seed", SEEDS)
def test_concurrent_inserts_on_two_adapters_land_exactly_once(seed: int) -> None:
    async def main(rt: Runtime) -> None:
        async with build_coordinator(config("decoupled", adapters=2), virtual_env(rt), rt) as coord:
            assert isinstance(coord, MultiAdapterCoordinator)
            assert (await _on(coord, 0).execute("CREATE TABLE t (a int)")).ok
            assert (await _on(coord, 1).execute("CREATE TABLE u (a int)")).ok
            acked: list[int] = []

            async def client(i: int) -> None:
                s = _on(coord, i % 2)
                for k in range(20):
                    v = 1000 * i + k
                    r = await s.execute(f"INSERT INTO t VALUES ({v})")
                    assert r.ok, r.error  # a lost race is retried, never surfaced
                    acked.append(v)
                    if k % 3 == 0:
                        assert (await s.execute(f"INSERT INTO u VALUES ({v})")).ok
                    await rt.sleep(rt.rng.expovariate(1 / 0.0003))

            async with anyio.create_task_group() as tg:
                for i in range(8):
                    tg.start_soon(client, i)
            r = await _on(coord, 1).execute("SELECT a FROM t")
            assert r.ok, r.error
            got = sorted(int(str(row[0])) for row in r.rows)
            assert got == sorted(acked)  # none lost, none twice
            stats = coord.statistics()
            assert stats.lost_races > 0, "the adapters' appends never raced: the test proves nothing"

    try:
        run(main, seed=seed, latency=latency_model())
    except BaseException as exc:
        exc.add_note(_replay("exactly_once", seed))
        raise


@pytest.mark.parametrize("seed", SEEDS)
def test_updates_on_two_adapters_share_one_write_lock(seed: int) -> None:
    """Read-then-write increments from both adapters: none is lost."""

    async def main(rt: Runtime) -> None:
        async with build_coordinator(config("decoupled", adapters=2), virtual_env(rt), rt) as coord:
            s = _on(coord, 0)
            assert (await s.execute("CREATE TABLE c (k int, v int)")).ok
            assert (await s.execute("INSERT INTO c VALUES (0, 0)")).ok

            async def client(i: int) -> None:
                s = _on(coord, i % 2)
                for _ in range(5):
                    r = await s.execute("UPDATE c SET v = v + 1 WHERE k = 0")
                    assert r.ok, r.error
                    assert r.rows_affected == 1

            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(client, i)
            r = await _on(coord, 1).execute("SELECT v FROM c")
            assert r.rows == ((20,),), r

    try:
        run(main, seed=seed, latency=latency_model())
    except BaseException as exc:
        exc.add_note(_replay("write_lock", seed))
        raise


@pytest.mark.parametrize("seed", SEEDS)
def test_ddl_on_one_adapter_is_visible_on_the_other(seed: int) -> None:
    async def main(rt: Runtime) -> None:
        async with build_coordinator(config("decoupled", adapters=2), virtual_env(rt), rt) as coord:
            a, b = _on(coord, 0), _on(coord, 1)
            for n in range(5):
                ddl, other = (a, b) if n % 2 == 0 else (b, a)
                r = await ddl.execute(f"CREATE TABLE foo{n} (a int, b text)")
                assert r.ok, r.error
                r = await other.execute(f"INSERT INTO foo{n} VALUES ({n}, 'x')")
                assert r.ok, f"insert-unknown-table across adapters: {r.error}"
                r = await ddl.execute(f"SELECT * FROM foo{n}")
                assert r.rows == ((n, "x"),), f"stale-read across adapters: {r}"
                r = await other.execute(f"CREATE INDEX foo{n}_idx ON foo{n} (a)")
                assert r.ok, r.error
                r = await ddl.execute(f"SELECT b FROM foo{n} WHERE a = {n}")
                assert r.rows == (("x",),), f"index query across adapters: {r}"
                assert (await ddl.execute(f"DROP INDEX foo{n}_idx")).ok
                assert (await other.execute(f"DROP TABLE foo{n}")).ok
                r = await ddl.execute(f"SELECT * FROM foo{n}")
                assert r.code == "42P01", f"dropped-object-visible across adapters: {r}"

    try:
        run(main, seed=seed, latency=latency_model())
    except BaseException as exc:
        exc.add_note(_replay("ddl", seed))
        raise


def _select_one_ops(adapters: int, *, clients: int = 64, window_s: float = 0.2) -> int:
    """select-one statements completed in `window_s` simulated seconds."""

    async def main(rt: Runtime) -> int:
        cfg = config("decoupled", adapters=adapters, cores=1)
        async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
            setup = coord.connect()
            assert (await setup.execute("CREATE TABLE t0 (a int)")).ok
            assert (await setup.execute("INSERT INTO t0 VALUES (1)")).ok
            done = [0]
            deadline = rt.now() + window_s

            async def client() -> None:
                s = coord.connect()
                while rt.now() < deadline:
                    r = await s.execute("SELECT * FROM t0 WHERE a = 1")
                    assert r.ok, r.error
                    done[0] += rt.now() <= deadline

            async with anyio.create_task_group() as tg:
                for _ in range(clients):
                    tg.start_soon(client)
            return done[0]

    return run(main, seed=7, latency=latency_model())


def test_two_adapters_serve_more_select_one_than_one_at_64_clients() -> None:
    one, two = _select_one_ops(1), _select_one_ops(2)
    assert two > 1.3 * one, (one, two)
