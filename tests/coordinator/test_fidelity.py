"""Model fidelity (issue 18): timestamps chosen at or above the since and
linearized, the constant-query fast path, oracle calls on or off the loop,
and loop messages counted."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import anyio
import pytest

from coordinator.config import OracleCalls
from coordinator.running import RunningCoordinator
from sim.model.experiments import latency_model, subscribe_starts, victim_select_one
from sim.runtime.core import run
from sim.runtime.errors import InvalidUsage
from sim.runtime.events import EventSink, installed
from tests.coordinator.harness import CONFIG_NAMES, build_coordinator, config, virtual_env

if TYPE_CHECKING:
    from pathlib import Path

    from coordinator.session import Session
    from sim.runtime.core import Runtime

pytestmark = pytest.mark.virtual


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_select_constant_takes_the_fast_path(name: str) -> None:
    """`SELECT 1` is answered by the coordinator alone: no oracle call, no peek."""

    async def main(rt: Runtime) -> None:
        async with build_coordinator(config(name), virtual_env(rt), rt) as coord:
            s = coord.connect()
            before = coord.statistics()
            r = await s.execute("SELECT 1")
            assert r.ok, r.error
            assert r.rows == ((1,),)
            assert r.columns == ("?column?",)
            r = await s.execute("SELECT 2 * 3 AS six, 'x'")
            assert (r.rows, r.columns) == (((6, "x"),), ("six", "?column?"))
            after = coord.statistics()
            assert after.oracle_calls == before.oracle_calls
            assert after.peeks == before.peeks
            assert (await s.execute("SELECT 'a' + 1")).code == "42804"

    run(main, seed=1, latency=latency_model())


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_peeks_under_a_500ms_oracle_read_at_the_since_and_are_linearized(name: str) -> None:
    """With the oracle's round trip at 500 ms its read_ts lags the tables'
    uppers (and so their sinces) by more than the compaction window. No peek
    may fail for it, and an answer read above the oracle's read_ts is held
    back until the oracle reaches it: once returned, read_ts is at least the
    answer's timestamp."""

    async def main(rt: Runtime) -> None:
        async with build_coordinator(config(name), virtual_env(rt), rt) as coord:
            assert isinstance(coord, RunningCoordinator)
            setup = coord.connect()
            # t is read through its index (a replica's arrangement), u
            # straight from persist (the fast path of a table peek).
            for sql in ("CREATE TABLE t (a int)", "CREATE DEFAULT INDEX ON t", "INSERT INTO t VALUES (1)",
                        "CREATE TABLE u (a int)", "INSERT INTO u VALUES (1)"):
                assert (await setup.execute(sql)).ok
            stop = anyio.Event()
            checked = [0]

            async def writer() -> None:
                s = coord.connect()
                k = 1
                while not stop.is_set():
                    k += 1
                    assert (await s.execute(f"INSERT INTO {'tu'[k % 2]} VALUES ({k})")).ok

            async def reader(source: str) -> None:
                s = coord.connect()
                for _ in range(8):
                    r = await s.execute(f"SELECT * FROM {source} WHERE a = 1")
                    assert r.ok, r.error
                    assert r.rows == ((1,),)
                    assert r.read_ts is not None
                    assert await coord.incarnation.oracle.read_ts() >= r.read_ts
                    checked[0] += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(writer)
                async with anyio.create_task_group() as readers:
                    for source in ("t", "u") * 4:
                        readers.start_soon(reader, source)
                stop.set()
            assert checked[0] == 64

    run(main, seed=2, latency=latency_model({"oracle.pg": 500.0, "stash.txn": 500.0}))


def test_oracle_calls_on_the_loop_stall_a_victim_query() -> None:
    """Seed 000 / PR #37363: with the group commit's oracle calls awaited in
    loop handlers (peek_write_ts, write_ts, read_ts), every commit blocks the
    loop for oracle round trips, and the keepalive tick adds a commit of its
    own every second (it takes no permit), so the loop is blocked nearly all
    the time: each of the victim `SELECT 1`'s loop messages waits out a block,
    and its median is seconds. Off the loop it waits for nothing."""
    on, off = (
        victim_select_one(
            config("event-loop+pg-oracle", oracle_calls=calls), duration_s=120.0, overrides_ms={"oracle.pg": 500.0}
        )
        for calls in (OracleCalls.ON_LOOP, OracleCalls.OFF_LOOP)
    )
    print(f"victim SELECT 1, 500 ms oracle: on-loop {on}, off-loop {off}")
    assert on.victim.n >= 20
    assert off.victim.n >= 1000
    assert on.victim.p50_ms > 1000.0
    assert on.victim.mean_ms > 1000 * off.victim.mean_ms
    assert off.victim.p95_ms < 1.0


def test_subscribe_read_ts_on_the_loop_serializes_concurrent_starts() -> None:
    """PR #37355: with SUBSCRIBE's linearized read_ts awaited on the loop,
    eight started together answer one after another (the last after at least
    eight round trips); off the loop they share batched read_ts calls."""
    on, off = (
        subscribe_starts(config("event-loop+pg-oracle", oracle_calls=calls), subscribers=8,
                         overrides_ms={"oracle.pg": 500.0})
        for calls in (OracleCalls.ON_LOOP, OracleCalls.OFF_LOOP)
    )
    print(f"8 SUBSCRIBEs at once, 500 ms oracle: on-loop {on}, off-loop {off}")
    assert on.starts.n == off.starts.n == 8 * on.rounds
    assert on.last_ms >= 8 * 500.0
    assert off.last_ms < on.last_ms / 2


def test_a_postgres_oracles_peeks_read_off_the_loop_in_every_era(tmp_path: Path) -> None:
    """A peek's read_ts is awaited on the loop only with the in-memory oracle
    (seed 000); with a Postgres oracle, Materialize's peek path had its own
    LinearizeTimestamp stage in the on-loop era too (PR #37355's motivation),
    so eight peeks started together share batched read_ts calls, where
    awaiting them in loop handlers would send them one by one."""
    events = tmp_path / "events.jsonl"

    async def main(rt: Runtime) -> None:
        cfg = config("event-loop+pg-oracle", oracle_calls=OracleCalls.ON_LOOP)
        async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
            assert (await coord.connect().execute("CREATE TABLE t (a int)")).ok
            sessions = [coord.connect() for _ in range(8)]

            async def peek(s: Session) -> None:
                r = await s.execute("SELECT * FROM t")
                assert r.ok, r.error

            async with anyio.create_task_group() as tg:
                for s in sessions:
                    tg.start_soon(peek, s)

    sink = EventSink(file=events)
    with installed(sink):
        run(main, seed=1, latency=latency_model({"oracle.pg": 500.0}))
    sink.close()
    sizes = [e["batch_size"] for e in map(json.loads, events.read_text().splitlines()) if e["event"] == "read_ts.batch"]
    assert max(sizes) >= 4, sizes


def test_overlapping_commits_need_the_oracle_on_the_loop() -> None:
    """Off the loop, a later write_ts could reach storage first and fence the
    coordinator: the combination is refused, not run."""
    with pytest.raises(InvalidUsage, match="needs oracle_calls = on-loop"):
        config("event-loop", oracle_calls=OracleCalls.OFF_LOOP)
    assert config("event-loop", oracle_calls=OracleCalls.OFF_LOOP, commits_in_flight=1).commits_in_flight == 1


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_loop_messages_are_counted_on_the_event_loop_only(name: str) -> None:
    async def main(rt: Runtime) -> None:
        async with build_coordinator(config(name), virtual_env(rt), rt) as coord:
            s = coord.connect()
            assert (await s.execute("CREATE TABLE t (a int)")).ok
            before = coord.statistics()
            for k in range(10):
                assert (await s.execute(f"INSERT INTO t VALUES ({k})")).ok
                assert (await s.execute("SELECT * FROM t WHERE a = 1")).ok
            after = coord.statistics()
            per_statement = (after.loop_messages - before.loop_messages) / 20
            if name == "decoupled":
                assert per_statement == 0
            else:
                # A statement's own message, plus a trigger and a completion
                # for an insert, a response (and a timestamp) for a select.
                assert per_statement >= 2

    run(main, seed=3, latency=latency_model())


@pytest.mark.parametrize("name", ["event-loop+pg-oracle", "decoupled"])
def test_ddl_cpu_grows_with_the_catalog(name: str) -> None:
    """A catalog transaction walks the catalog (Materialize's DDL audit):
    each DDL's CPU grows by `ddl_per_entry` per entry, on the loop or the
    adapter's cores; without the per-entry cost, padding changes nothing."""
    from dataclasses import replace

    from coordinator.config import DDL_S_PER_CATALOG_ENTRY
    from sim.model.experiments import ddl_latency

    cfg = config(name)
    empty, padded = (ddl_latency(cfg, padding=n, reps=40) for n in (0, 500))
    grew_ms = padded.create.mean_ms - empty.create.mean_ms
    flat = replace(cfg, costs=replace(cfg.costs, ddl_per_entry=0.0))
    e0, p0 = (ddl_latency(flat, padding=n, reps=40) for n in (0, 500))
    print(f"{name}: CREATE TABLE mean {empty.create.mean_ms:.3f} -> {padded.create.mean_ms:.3f} ms with 500 tables; "
          f"without the per-entry cost {e0.create.mean_ms:.3f} -> {p0.create.mean_ms:.3f} ms")
    # A CREATE TABLE is a dozen drawn round trips (`ddl_round_trips`): the
    # mean of 40 moves by a tenth or two of a ms between runs (measured over
    # 100 DDLs at 0, 500 and 1,000 tables without the per-entry cost: within
    # 0.2 ms, no trend), so 0.6 ms is about 3 standard errors of the difference.
    assert grew_ms == pytest.approx(500 * DDL_S_PER_CATALOG_ENTRY * 1000, abs=0.6)
    assert abs(p0.create.mean_ms - e0.create.mean_ms) < 0.6
