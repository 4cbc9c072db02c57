"""Live oracle switch-over (issue 36, item 6): the `oracle-switch` fault
really flips a running coordinator between the in-memory and the distributed
oracle (both ways), the switch's rule keeps the oracle linearizable (drain,
fast-forward, then serve; a successor starts above both implementations),
the correct design stays clean under the fault, and the known-bad switch
that neither drains nor fast-forwards is caught."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import coordinator.environment as environment
from coordinator.config import OracleKind, check_known_bad, named
from oracle.api import REALTIME_TIMELINE
from oracle.modeled import ModeledOracleRows
from oracle.open import OracleBackend, OracleSpec, open_oracles
from oracle.switching import SwitchingOracle
from oracle.testing import RecordingOracle, check_history, run_random_workload
from oracle.timestamp_store import MemTimestampStore
from sim.history.checker import CHECKERS
from sim.history.checker import check_history as check_run
from sim.history.model import EventKind
from sim.history.recorder import HistoryRecorder
from sim.load.driver import drive
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_scenarios import SCENARIOS, latency_model
from sim.nemesis.anomaly_spec import (
    coordinator_config,
    default_spec,
    parse_known_bad,
    rollout_config,
)
from sim.nemesis.matrix import MATRIX
from sim.nemesis.plan import Fault, FaultKind, FaultPlan
from sim.runtime.core import Runtime, run
from sim.runtime.errors import InvalidUsage
from tests.sim.nemesis.helpers import sweep

if TYPE_CHECKING:
    from oracle.api import TimestampOracle
    from sim.history.model import Event
    from tests.sim.nemesis.conftest import Seeds

pytestmark = pytest.mark.virtual

SINGLE = ("event-loop", "event-loop+pg-oracle")
UNSYNCED = parse_known_bad(["unsynced-oracle-switch"])


def _flips(events: list[Event]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in events:
        if e.kind == EventKind.FAULT and e.detail is not None:
            d = json.loads(e.detail)
            if d["fault"] == FaultKind.ORACLE_SWITCH:
                out += d["flips"]
    return out


def _run(scenario: str, config: str, plan: str, *, seed: int = 0, known_bad: str | None = None) -> tuple[Any, list[Event]]:
    bad = parse_known_bad([known_bad] if known_bad else [])
    spec = replace(default_spec(scenario, config, seed, known_bad=bad), faults=FaultPlan.parse(plan))
    return run_spec(spec)


# --- the switch itself, on the oracles ------------------------------------------------------


async def _oracle(spec: OracleSpec, rt: Runtime, timeline: str, *, at_upper: bool = True) -> TimestampOracle:
    """The oracle of `timeline` on `spec`'s backend, as a process of its own
    (an in-memory one bumps the timestamp store's epoch)."""
    return await (await open_oracles(spec, rt)).timeline(timeline, at_upper=at_upper, owns_backend=True)


def _memory(rt: Runtime) -> OracleSpec:
    """In-memory oracles on one timestamp store that outlives their processes."""
    return OracleSpec(OracleBackend.MEMORY, store=MemTimestampStore(rt))


def _modeled() -> OracleSpec:
    """Modeled distributed oracles on one table."""
    return OracleSpec(OracleBackend.MODELED, rows=ModeledOracleRows())


def _switch_under_load(*, fast_forward: bool, seed: int = 0) -> tuple[int, list[Any]]:
    """64 tasks of random oracle calls on one timeline while its oracle is
    switched between the in-memory and the (modeled) distributed one every
    few milliseconds; returns (switches, violations of the oracle's guarantees)."""

    async def main(rt: Runtime) -> tuple[int, list[Any]]:
        memory, modeled, tl = _memory(rt), _modeled(), REALTIME_TIMELINE
        first = await _oracle(memory, rt, tl)
        switching = SwitchingOracle(first)
        recording = RecordingOracle(switching, rt)
        done = anyio.Event()

        async def switcher() -> None:
            to_memory = False
            while not done.is_set():
                await rt.sleep(0.002 + rt.rng.random() * 0.003)
                new: TimestampOracle
                if to_memory:
                    new = await _oracle(memory, rt, tl, at_upper=not fast_forward)
                else:
                    new = await _oracle(modeled, rt, tl)
                await switching.switch(new, fast_forward=fast_forward)
                to_memory = not to_memory

        async with anyio.create_task_group() as tg:
            tg.start_soon(switcher)
            await run_random_workload(recording, rt, tasks=64, ops_per_task=40, think_s=0.001)
            done.set()
        return switching.switches, check_history(recording.history)

    return run(main, seed=seed, latency=latency_model())


@pytest.mark.parametrize("seed", range(3))
def test_a_switch_under_load_keeps_the_oracle_linearizable(seed: int) -> None:
    switches, violations = _switch_under_load(fast_forward=True, seed=seed)
    assert switches >= 6
    assert violations == []


def test_a_switch_without_drain_and_fast_forward_breaks_it() -> None:
    switches, violations = _switch_under_load(fast_forward=False)
    assert switches >= 6
    assert violations, "the unsynced switch should hand out timestamps below earlier ones"


@pytest.mark.parametrize("kind", ["memory", "modeled"])
def test_advance_raises_each_column_and_never_lowers(kind: str) -> None:
    async def main(rt: Runtime) -> list[tuple[int, int]]:
        o: Any = await _oracle(_memory(rt) if kind == "memory" else _modeled(), rt, "t")
        seen = []
        for read, write in ((5, 9), (3, 4), (12, 10)):
            await o.advance(read_ts=read, write_ts=write)
            seen.append((await o.read_ts(), await o.peek_write_ts()))
        with pytest.raises(InvalidUsage):
            await o.advance(read_ts=-1, write_ts=0)
        return seen

    assert run(main, latency=latency_model()) == [(5, 9), (5, 9), (12, 12)]


def test_a_switch_waits_for_the_calls_in_flight_and_holds_new_ones() -> None:
    """A call in flight on the old oracle completes there before the old
    state is read; a call made during the switch is served by the new one."""

    async def main(rt: Runtime) -> tuple[int, int, str, int]:
        old = await _oracle(_modeled(), rt, "a")
        switching = SwitchingOracle(old)
        w = await switching.write_ts()
        results: dict[str, Any] = {}

        async def apply() -> None:
            await switching.apply_write(w.ts)  # in flight when the switch starts
            results["applied"] = True

        async with anyio.create_task_group() as tg:
            tg.start_soon(apply)
            await anyio.lowlevel.checkpoint()
            new = await _oracle(_modeled(), rt, "a")

            async def later() -> None:
                await anyio.lowlevel.checkpoint()
                results["read"] = await switching.read_ts()  # held until the switch is done
                results["by"] = switching.current is new

            tg.start_soon(later)
            handover = await switching.switch(new)
        assert results["by"] is True
        return handover.drained, handover.read_ts or 0, handover.new, results["read"]

    drained, read_ts, new, read = run(main, latency=latency_model())
    assert drained == 1
    assert read == read_ts > 0
    assert new == "modeled-postgres"


def test_switching_oracle_refuses_another_timeline() -> None:
    async def main(rt: Runtime) -> None:
        s = SwitchingOracle(await _oracle(_modeled(), rt, "a"))
        with pytest.raises(InvalidUsage, match="timeline"):
            await s.switch(await _oracle(_modeled(), rt, "b"))

    run(main, latency=latency_model())


# --- the fault on a running coordinator ---------------------------------------------------


@pytest.mark.parametrize("config", SINGLE)
def test_the_fault_switches_the_running_coordinator_both_ways(config: str) -> None:
    """One fault: to the other implementation at 30 ms, back at 70 ms; the
    handovers carry the old oracle's timestamps (the writes before it)."""
    _, events = _run("oracle-switch", config, "oracle-switch@30ms+40ms")
    flips = _flips(events)
    first = "memory" if config == "event-loop" else "postgres"
    other = "postgres" if first == "memory" else "memory"
    assert [(f["from"], f["to"]) for f in flips] == [(first, other), (other, first)]
    impl = {"memory": "memory", "postgres": "modeled-postgres"}
    realtime = [next(t for t in f["timelines"] if t["timeline"] == "realtime") for f in flips]
    assert [(t["from"], t["to"]) for t in realtime] == [(impl[first], impl[other]), (impl[other], impl[first])]
    assert realtime[1]["write_ts"] >= realtime[0]["write_ts"] > 0


@pytest.mark.parametrize("config", SINGLE)
def test_calls_after_the_switch_reach_the_other_implementation(config: str) -> None:
    """On a deployment: before the flip the configured implementation serves
    (the other sees no statement); after it, the other does, and the
    coordinator confirms leadership through the catalog from then on."""
    cfg = named(config)

    async def main(rt: Runtime) -> list[tuple[str, int, int, bool]]:
        rec = HistoryRecorder(rt.now)
        async with drive(rt, cfg, rec, n_clients=1, size=1) as sim:
            c = sim.client(0)
            inc: Any = sim.dep.newest.incarnation  # type: ignore[union-attr]
            env = sim.dep.env
            assert env.oracle_rows is not None
            assert env.timestamp_store is not None
            seen = []

            async def work() -> None:
                await c.execute("INSERT INTO t VALUES (1)")
                result = await c.execute("SELECT * FROM t")
                assert result.ok, result

            def snapshot() -> tuple[str, int, int, bool]:
                assert env.oracle_rows is not None
                assert env.timestamp_store is not None
                impl = inc.oracle_switch.realtime.current.statistics().implementation
                return impl, env.oracle_rows.statements, env.timestamp_store.transactions, inc.memory_oracle is None

            await c.execute("CREATE TABLE t (a int)")
            await work()
            seen.append(snapshot())
            await inc.switch_oracle()
            seen.append(snapshot())
            await work()
            seen.append(snapshot())
            await inc.switch_oracle()
            seen.append(snapshot())
            await work()
            seen.append(snapshot())
            return seen

    seen = run(main, latency=latency_model())
    (impl0, rows0, _, _), (impl1, rows1, _, by_catalog), (impl2, rows2, _, _) = seen[:3]
    (impl3, rows3, _, _), (impl4, rows4, _, _) = seen[3:]
    assert impl1 == impl2 != impl0 == impl3 == impl4
    assert by_catalog
    if config == "event-loop":
        assert rows0 == 0  # the distributed oracle was never called…
        assert rows2 > rows1  # …until it served…
        assert rows4 == rows3  # …and not once switched back
    else:
        assert rows2 == rows1  # the distributed oracle is not called while the in-memory one serves…
        assert rows4 > rows3  # …and serves again once switched back


def test_the_rollout_keeps_confirm_leadership() -> None:
    """Seed 000's rollout confirmed leadership on both implementations:
    event-loop+pg-oracle (its end state, without) confirms under the fault."""
    plan = FaultPlan.parse("oracle-switch@10ms+40ms")
    pg = coordinator_config("event-loop+pg-oracle")
    assert not pg.confirm_leadership
    assert rollout_config(pg, plan).confirm_leadership
    assert rollout_config(pg, FaultPlan()) is pg
    _, events = _run("oracle-switch", "event-loop+pg-oracle", str(plan))
    assert any(e.kind == "confirm-leadership" for e in events)


def test_a_run_that_never_switches_is_the_run_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flag is a pass-through until flipped: the same histories and
    events with and without it, on both single-coordinator configurations."""

    def fingerprint(config: str, seed: int) -> tuple[Any, ...]:
        history, events = run_spec(default_spec("ddl-dml", config, seed))
        ops = tuple((history.op(i).kind, history.op(i).status, history.op(i).error_code) for i in range(history.n))
        return ops, tuple((e.kind, e.start_ns, e.end_ns, e.ts) for e in events)

    with_flag = {(c, s): fingerprint(c, s) for c in SINGLE for s in range(2)}

    class Bare:
        def __init__(self, kind: OracleKind, a: TimestampOracle, b: TimestampOracle, *_: object, **__: object) -> None:
            self.realtime, self.catalog = a, b

    monkeypatch.setattr(environment, "OracleSwitch", Bare)
    assert {(c, s): fingerprint(c, s) for c in SINGLE for s in range(2)} == with_flag


# --- the plan ------------------------------------------------------------------------------


def test_plan_syntax_round_trips_and_draws() -> None:
    text = "oracle-switch@10ms+40ms,oracle-switch@70ms"
    plan = FaultPlan.parse(text)
    assert plan.faults == (Fault(0.01, FaultKind.ORACLE_SWITCH, 0.04), Fault(0.07, FaultKind.ORACLE_SWITCH))
    assert str(plan) == text
    for name in ("oracle-switch", "oracle-switch-restart"):
        assert name in SCENARIOS
        spec = default_spec(name, "event-loop", 3)
        assert any(f.kind is FaultKind.ORACLE_SWITCH for f in spec.faults.faults) or name != "oracle-switch"


def test_the_fault_refuses_decoupled_and_split_brain() -> None:
    with pytest.raises(InvalidUsage, match="single-coordinator"):
        default_spec("oracle-switch", "decoupled", 0)
    with pytest.raises(InvalidUsage, match="single-coordinator"):
        default_spec("oracle-switch", "decoupled-2-adapters", 0)
    with pytest.raises(InvalidUsage, match="deposed"):
        replace(default_spec("oracle-switch", "event-loop", 0),
                faults=FaultPlan.parse("oracle-switch@10ms+40ms,split-brain@5ms"))
    # The known-bad switch acts only where the fault does.
    check_known_bad(named("event-loop").with_overrides(known_bad=UNSYNCED))
    with pytest.raises(InvalidUsage, match="never switched"):
        check_known_bad(named("decoupled").with_overrides(known_bad=UNSYNCED))


# --- the design under the fault, and the known-bad ---------------------------------------


@pytest.mark.parametrize("scenario", ["oracle-switch", "oracle-switch-restart"])
@pytest.mark.parametrize("config", SINGLE)
def test_the_correct_switch_is_clean(scenario: str, config: str, seeds: Seeds) -> None:
    found = sweep(scenario, config, seeds(8))
    assert not found, "\n".join(map(str, found))


@pytest.mark.parametrize("config", SINGLE)
def test_the_unsynced_switch_is_caught(config: str) -> None:
    (entry,) = [e for e in MATRIX if e.variant == "unsynced_oracle_switch" and e.config == config]
    history, events = run_spec(default_spec("oracle-switch", config, 0, known_bad=UNSYNCED))
    report = check_run(history, events, checkers=CHECKERS)
    assert entry.expected & set(report.names), report.names
    assert "timestamp-regression" in report.names  # checker 4 names the oracle's own broken bound


@pytest.mark.parametrize("config", SINGLE)
def test_a_successor_starts_above_both_implementations(config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 3: switched for good at 5 ms, then crash-restart: the successor
    starts on the configured implementation, whose durable state the switch
    left behind; without catching up with the other it hands out the past."""
    plan = "oracle-switch@5ms,crash-restart@40ms+5ms"

    def names(seed: int) -> list[str]:
        history, events = _run("oracle-switch", config, plan, seed=seed)
        assert [(f["from"] != f["to"]) for f in _flips(events)] == [True]
        return check_run(history, events, checkers=CHECKERS).names

    assert [names(s) for s in range(3)] == [[], [], []]

    async def nothing(*_: object, **__: object) -> dict[str, int]:
        return {}

    monkeypatch.setattr(environment, "start_above_other", nothing)
    assert any("timestamp-regression" in names(s) for s in range(3))
