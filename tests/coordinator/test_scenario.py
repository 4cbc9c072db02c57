"""Seed 001's scenario on every configuration, many seeds, random client timing:
c1 CREATE TABLE foo, c2 INSERT INTO foo, c1 SELECT * FROM foo — each starting
after the previous returned — never reports "foo does not exist" and the SELECT
sees the row. The same with an index created and queried right away (the fourth
anomaly). Background clients keep the system busy so interleavings vary."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

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


async def _pause(rt: Runtime) -> None:
    await rt.sleep(rt.rng.expovariate(1 / 0.001))


async def _background(rt: Runtime, coord: Coordinator, i: int, stop: anyio.Event) -> None:
    s = coord.connect()
    assert (await s.execute(f"CREATE TABLE bg{i} (a int)")).ok
    k = 0
    while not stop.is_set():
        k += 1
        await s.execute(f"INSERT INTO bg{i} VALUES ({k})")
        await s.execute(f"SELECT count(*) FROM bg{i}")
        await _pause(rt)


async def _scenario(rt: Runtime, coord: Coordinator, n: int) -> None:
    c1, c2 = coord.connect(), coord.connect()
    r = await c1.execute(f"CREATE TABLE foo{n} (a int, b text)")
    assert r.ok, r.error
    await _pause(rt)
    r = await c2.execute(f"INSERT INTO foo{n} VALUES ({n}, 'x')")
    assert r.ok, f"insert-unknown-table: {r.error}"
    await _pause(rt)
    r = await c1.execute(f"SELECT * FROM foo{n}")
    assert r.ok, f"select-unknown-table: {r.error}"
    assert r.rows == ((n, "x"),), f"stale-read: {r}"
    # The fourth anomaly: an index created and queried right away.
    r = await c2.execute(f"CREATE INDEX foo{n}_idx ON foo{n} (a)")
    assert r.ok, r.error
    await _pause(rt)
    r = await c1.execute(f"SELECT b FROM foo{n} WHERE a = {n}")
    assert r.ok, f"index query failed: {r.error}"
    assert r.rows == (("x",),), f"stale-read through the index: {r}"


def _run(name: str, seed: int) -> None:
    async def main(rt: Runtime) -> None:
        async with build_coordinator(config(name), virtual_env(rt), rt) as coord:
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(_background, rt, coord, i, stop)
                for n in range(4):
                    await _scenario(rt, coord, n)
                stop.set()

    try:
        run(main, seed=seed, latency=latency_model())
    except BaseException as exc:
        exc.add_note(
            f"replay: uv run pytest 'tests/coordinator/test_scenario.py' -k '{name} and {seed}'"
        )
        raise


@pytest.mark.parametrize("name", CONFIG_NAMES)
@pytest.mark.parametrize("seed", range(8))
def test_seed001_scenario(name: str, seed: int) -> None:
    _run(name, seed)


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIG_NAMES)
@pytest.mark.parametrize("seed", range(8, 200))
def test_seed001_scenario_many_seeds(name: str, seed: int) -> None:
    _run(name, seed)


def test_statements_end_to_end() -> None:
    """Every statement kind on every configuration, checked against expectations."""

    async def main(rt: Runtime) -> None:
        for name in CONFIG_NAMES:
            async with build_coordinator(config(name), virtual_env(rt.derive(name)), rt) as coord:
                c1, c2 = coord.connect(), coord.connect()
                assert (await c1.execute("CREATE TABLE foo (a int, b text)")).ok
                assert (await c2.execute("INSERT INTO foo VALUES (1, 'x'), (2, 'y')")).ok
                assert (
                    await c1.execute("CREATE MATERIALIZED VIEW mv AS SELECT count(*) FROM foo")
                ).ok
                r = await c2.execute("SELECT * FROM mv")
                assert r.rows == ((2,),), (name, r)
                r = await c2.execute("UPDATE foo SET a = a + 10 WHERE b = 'x'")
                assert r.rows_affected == 1, (name, r)
                r = await c1.execute("SELECT a FROM foo WHERE a > 5")
                assert r.rows == ((11,),), (name, r)
                r = await c1.execute("DELETE FROM foo WHERE a = 2")
                assert r.rows_affected == 1, (name, r)
                assert (await c1.execute("SELECT * FROM mv")).rows == ((1,),)
                assert (await c1.execute("CREATE CLUSTER c2 (REPLICATION FACTOR = 2)")).ok
                assert (await c1.execute("CREATE INDEX i2 IN CLUSTER c2 ON foo")).ok
                assert (await c2.execute("SELECT * FROM foo")).rows == ((11, "x"),)
                assert (await c1.execute("DROP CLUSTER c2")).code == "2BP01"
                assert (await c1.execute("DROP INDEX i2")).ok
                assert (await c1.execute("DROP CLUSTER c2")).ok
                assert (await c1.execute("DROP MATERIALIZED VIEW mv")).ok
                assert (await c1.execute("DROP TABLE foo")).ok
                assert (await c2.execute("SELECT * FROM foo")).code == "42P01"
                assert (await c2.execute("INSERT INTO foo VALUES (1, 'x')")).code == "42P01"
                assert (await c2.execute("INSERT INTO nope VALUES (1)")).code == "42P01"
                assert (await c2.execute("CREATE TABLE t (a int)")).ok
                assert (await c2.execute("CREATE TABLE t (a int)")).code == "42P07"
                assert (await c2.execute("INSERT INTO t VALUES ('text')")).code == "42804"
                assert (await c2.execute("SELECT nope FROM t")).code == "42703"
                assert (await c2.execute("SELEKT")).code == "42601"

    run(main, seed=0, latency=latency_model())
