"""SUBSCRIBE (issue 36, item 5) on every virtual configuration: the event
loop (both oracles), the decoupled adapter, and two decoupled adapters with
the subscriber on one and the writers on the other; and in real mode, one
decoupled process and two adapter processes (whose subscriptions the
deployment's process serves). A subscription's snapshot is the table at its
`as_of`, strict serializable; then every acknowledged write arrives once, at
its `write_ts`, in timestamp order, in batches that tile time with their
progress."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

import anyio
import pytest

from coordinator.adapters import MultiAdapterCoordinator
from coordinator.config import named
from coordinator.process_adapters import ProcessAdaptersCoordinator
from coordinator.sql import parse, render
from coordinator.statements import SqlError, Subscribe
from sim.runtime.core import Runtime, run
from tests.coordinator.harness import build_coordinator, config, latency_model, virtual_env

if TYPE_CHECKING:

    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment
    from coordinator.session import Coordinator, Result, Session
    from coordinator.subscribe import SubscribeBatch

#: (configuration, adapters): every architecture, and two adapters.
SETUPS = (("event-loop", 1), ("event-loop+pg-oracle", 1), ("decoupled", 1), ("decoupled", 2))
IDS = [f"{name}x{n}" for name, n in SETUPS]


def _sessions(coord: Coordinator) -> tuple[Session, Session]:
    """A subscriber's and a writer's session: on different adapters when
    there are several."""
    if isinstance(coord, MultiAdapterCoordinator):
        return coord.connect(adapter=1), coord.connect(adapter=2)
    return coord.connect(), coord.connect()


def _ok(r: Result) -> Result:
    assert r.ok, r.error
    return r


def _check_tiling(as_of: int, batches: list[SubscribeBatch]) -> None:
    """Each batch starts where the previous ended; every update is inside
    its batch, in (time, row) order."""
    lower = as_of
    for b in batches:
        assert b.lower == lower, (b, lower)
        assert b.upper > b.lower, b
        assert all(b.lower <= ts < b.upper for ts, _, _ in b.updates), b
        assert [u[0] for u in b.updates] == sorted(u[0] for u in b.updates), b
        lower = b.upper


@pytest.mark.virtual
@pytest.mark.parametrize(("name", "adapters"), SETUPS, ids=IDS)
def test_subscribe_streams_every_acknowledged_change_once(name: str, adapters: int) -> None:
    async def main(rt: Runtime) -> None:
        cfg = config(name, adapters=adapters) if adapters > 1 else config(name)
        with anyio.fail_after(120):  # virtual seconds: a hang fails fast
            await body(rt, cfg)

    async def body(rt: Runtime, cfg: CoordinatorConfig) -> None:
        async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
            sub_s, w = _sessions(coord)
            _ok(await w.execute("CREATE TABLE t (a int)"))
            before = _ok(await w.execute("INSERT INTO t VALUES (1), (2), (2)"))
            async with sub_s.subscribe("SUBSCRIBE TO t WITH (PROGRESS)") as sub:
                assert sub.as_of is not None
                assert before.write_ts is not None
                assert sub.as_of >= before.write_ts  # strict serializable: after the acknowledged insert
                assert sub.columns == ("a",)
                batches: list[SubscribeBatch] = []
                first = await anext(sub)
                batches.append(first)
                assert (first.lower, first.upper) == (sub.as_of, sub.as_of + 1)
                assert sorted((row, d) for _, row, d in first.updates) == [((1,), 1), ((2,), 2)]
                writes = [
                    _ok(await w.execute("INSERT INTO t VALUES (3)")),
                    _ok(await w.execute("DELETE FROM t WHERE a = 1")),
                    _ok(await w.execute("UPDATE t SET a = a + 10 WHERE a = 3")),
                ]
                last = max(r.write_ts or 0 for r in writes)
                with anyio.fail_after(30):
                    async for b in sub:
                        batches.append(b)
                        if b.upper > last and not b.updates:  # progress alone: the periodic commit
                            break
            _check_tiling(sub.as_of, batches)
            got = Counter((ts, row, d) for b in batches[1:] for ts, row, d in b.updates)
            t3, t1, t13 = (r.write_ts for r in writes)
            assert got == Counter({(t3, (3,), 1): 1, (t1, (1,), -1): 1, (t13, (3,), -1): 1, (t13, (13,), 1): 1})

    run(main, seed=7, latency=latency_model())


@pytest.mark.virtual
@pytest.mark.parametrize(("name", "adapters"), SETUPS, ids=IDS)
def test_subscribe_errors_reach_the_client(name: str, adapters: int) -> None:
    async def main(rt: Runtime) -> None:
        cfg = config(name, adapters=adapters) if adapters > 1 else config(name)
        with anyio.fail_after(120):  # virtual seconds: a hang fails fast
            await body(rt, cfg)

    async def body(rt: Runtime, cfg: CoordinatorConfig) -> None:
        async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
            sub_s, w = _sessions(coord)
            with pytest.raises(SqlError) as unknown:
                async with sub_s.subscribe("SUBSCRIBE nope"):
                    pass
            assert unknown.value.code.value == "42P01"
            r = await sub_s.execute("SUBSCRIBE nope")
            assert r.code == "0A000"
            _ok(await w.execute("CREATE TABLE t (a int)"))
            _ok(await w.execute("CREATE MATERIALIZED VIEW v AS SELECT count(*) FROM t"))
            with pytest.raises(SqlError) as view:
                async with sub_s.subscribe("SUBSCRIBE v"):
                    pass
            assert view.value.code.value == "0A000"
            # A table dropped under its subscription ends it with 42P01.
            async with sub_s.subscribe("SUBSCRIBE t") as sub:
                _ok(await w.execute("DROP MATERIALIZED VIEW v"))
                _ok(await w.execute("DROP TABLE t"))
                with pytest.raises(SqlError) as dropped, anyio.fail_after(30):
                    async for _ in sub:
                        pass
                assert dropped.value.code.value == "42P01"

    run(main, seed=3, latency=latency_model())


@pytest.mark.virtual
@pytest.mark.parametrize(("name", "adapters"), SETUPS, ids=IDS)
def test_subscribe_up_to_ends_and_shutdown_ends_with_57p01(name: str, adapters: int) -> None:
    async def main(rt: Runtime) -> None:
        cfg = config(name, adapters=adapters) if adapters > 1 else config(name)
        with anyio.fail_after(120):  # virtual seconds: a hang fails fast
            await body(rt, cfg)

    async def body(rt: Runtime, cfg: CoordinatorConfig) -> None:
        async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
            sub_s, w = _sessions(coord)
            _ok(await w.execute("CREATE TABLE t (a int)"))
            a = _ok(await w.execute("INSERT INTO t VALUES (1)"))
            b = _ok(await w.execute("INSERT INTO t VALUES (2)"))
            assert a.write_ts is not None
            assert b.write_ts is not None
            # AS OF the first insert, UP TO just past the second: a finite stream.
            bounded = f"SUBSCRIBE t WITH (SNAPSHOT = true) AS OF {a.write_ts} UP TO {b.write_ts + 1}"
            async with sub_s.subscribe(bounded) as sub:
                assert sub.as_of == a.write_ts
                with anyio.fail_after(30):
                    batches = [x async for x in sub]
            assert batches[0].updates == ((a.write_ts, (1,), 1),)
            assert batches[-1].upper == b.write_ts + 1
            assert [u for x in batches[1:] for u in x.updates] == [(b.write_ts, (2,), 1)]
            with pytest.raises(SqlError) as absurd:
                async with sub_s.subscribe(f"SUBSCRIBE t AS OF {b.write_ts} UP TO {a.write_ts}"):
                    pass
            assert absurd.value.code.value == "22023"
            held = sub_s.subscribe("SUBSCRIBE t WITH (SNAPSHOT = false)")
            await held.__aenter__()
            first = await anext(held)
            assert first.updates == ()
        with pytest.raises(SqlError) as gone, anyio.fail_after(30):
            async for _ in held:
                pass
        assert gone.value.code.value == "57P01"

    run(main, seed=5, latency=latency_model())


@pytest.mark.virtual
def test_a_crashed_adapter_ends_its_subscriptions_and_the_other_serves_on() -> None:
    async def main(rt: Runtime) -> None:
        with anyio.fail_after(120):
            async with build_coordinator(config("decoupled", adapters=2), virtual_env(rt), rt) as coord:
                assert isinstance(coord, MultiAdapterCoordinator)
                a, b = coord.connect(adapter=1), coord.connect(adapter=2)
                _ok(await b.execute("CREATE TABLE t (a int)"))
                async with a.subscribe("SUBSCRIBE t") as on_a, b.subscribe("SUBSCRIBE t") as on_b:
                    await anext(on_a)
                    await anext(on_b)
                    await coord.crash_adapter(0)
                    with pytest.raises(SqlError) as gone:
                        await anext(on_a)
                    assert gone.value.code.value == "57P01"
                    w = _ok(await b.execute("INSERT INTO t VALUES (5)"))
                    async for batch in on_b:
                        if batch.updates:
                            assert batch.updates == ((w.write_ts, (5,), 1),)
                            break

    run(main, seed=2, latency=latency_model())


def test_subscribe_parses_and_renders() -> None:
    cases = {
        "SUBSCRIBE t": Subscribe("t"),
        "subscribe to t with (progress, snapshot = false) as of 5 up to 9": Subscribe("t", False, True, 5, 9),
        'SUBSCRIBE TO "to" WITH (SNAPSHOT false)': Subscribe("to", snapshot=False),
    }
    for sql, stmt in cases.items():
        assert parse(sql) == stmt
        assert parse(render(stmt)) == stmt
    for bad in ("SUBSCRIBE", "SUBSCRIBE t WITH (foo)", "SUBSCRIBE t AS OF x", "SUBSCRIBE t WITH (PROGRESS = 1)"):
        with pytest.raises(SqlError) as e:
            parse(bad)
        assert e.value.code.value == "42601"


# --- real mode -----------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.anyio
@pytest.mark.parametrize("adapters", [1, 2])
async def test_subscribe_in_real_mode(env: Environment, adapters: int) -> None:
    cfg = replace(named("decoupled"), adapters=adapters)
    async with build_coordinator(cfg, env, Runtime(seed=1)) as coord:
        if adapters > 1:
            assert isinstance(coord, ProcessAdaptersCoordinator)
            sub_s, w = coord.connect(adapter=2), coord.connect(adapter=1)
        else:
            sub_s, w = coord.connect(), coord.connect()
        _ok(await w.execute("CREATE TABLE t (a int)"))
        first = _ok(await w.execute("INSERT INTO t VALUES (1)"))
        with anyio.fail_after(60):
            async with sub_s.subscribe("SUBSCRIBE t") as sub:
                assert sub.as_of is not None
                assert first.write_ts is not None
                assert sub.as_of >= first.write_ts
                snapshot = await anext(sub)
                assert [(row, d) for _, row, d in snapshot.updates] == [((1,), 1)]
                second = _ok(await w.execute("INSERT INTO t VALUES (2)"))
                got: list[tuple[int, tuple[object, ...], int]] = []
                async for b in sub:
                    got += b.updates
                    if b.upper > (second.write_ts or 0):
                        break
        assert got == [(second.write_ts, (2,), 1)]
