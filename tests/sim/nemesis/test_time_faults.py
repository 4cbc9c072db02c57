"""Faults of time (issue 38, item 7): each clock fault really moves what one
process believes is wall time (and only that process's), the oracle's
`GREATEST(write_ts + 1, clock)` keeps the correct design clean under each,
the known-bad oracle without that guard is caught by the clock faults (and
not without them), and a step past persist's lease, which expires the
process's own persist handles, is survived by reopening them."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from controllers.commands import AdvanceCatalogFrontier, Append, CreateTable, table_shard_id
from controllers.storage import AppendOk, StorageConfig, StorageController
from controllers.transform import decode_row
from oracle.modeled import ModeledOracleRows
from oracle.open import OracleBackend, OracleSpec, open_oracles, oracle_spec
from oracle.testing import ConformanceFailure, ManualWallClock, check_oracle, fresh_timeline
from oracle.timestamp_store import MemTimestampStore
from persist.client import PersistClient
from persist.open import open_location
from sim.history.checker import CHECKERS, check_history
from sim.history.model import EventKind, Kind, Status
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_scenarios import SCENARIOS
from sim.nemesis.anomaly_spec import Spec, default_spec, parse_known_bad
from sim.nemesis.matrix import MATRIX
from sim.nemesis.plan import TIME_FAULTS, Fault, FaultKind, FaultPlan
from sim.nemesis.sweep import SeedTask, run_seed
from sim.runtime.core import ProcessClock, Runtime, run
from sim.runtime.errors import InvalidUsage
from sim.runtime.loop import VIRTUAL_EPOCH_MS
from tests.coordinator.harness import build_coordinator, config, latency_model, virtual_env
from tests.sim.nemesis.helpers import sweep

if TYPE_CHECKING:
    from controllers.storage import StorageStatistics
    from coordinator.subscribe import SubscribeBatch
    from oracle.api import TimestampOracle
    from persist.client import PersistStatistics
    from sim.history.model import Event
    from tests.sim.nemesis.conftest import Seeds

# Each test runs its own virtual loop (`run`, `run_spec`); only the Postgres
# one is async, on the stock loop, so the module carries no `virtual` mark.

BASE = ("event-loop", "event-loop+pg-oracle", "decoupled")
TIME_SCENARIOS = ("clock-jump", "clock-skew", "clock-stall")
UNGUARDED = parse_known_bad(["unguarded-wall-clock"])


def _faults(events: list[Event], kind: FaultKind) -> list[dict[str, Any]]:
    out = []
    for e in events:
        if e.kind == EventKind.FAULT and e.detail is not None:
            d = json.loads(e.detail)
            if d["fault"] == kind:
                out.append(d)
    return out


def _write_ts_lead_ms(events: list[Event]) -> list[int]:
    """For each successful write_ts on the realtime timeline: how far the
    timestamp is ahead of the virtual time it was allocated at (ms)."""
    return [e.ts - e.start_ns // 1_000_000 for e in events
            if e.kind == EventKind.ORACLE_WRITE_TS and e.ts is not None and e.timeline
            and "realtime" in e.timeline]


def _spec(scenario: str, config: str, plan: str, *, seed: int = 0) -> Spec:
    return replace(default_spec(scenario, config, seed), faults=FaultPlan.parse(plan))


# --- the clock itself --------------------------------------------------------------------


def test_process_clock_steps_slows_and_resets() -> None:
    c = ProcessClock()
    assert c.read(1_000) == 1_000
    moved = [c.moved]
    c.step(-500, now_ms=1_000)
    assert c.read(1_000) == 500
    assert c.read(1_010) == 510
    moved.append(c.moved)
    assert moved == [False, True]
    c.set_rate(0.0, now_ms=1_010)  # stopped where it was: 510
    assert c.read(1_500) == 510
    assert c.offset_ms(1_500) == -990
    c.set_rate(0.5, now_ms=1_500)
    assert c.read(1_520) == 520
    c.reset()
    assert c.read(2_000) == 2_000
    assert (c.moved, c.rate) == (False, 1.0)
    with pytest.raises(InvalidUsage):
        c.set_rate(-1.0, now_ms=0)


def test_a_process_clock_is_shared_by_derived_runtimes_only() -> None:
    """`derive` is the same process (the same clock); `with_clock` another,
    whose random stream is the very same object (so nothing else moves)."""

    async def main(rt: Runtime) -> tuple[int, int, int, int]:
        other = ProcessClock()
        b = rt.with_clock(other)
        assert b.rng is rt.rng
        assert b.derive("x").clock is other
        rt.clock.step(30_000, now_ms=rt.true_wall_ms())
        return rt.wall_ms(), rt.derive("sub").wall_ms(), b.wall_ms(), rt.true_wall_ms()

    moved, derived, untouched, true = run(main)
    assert moved == derived == true + 30_000
    assert untouched == true


# --- each fault is injected ----------------------------------------------------------------


@pytest.mark.parametrize("config", [*BASE, "decoupled-2-adapters"])
@pytest.mark.parametrize("shift", [30_000, -1_000])
def test_clock_jump_moves_the_coordinators_clock_and_its_timestamps(config: str, shift: int) -> None:
    plan = f"clock-jump@10ms+60msby{shift:+d}ms"
    history, events = run_spec(_spec("clock-jump", config, plan))
    (d,) = _faults(events, FaultKind.CLOCK_JUMP)
    assert d["shift_ms"] == shift
    assert d["healed_from_ms"] == [shift], d  # held for the whole duration, then stepped back
    assert d["processes"][0].startswith("a")
    leads = [t - VIRTUAL_EPOCH_MS for t in _write_ts_lead_ms(events)]
    calm = [t - VIRTUAL_EPOCH_MS for t in _write_ts_lead_ms(run_spec(_spec("clock-jump", config, "none"))[1])]
    assert max(calm) < 10  # without the fault, write_ts follows the true clock
    if shift > 0:
        # GREATEST followed the jumped clock: timestamps 30 s ahead from then on.
        assert max(leads) >= shift, leads
    else:
        assert leads != calm  # the fault changed the timestamps handed out
    assert not check_history(history, events, checkers=CHECKERS).names


@pytest.mark.parametrize("config", [*BASE, "decoupled-2-adapters"])
def test_clock_skew_puts_two_processes_apart(config: str) -> None:
    spec = default_spec("clock-skew", config, 0)
    if coordinator_adapters(config) == 1:
        assert spec.faults.faults[0] == Fault(0.0, FaultKind.SPLIT_BRAIN)  # the second process
    spec = replace(spec, faults=FaultPlan(
        (*(f for f in spec.faults.faults if f.kind is FaultKind.SPLIT_BRAIN),
         Fault(0.02, FaultKind.CLOCK_SKEW, 0.06, shift_ms=1_001))))
    _, events = run_spec(spec)
    (d,) = _faults(events, FaultKind.CLOCK_SKEW)
    a, b = d["processes"]
    assert a != b
    if coordinator_adapters(config) == 1:
        assert {a, b} == {"a", "b"}  # the two coordinators of the split brain
    else:
        assert all("/adapter-" in p for p in (a, b))
    assert d["offsets_ms"] == [501, -500]
    assert d["healed_from_ms"] == [501, -500]


def coordinator_adapters(config: str) -> int:
    from sim.nemesis.anomaly_spec import coordinator_config

    return coordinator_config(config).adapters


@pytest.mark.parametrize("config", [*BASE, "decoupled-2-adapters"])
@pytest.mark.parametrize(("factor", "behind_ms"), [(10_000.0, 60), (5.0, 48)])
def test_clock_stall_stops_or_slows_the_clock(config: str, factor: float, behind_ms: int) -> None:
    _, events = run_spec(_spec("clock-stall", config, f"clock-stall@10ms+60msx{factor:g}"))
    (d,) = _faults(events, FaultKind.CLOCK_STALL)
    assert d["rate"] == 1 / factor
    # 60 ms at rate 1/factor: the clock fell (60 - 60/factor) ms behind, then stepped back.
    assert d["healed_from_ms"][0] in (-behind_ms, -behind_ms - 1), d


def test_overlapping_faults_leave_a_moved_clock_alone() -> None:
    _, events = run_spec(_spec("clock-jump", "decoupled", "clock-jump@10ms+60msby+50ms,clock-jump@20ms+10msby-50ms"))
    assert [d["shift_ms"] for d in _faults(events, FaultKind.CLOCK_JUMP)] == [50]


def test_a_time_fault_run_is_deterministic() -> None:
    spec = default_spec("clock-skew", "decoupled", 5)
    assert any(f.kind in TIME_FAULTS for f in spec.faults.faults)
    h1, e1 = run_spec(spec)
    h2, e2 = run_spec(spec)
    assert [h1.op(i) for i in range(h1.n)] == [h2.op(i) for i in range(h2.n)]
    assert e1 == e2


def test_plans_parse_print_and_draw() -> None:
    text = "clock-jump@10ms+50msby-30000ms,clock-skew@1ms+5msby+1ms,clock-stall@2ms+3msx10000"
    plan = FaultPlan.parse(text)
    assert FaultPlan.parse(str(plan)) == plan
    assert {f.kind for f in plan.faults} == TIME_FAULTS
    with pytest.raises(InvalidUsage, match="clock shift"):
        FaultPlan.parse("clock-jump@1ms+1msby+99999999999ms")
    # Drawing the time faults' shifts never moved another kind's plans.
    assert str(default_spec("ddl-dml", "decoupled", 1).faults) == (
        "replica-slow@16.923ms+3.839msx5,store-errors@27.244ms+2.493ms"
    )
    for name in TIME_SCENARIOS:
        drawn = [f for s in range(20) for f in default_spec(name, "decoupled", s).faults.faults]
        assert any(f.kind.value == name for f in drawn), name
        assert all(abs(f.shift_ms) <= 30_000 for f in drawn)
    lease = [f for s in range(5) for f in default_spec("clock-jump-past-lease", "decoupled", s).faults.faults]
    assert {abs(f.shift_ms) for f in lease} == {90_000}


# --- the correct design stays clean ----------------------------------------------------------


@pytest.mark.parametrize("config", BASE)
@pytest.mark.parametrize("scenario", TIME_SCENARIOS)
def test_the_correct_design_is_clean_under_time_faults(scenario: str, config: str, seeds: Seeds) -> None:
    found = sweep(scenario, config, seeds(4))
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.parametrize("scenario", ["clock-skew", "clock-stall"])
def test_adapters_stay_clean_under_time_faults(scenario: str, seeds: Seeds) -> None:
    found = sweep(scenario, "decoupled-2-adapters", seeds(3))
    assert not found, "\n".join(str(f) for f in found)


# --- the known-bad oracle is caught, by the clock ----------------------------------------------


@pytest.mark.parametrize("config", BASE)
@pytest.mark.parametrize("scenario", TIME_SCENARIOS)
def test_the_unguarded_oracle_is_caught_by_the_clock_faults(scenario: str, config: str) -> None:
    """Caught (a timestamp regression) within the matrix's bound; the first
    catching seed, rerun with its time faults taken out, is clean."""
    (entry,) = [e for e in MATRIX if (e.variant, e.scenario, e.config) == ("unguarded_wall_clock", scenario, config)]
    for seed in range(entry.bound):
        r = run_seed(SeedTask(scenario, config, seed, ("unguarded_wall_clock",)))
        if "timestamp-regression" in r.anomalies:
            break
    else:
        pytest.fail(f"not caught within {entry.bound} seeds")
    spec = default_spec(scenario, config, seed, known_bad=UNGUARDED)
    calm = replace(spec, faults=FaultPlan(tuple(f for f in spec.faults.faults if f.kind not in TIME_FAULTS)))
    history, events = run_spec(calm)
    assert "timestamp-regression" not in check_history(history, events, checkers=CHECKERS).names, calm.command()


def test_every_time_scenario_has_its_matrix_rows() -> None:
    rows = {(e.variant, e.scenario, e.config, e.expect) for e in MATRIX}
    for sc in TIME_SCENARIOS:
        assert sc in SCENARIOS
        for c in BASE:
            assert ("unguarded_wall_clock", sc, c, "caught") in rows, (sc, c)
            if (sc, c) != ("clock-skew", "event-loop+pg-oracle"):  # its split brain's finding
                assert (None, sc, c, "not-caught") in rows, (sc, c)


# --- a step past the lease ----------------------------------------------------------------------

LEASE_STEP_MS = 90_000  # past persist's 60 s lease (`MachineConfig.lease_ms`)


def test_a_step_past_the_lease_reopens_the_tables_writer_and_reader() -> None:
    """The storage controller's own handles expire at the first persist
    transition after a 90 s step. The append refused as expired was not
    applied, so it is retried on a reopened writer and lands exactly once;
    the reader is reopened when the since next moves. (Without the reopen
    the append raises `LeaseExpiredError`, which ended the coordinator.)"""

    async def main(rt: Runtime) -> tuple[StorageStatistics, PersistStatistics, list[tuple[Any, int]], int]:
        cfg = StorageConfig(compaction_window=8)
        async with PersistClient(*await open_location(), rt) as persist, \
                StorageController(persist, rt, config=cfg) as s:
            await s.apply(CreateTable(1, table_shard_id(1), ("a",)))
            await s.apply(AdvanceCatalogFrontier(1))
            assert await s.append(Append(5, {1: [((1,), 1)]})) == AppendOk(5)
            rt.clock.step(LEASE_STEP_MS, now_ms=rt.true_wall_ms())
            assert await s.append(Append(6, {1: [((2,), 1)]})) == AppendOk(6)
            for ts in range(7, 40):  # the since moves on: a downgrade finds the reader expired
                assert await s.append(Append(ts, {})) == AppendOk(ts)
                await rt.sleep(0.001)
            _, reader = await persist.open(table_shard_id(1))
            rows = [(decode_row(u.key), u.diff) for u in await reader.snapshot(39)]
            return s.statistics(), persist.statistics(), rows, s.since(1)

    stats, pstats, rows, since = run(main, seed=3)
    assert rows == [((1,), 1), ((2,), 1)]  # the retried append landed once, nothing lost
    assert stats.lease_reopens == 2, stats  # the table's writer, then its reader
    assert pstats.lease_reopens == 2, pstats
    assert since >= 39 - 8, since  # the since kept following the upper on the new reader


@pytest.mark.parametrize("config_name", ["event-loop", "decoupled"])
def test_a_subscription_and_reads_survive_a_step_past_the_lease(config_name: str) -> None:
    """A subscription open across the step, inserts and reads after it: the
    writes are acknowledged, each change reaches the subscriber once (its
    reader reopened and its listen resumed from its progress), and a read
    sees them all."""

    async def main(rt: Runtime) -> None:
        with anyio.fail_after(120):  # virtual seconds: a hang fails fast
            await body(rt)

    async def body(rt: Runtime) -> None:
        async with build_coordinator(config(config_name), virtual_env(rt), rt) as coord:
            sub_s, w = coord.connect(), coord.connect()
            assert (await w.execute("CREATE TABLE t (a int)")).ok
            assert (await w.execute("INSERT INTO t VALUES (1)")).ok
            async with sub_s.subscribe("SUBSCRIBE TO t WITH (PROGRESS)") as sub:
                batches: list[SubscribeBatch] = [await anext(sub)]
                rt.clock.step(LEASE_STEP_MS, now_ms=rt.true_wall_ms())
                writes = [await w.execute(f"INSERT INTO t VALUES ({v})") for v in (2, 3)]
                assert all(r.ok for r in writes), [r.error for r in writes]
                last = max(r.write_ts or 0 for r in writes)
                async for b in sub:
                    batches.append(b)
                    if b.upper > last:
                        break
            read = await w.execute("SELECT a FROM t")
            assert read.ok, read.error
            assert sorted(read.rows) == [(1,), (2,), (3,)]
        got = Counter((ts, row, d) for b in batches[1:] for ts, row, d in b.updates)
        t2, t3 = (r.write_ts for r in writes)
        assert got == Counter({(t2, (2,), 1): 1, (t3, (3,), 1): 1}), got
        lower = batches[0].upper
        for b in batches[1:]:  # the batches tile time: no gap, no overlap across the reopen
            assert b.lower == lower, (b, lower)
            lower = b.upper

    run(main, seed=7, latency=latency_model())


@pytest.mark.parametrize("config", BASE)
def test_a_step_past_the_lease_is_survived(config: str) -> None:
    """Seed 1 steps the coordinator's clock 90 s forward mid-run (the seed
    that crashed the coordinator before the reopen): writes are still
    acknowledged after the step, and every checker finds the run valid."""
    history, events = run_spec(default_spec("clock-jump-past-lease", config, 1))
    (d, *_) = _faults(events, FaultKind.CLOCK_JUMP)
    assert d["shift_ms"] == LEASE_STEP_MS, d
    step_ns = min(e.start_ns for e in events if e.kind == EventKind.FAULT)
    after = [op for op in map(history.op, range(history.n))
             if op.invoke_ns > step_ns and op.status is Status.OK and op.kind is Kind.ADD]
    assert after, "no write was acknowledged after the step"
    report = check_history(history, events, checkers=CHECKERS)
    assert not report.names, report.names
    assert not [op for op in map(history.op, range(history.n)) if op.error_code == "XX000"]


@pytest.mark.parametrize("config", BASE)
def test_the_correct_design_is_clean_past_the_lease(config: str, seeds: Seeds) -> None:
    found = sweep("clock-jump-past-lease", config, seeds(6))
    assert not found, "\n".join(str(f) for f in found)


# --- the variant, on each oracle --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "modeled"])
def test_the_unguarded_oracle_fails_the_wall_clock_contract(kind: str) -> None:
    """The oracle conformance suite's wall-clock check (a clock stepped back a
    minute) rejects the variant on the in-memory and modeled oracles."""
    clock = ManualWallClock()

    async def main(rt: Runtime) -> None:
        spec = (
            OracleSpec(OracleBackend.MEMORY, store=MemTimestampStore(rt), unguarded_clock=True)
            if kind == "memory"
            else OracleSpec(OracleBackend.MODELED, rows=ModeledOracleRows(), unguarded_clock=True)
        )

        async def make(timeline: str) -> TimestampOracle:
            return await (await open_oracles(spec, rt)).timeline(timeline, owns_backend=True)

        with pytest.raises(ConformanceFailure):
            await check_oracle(make, rt, clock=clock)

    run(main, wall_clock=clock)


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_the_unguarded_postgres_oracle_goes_back_with_the_clock(pg_url: str) -> None:
    """`_WRITE_TS_UNGUARDED` on a real server: the clock stepped back hands
    out the past, where the seed's statement keeps counting up."""
    clock = ManualWallClock()
    rt = Runtime(seed=6, wall_clock=clock)
    got = {}
    for unguarded in (False, True):
        spec = replace(oracle_spec(pg_url), unguarded_clock=unguarded)
        async with await open_oracles(spec, rt) as oracles:
            o = await oracles.timeline(fresh_timeline("unguarded"))
            clock.set(1_900_000_000_000)
            first = (await o.write_ts()).ts
            same = (await o.write_ts()).ts
            clock.set(1_900_000_000_000 - 60_000)
            back = (await o.write_ts()).ts
            got[unguarded] = (first, same, back)
    assert got[False] == (1_900_000_000_000, 1_900_000_000_001, 1_900_000_000_002)
    assert got[True] == (1_900_000_000_000, 1_900_000_000_001, 1_900_000_000_000 - 60_000)
