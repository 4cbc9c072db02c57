"""Pinned regression tests, one per issue a seed found, named after the anomaly.

Each is `xfail(strict=True)` while its issue is open (reported to the lead with
the seed and command in the reason): the day a fix lands the test passes, the
strict xfail turns that into a failure, and the marker must go — the test then
guards the fix.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import anyio
import pytest

from coordinator.config import named
from coordinator.environment import Environment
from coordinator.factory import build_coordinator
from sim.history.capture import RecordingSession, event_sink
from sim.history.checker import check_history
from sim.history.checker.verdict import Outcome
from sim.history.recorder import HistoryRecorder
from sim.nemesis.anomalies import run_scenario, run_spec
from sim.nemesis.anomaly_scenarios import latency_model
from sim.nemesis.anomaly_spec import default_spec
from sim.nemesis.plan import FaultPlan
from sim.runtime.core import run

if TYPE_CHECKING:
    from sim.runtime.core import Runtime
    from tests.sim.nemesis.conftest import Seeds

pytestmark = pytest.mark.virtual


def test_info_add_without_catalog_ts_is_not_a_whitebox_anomaly() -> None:
    """Was: checker 3 (whitebox) dropped an `info` add that carried no catalog_ts
    (its statement was cut off by the crash), so reads that saw its element
    were flagged. It now lands in the incarnation whose read saw it."""
    history, events = run_scenario("crash-restart", "event-loop", 1)
    report = check_history(history, events)
    assert report.outcome is Outcome.VALID, report.names


def _insert_racing_drop(seed: int) -> HistoryRecorder:
    """c1 creates t; c2 inserts into t while c3 drops it."""

    async def main(rt: Runtime) -> HistoryRecorder:
        rec = HistoryRecorder(rt.now)
        env = Environment(rt)
        async with build_coordinator(named("event-loop"), env, rt, events=event_sink(rec)) as coord:
            c1, c2, c3 = (RecordingSession(coord.connect(), rec, client=f"c{i}") for i in (1, 2, 3))
            for n in range(4):
                await c1.execute(f"CREATE TABLE t{n} (a int)")

                async def insert(n: int = n) -> None:
                    await rt.sleep(rt.rng.uniform(0, 0.002))
                    await c2.execute(f"INSERT INTO t{n} VALUES ({n})")

                async def drop(n: int = n) -> None:
                    await rt.sleep(rt.rng.uniform(0, 0.002))
                    await c3.execute(f"DROP TABLE t{n}")

                async with anyio.create_task_group() as tg:
                    tg.start_soon(insert)
                    tg.start_soon(drop)
        return rec

    return run(main, seed=seed, latency=latency_model())


def test_insert_racing_drop_table() -> None:
    """Was: an INSERT racing a DROP failed 42P01 at write time but carried the
    catalog_ts it was planned at (where the table exists), so the whitebox
    checker flagged a serializable history. It now carries the catalog time at which
    storage found the table gone."""
    rec = _insert_racing_drop(20)
    history = rec.history()
    assert any(history.op(i).error_code == "42P01" for i in range(history.n))
    report = check_history(history, rec.events())
    assert report.outcome is Outcome.VALID, report.names


async def _stop_with_statements_in_flight(rt: Runtime) -> list[str]:
    env = Environment(rt)
    outcomes: list[str] = []
    # The task group outlives the coordinator: its clients' statements are in
    # flight when the coordinator stops.
    async with (
        anyio.create_task_group() as tg,
        build_coordinator(named("decoupled"), env, rt) as coord,
    ):
        assert (await coord.connect().execute("CREATE TABLE t (a int)")).ok

        async def client(k: int) -> None:
            s = coord.connect()
            for i in range(20):
                for sql in (f"INSERT INTO t VALUES ({k * 100 + i})", "SELECT * FROM t"):
                    try:
                        r = await s.execute(sql)
                    except Exception as exc:
                        outcomes.append(type(exc).__name__)
                        return
                    if not r.ok:
                        outcomes.append(str(r.code))
                        return

        for k in range(4):
            tg.start_soon(client, k)
        await rt.sleep(0.01)
    return outcomes


def test_decoupled_stop_answers_statements_in_flight() -> None:
    """Was: reads raised InvalidUsage ('BatchingOracle closed before answering')
    and pending writes never returned. Now every statement in flight answers:
    57P01 for a read, 08007 (indeterminate) for a write that may have landed."""
    outcomes = run(_stop_with_statements_in_flight, seed=1, latency=latency_model())
    assert len(outcomes) == 4, outcomes
    assert set(outcomes) <= {"57P01", "08007"}, outcomes


def _zombie_insert(config: str) -> tuple[str | None, list[str]]:
    """A creates t; B starts on the same stores and drops t; A inserts into t.
    Returns the insert's error code and the checker's anomaly names."""

    async def main(rt: Runtime) -> tuple[str | None, list[str]]:
        rec = HistoryRecorder(rt.now)
        env = Environment(rt)
        sink = event_sink(rec)
        async with build_coordinator(named(config), env, rt, events=sink, actor="a") as a:
            sa = RecordingSession(a.connect(), rec, client="c1")
            assert (await sa.execute("CREATE TABLE t (a int)")).ok
            assert (await sa.execute("INSERT INTO t VALUES (1)")).ok
            async with build_coordinator(
                named(config), env, rt.derive("b"), events=sink, actor="b"
            ) as b:
                sb = RecordingSession(b.connect(), rec, client="c2")
                assert (await sb.execute("DROP TABLE t")).ok
                r = await sa.execute("INSERT INTO t VALUES (2)")
                await sb.execute("SELECT * FROM t")
        return r.code, check_history(rec.history(), rec.events()).names

    return run(main, seed=1, latency=latency_model())


def test_zombie_insert_into_dropped_table_decoupled() -> None:
    code, names = _zombie_insert("decoupled")
    assert code == "42P01", code
    assert not names, names


@pytest.mark.parametrize("config", ["event-loop", "event-loop+pg-oracle"])
def test_zombie_insert_into_dropped_table(config: str) -> None:
    """Was: the deposed event-loop coordinator acknowledged INSERT INTO a table
    the new one had dropped. Dropped tables' shards are now finalized (their
    upper closed), so the zombie's append is fenced."""
    code, names = _zombie_insert(config)
    print(f"{config}: insert after drop -> {code}; checker: {names}")
    assert code is not None, f"acknowledged an insert into a dropped table; checker: {names}"


def test_store_errors_do_not_crash_the_coordinator() -> None:
    """Was: the storage controller's compaction loop let persist's Indeterminate
    escape and took the coordinator down (`coordsim anomalies run ddl-dml
    --config event-loop+pg-oracle --seed 187`)."""
    history, events = run_scenario("ddl-dml", "event-loop+pg-oracle", 187)
    assert check_history(history, events).outcome is Outcome.VALID


def test_read_ts_below_since_waits_for_the_oracle(seeds: Seeds) -> None:
    """Was: the first group commit (or one after an idle gap longer than the
    compaction window) moved a table's upper — and so, by compaction, its since —
    past a read_ts the oracle handed out before the commit's apply_write; the
    SELECT failed with XX000 'as_of … is below its since' (`uv run coordsim
    anomalies run ddl-dml --config event-loop+pg-oracle --seed 0 --clients 2
    --size 2 --faults none`, found by the real-mode helper). A peek now reads at
    the later of read_ts and the since, held until answered, and its answer
    waits for the oracle to reach that time (coordinator/peeks.py)."""
    for config in ("event-loop", "event-loop+pg-oracle", "decoupled"):
        for seed in seeds(4):
            spec = replace(
                default_spec("ddl-dml", config, seed), clients=2, size=2, faults=FaultPlan()
            )
            history, events = run_spec(spec)
            internal = [
                o for o in (history.op(i) for i in range(history.n)) if o.error_code == "XX000"
            ]
            assert not internal, f"{internal}\n    replay: {spec.command()}"
            assert check_history(history, events).outcome is Outcome.VALID
