"""The mechanisms behind published numbers (issue 35), each tested by itself:
the loop's messages per statement, the group commit's oracle calls per era,
the pgwire frontend, the calibrated loop time per SELECT, and cores as a
sourced parameter that `--ablate` shows as its own step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from coordinator.config import LOOP_S_PER_SELECT, Costs, Frontend, OracleCalls, PeekStages
from coordinator.running import RunningCoordinator
from sim.compare.ablation import chain
from sim.load.latency_profile import profile_cores
from sim.load.run_config import DEFAULT_PROFILE, RunConfig
from sim.runtime.core import run
from sim.runtime.errors import InvalidUsage
from sim.runtime.latency import Constant, LatencyModel
from tests.coordinator.harness import build_coordinator, config, virtual_env

if TYPE_CHECKING:
    from pathlib import Path

    from coordinator.config import CoordinatorConfig
    from coordinator.session import Coordinator
    from sim.runtime.core import Runtime

pytestmark = pytest.mark.virtual


def _latency(**ms: float) -> LatencyModel:
    return LatencyModel({name.replace("_", "."): Constant(v / 1000) for name, v in ms.items()}, default=Constant(0.0))


def _messages(cfg: CoordinatorConfig, sql: str, *, setup: tuple[str, ...] = ()) -> float:
    """Loop messages one statement takes, alone on the loop (10 runs)."""

    async def main(rt: Runtime) -> float:
        async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
            s = coord.connect()
            for stmt in setup:
                assert (await s.execute(stmt)).ok
            before = coord.statistics().loop_messages
            for k in range(10):
                assert (await s.execute(sql.format(k=k))).ok
            return (coord.statistics().loop_messages - before) / 10

    result = run(main, seed=1, latency=_latency())
    assert isinstance(result, float)
    return result


@pytest.mark.parametrize(
    ("stages", "sql", "expected"),
    [
        # "A Small Coordinator": catalog_snapshot, execute, two peek_stage_ready,
        # controller_ready, commit.
        (PeekStages.STAGED, "SELECT * FROM t WHERE a = 1", 6),
        (PeekStages.STAGED, "SELECT 1", 4),  # no timestamp stage, no peek
        (PeekStages.STAGED, "INSERT INTO t VALUES ({k})", 5),  # + the group commit's trigger and completion
        (PeekStages.STAGED, "CREATE TABLE u{k} (a int)", 3),
        (PeekStages.COMBINED, "SELECT * FROM t WHERE a = 1", 3),  # execute, timestamp, response
        (PeekStages.COMBINED, "SELECT 1", 1),
    ],
)
def test_loop_messages_per_statement(stages: PeekStages, sql: str, expected: int) -> None:
    cfg = config("event-loop+pg-oracle", peek_stages=stages)
    # A peek that read above the oracle's read_ts (the table's since ran
    # ahead of it just after its creation) takes one more: its linearized finish.
    assert expected <= _messages(cfg, sql, setup=("CREATE TABLE t (a int)",)) < expected + 0.5


def test_a_staged_select_holds_the_loop_for_the_calibrated_time() -> None:
    """Fact select-throughput-loop-bound: about 5000 loop-bound SELECTs/s, so
    1/5000 s of loop time each, split over its six messages."""
    assert pytest.approx(200e-6) == LOOP_S_PER_SELECT
    cfg = config("event-loop+pg-oracle")

    async def main(rt: Runtime) -> float:
        async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
            s = coord.connect()
            assert (await s.execute("CREATE TABLE t (a int)")).ok
            assert (await s.execute("INSERT INTO t VALUES (1)")).ok
            before = coord.statistics().loop_busy_s
            for _ in range(20):
                r = await s.execute("SELECT * FROM t WHERE a = 1")
                assert r.rows == ((1,),)
            return (coord.statistics().loop_busy_s - before) / 20

    per_select = run(main, seed=1, latency=_latency())
    assert isinstance(per_select, float)
    assert per_select == pytest.approx(LOOP_S_PER_SELECT, rel=0.02)
    assert Costs().parse_plan < 100e-6  # the assumed weight, scaled to the calibrated level


def _oracle_ops(calls: OracleCalls) -> tuple[dict[str, int], float]:
    """One INSERT with every oracle statement at 100 ms: the backing oracle's
    calls by kind, and the loop's handler time (time the loop was blocked)."""
    cfg = config("event-loop+pg-oracle", oracle_calls=calls, group_commit_interval_s=3600.0)

    async def main(rt: Runtime) -> tuple[dict[str, int], float]:
        async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
            assert isinstance(coord, RunningCoordinator)
            s = coord.connect()
            assert (await s.execute("CREATE TABLE t (a int)")).ok
            oracle = coord.incarnation.oracle
            inner = getattr(getattr(oracle, "inner", oracle), "inner", oracle)
            stats = inner.statistics()
            before = {op: stats.op(op).start_count for op in ("peek_write_ts", "write_ts", "apply_write", "read_ts")}
            busy = coord.statistics().loop_busy_s
            assert (await s.execute("INSERT INTO t VALUES (1)")).ok
            stats = inner.statistics()
            after = {op: stats.op(op).start_count - n for op, n in before.items()}
            return after, coord.statistics().loop_busy_s - busy

    result = run(main, seed=1, latency=_latency(oracle_pg=100.0))
    assert isinstance(result, tuple)
    return result


def test_group_commit_oracle_calls_before_pr_37363_block_the_loop_three_times() -> None:
    ops, blocked = _oracle_ops(OracleCalls.ON_LOOP)
    assert ops == {"peek_write_ts": 1, "write_ts": 1, "apply_write": 1, "read_ts": 1}
    # peek_write_ts, write_ts and read_ts awaited in loop handlers; apply_write in a task.
    assert blocked == pytest.approx(0.3, abs=0.01)


def test_group_commit_oracle_calls_after_pr_37363_stay_off_the_loop() -> None:
    ops, blocked = _oracle_ops(OracleCalls.OFF_LOOP)
    assert ops == {"peek_write_ts": 1, "write_ts": 1, "apply_write": 1, "read_ts": 0}
    assert blocked < 0.01


@pytest.mark.parametrize("name", ["event-loop+pg-oracle", "decoupled"])
def test_the_pgwire_frontend_costs_one_draw_per_statement(name: str) -> None:
    """`frontend = pgwire`: a `SELECT 1` pays `frontend.pgwire` (here 4 ms)
    outside the coordinator; in process it pays nothing of it."""

    async def latency(rt: Runtime, coord: Coordinator) -> float:
        s = coord.connect()
        t0 = rt.now()
        assert (await s.execute("SELECT 1")).ok
        return rt.now() - t0

    def one(frontend: Frontend) -> float:
        async def main(rt: Runtime) -> float:
            async with build_coordinator(config(name, frontend=frontend), virtual_env(rt), rt) as coord:
                return await latency(rt, coord)

        result = run(main, seed=1, latency=_latency(frontend_pgwire=4.0))
        assert isinstance(result, float)
        return result

    in_process, pgwire = one(Frontend.IN_PROCESS), one(Frontend.PGWIRE)
    assert in_process < 0.001
    assert pgwire - in_process == pytest.approx(0.004, rel=1e-6)


def test_cores_come_from_the_profile_and_nothing_else(tmp_path: Path) -> None:
    """No configuration gets more cores without a source: the named decoupled
    configuration has the event loop's one, a run gives it the profile's
    `[cpu] cores`, and an explicit override wins."""
    assert config("decoupled").cores == 1
    assert profile_cores(DEFAULT_PROFILE) == 2
    assert RunConfig().coordinator("decoupled").cores == 2
    assert RunConfig().coordinator("event-loop").cores == 1
    assert RunConfig(overrides={"cores": 3}, configurations=("decoupled",)).coordinator("decoupled").cores == 3
    bare = tmp_path / "p.toml"
    bare.write_text('[latency."default"]\nkind = "constant"\nms = 0.0\n')
    assert RunConfig(latency_profile=str(bare)).coordinator("decoupled").cores == 1
    measured = tmp_path / "m.toml"
    measured.write_text('[meta]\nmachine = "Some CPU, 8 cores"\n' + bare.read_text())
    assert profile_cores(measured) == 8  # the machine the profile was measured on
    explicit = tmp_path / "e.toml"
    explicit.write_text(measured.read_text() + "[cpu]\ncores = 4\n")
    assert profile_cores(explicit) == 4
    bad = tmp_path / "bad.toml"
    bad.write_text(bare.read_text() + "[cpu]\ncores = 0\n")
    with pytest.raises(InvalidUsage, match="cores"):
        profile_cores(bad)


def test_ablate_lists_more_cores_as_its_own_step() -> None:
    steps = chain("event-loop", "decoupled")
    mechanisms = [st.mechanism for st in steps]
    assert mechanisms[-2:] == ["architecture", "cores"]
    cfg = RunConfig(configurations=tuple(st.name for st in steps),
                 variants={st.name: st.variant for st in steps if st.variant is not None})
    cores = [cfg.coordinator(st.name).cores for st in steps]
    assert cores[-2:] == [1, 2]  # decoupling on one core, then the profile's cores


@pytest.mark.parametrize("name", ["event-loop", "decoupled"])
def test_persist_listen_poll_delays_a_read_after_a_write_by_up_to_the_poll(name: str) -> None:
    """`persist_listen = poll`: a replica's index learns of an appended write
    at its listen's next poll, so an indexed SELECT right after an INSERT
    waits up to `persist_poll_s` for the index's frontier; with PubSub the
    new state is pushed at once. (A peek without an index opens a reader,
    whose registration reads the current state: it does not wait.)"""
    from dataclasses import replace

    from coordinator.config import PersistListen

    def read_after_write_s(listen: PersistListen) -> list[float]:
        async def main(rt: Runtime) -> list[float]:
            cfg = replace(config(name), persist_listen=listen, persist_poll_s=0.5)
            async with build_coordinator(cfg, virtual_env(rt), rt) as coord:
                s = coord.connect()
                assert (await s.execute("CREATE TABLE t (a int)")).ok
                assert (await s.execute("CREATE DEFAULT INDEX ON t")).ok
                waits = []
                for k in range(8):
                    assert (await s.execute(f"INSERT INTO t VALUES ({k})")).ok
                    t0 = rt.now()
                    r = await s.execute("SELECT count(*) FROM t")
                    assert r.rows == ((k + 1,),)
                    waits.append(rt.now() - t0)
                return waits

        result = run(main, seed=1, latency=_latency(replica_command=0.5, replica_response=0.5))
        assert isinstance(result, list)
        return result

    pubsub, poll = read_after_write_s(PersistListen.PUBSUB), read_after_write_s(PersistListen.POLL)
    assert max(pubsub) < 0.01
    assert max(poll) <= 0.5 + 0.01
    assert sum(poll) / len(poll) > 0.05, poll  # waits for polls, spread over the interval
