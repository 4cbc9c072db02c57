"""The nemesis: injects a `FaultPlan`'s faults into a running `Deployment`,
records each as an internal event, and heals each before it returns.

The adapter faults (issue 36) act on one adapter of the newest coordinator,
chosen from the nemesis's own random stream: `adapter-crash` stops it while
the others run (never the last one serving) and starts a fresh one in its
place after `duration`; `adapter-partition` and `adapter-pause` turn its
process's switches (`oracle.gated.ProcessGate`) for `duration`.

The time faults (issue 38) move what one process believes is wall time (its
`ProcessClock`: each coordinator's, or each adapter's of one with several),
never the simulation's clock, and heal with an NTP step back to true time:
`clock-jump` steps the newest coordinator's clock (one of its adapters') by
`shift` and back after `duration`; `clock-skew` puts two live processes that
call `write_ts` `shift` apart (half each way); `clock-stall` runs one
`factor` times slow (10^4: stopped) for `duration` while it keeps appending,
compacting and renewing its persist leases. A clock some fault already moved
is left alone. Victims come from a random stream of their own.

`oracle-switch` (issue 36, item 6) flips the newest coordinator's oracle flag
(`coordinator.oracle_switch`: in-memory <-> distributed, every timeline) and
flips it back after `duration` if that coordinator still runs; faults that
overlap flip in turn. Its plans need the event-loop architecture
(`check_single_coordinator`).

With the Runtime's event log on (`sim.runtime.events`), each fault is two
`nemesis.fault` events: `phase=start` once it acts, naming its kind and its
target, and `phase=stop` once healed, with what its trace event records."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, final

import anyio
import anyio.lowlevel
import anyio.to_thread

from coordinator.adapters import MultiAdapterCoordinator
from sim.history.model import EventKind, Status
from sim.nemesis.plan import (
    ADAPTER_FAULTS,
    TIME_FAULTS,
    Fault,
    FaultKind,
    FaultPlan,
    check_adapters,
    check_plan,
    check_single_coordinator,
)
from sim.runtime.errors import Fenced, InvalidUsage

if TYPE_CHECKING:


    from coordinator.session import Coordinator
    from sim.load.deployment import Deployment, _Host
    from sim.runtime.core import ProcessClock, Runtime
    from sim.services.postgres import EmbeddedPostgres

__all__ = ['DEFAULT_CLUSTER', 'Nemesis']

DEFAULT_CLUSTER: Final = (1, 1)
#: Store failure rates while a `store-errors` fault is active.
STORE_P_FAIL: Final = 0.05
STORE_P_TIMEOUT: Final = 0.05
#: Seconds between the kill rounds of a `pg-kill` fault longer than this.
PG_KILL_EVERY_S: Final = 0.01

#: "virtual" (in-memory stores, virtual time) or "real" (Postgres, wall time).
# --- the nemesis ----------------------------------------------------------------------------


@final
class Nemesis:
    """Runs a `FaultPlan` against a `Deployment`; `run` returns once every
    fault has been injected and healed."""

    def __init__(self, dep: Deployment, plan: FaultPlan) -> None:
        """Raises `InvalidUsage` if a fault cannot act on `dep` (`check_plan`)."""
        check_plan(plan, "virtual" if dep.database_url is None else "real")
        check_adapters(plan, dep.config.adapters)
        check_single_coordinator(plan, dep.config.architecture.value)
        if any(f.kind is FaultKind.PG_SIGKILL for f in plan.faults):
            _embedded(dep.database_url)
        self.dep = dep
        self.plan = plan
        self.injected: list[Fault] = []
        #: Which adapter an adapter fault hits (a stream of its own: plans
        #: without adapter faults draw nothing from it).
        self._victims = dep.rt.derive("nemesis-adapters").rng
        #: Whose clock a time fault moves (likewise a stream of its own).
        self._clock_victims = dep.rt.derive("nemesis-clocks").rng
        self._events = dep.rt.events.bind(config=dep.config.name, actor="nemesis")

    async def run(self) -> None:
        rt, t0 = self.dep.rt, self.dep.rt.now()
        async with anyio.create_task_group() as tg:
            for fault in self.plan.faults:
                await rt.sleep(t0 + fault.at_s - rt.now())
                tg.start_soon(self._inject, fault)

    def _started(self, fault: Fault, target: object) -> None:
        """The `phase=start` event of `fault`, acting on `target`."""
        if self._events.on:
            self._events.emit("nemesis.fault", phase="start", kind=str(fault.kind), target=target, spec=str(fault))

    def _record(self, fault: Fault, start_ns: int, **detail: Any) -> None:
        if self._events.on:
            self._events.emit("nemesis.fault", phase="stop", kind=str(fault.kind), spec=str(fault), **detail)
        self.dep.recorder.event(
            EventKind.FAULT,
            "nemesis",
            start_ns=start_ns,
            end_ns=self.dep.recorder.now_ns(),
            status=Status.OK,
            actor="nemesis",
            detail={"fault": str(fault.kind), "spec": str(fault), **detail},
        )

    async def _inject(self, fault: Fault) -> None:
        dep, rt = self.dep, self.dep.rt
        start = dep.recorder.now_ns()
        self.injected.append(fault)
        if fault.kind is FaultKind.CRASH_RESTART:
            if not dep.live:
                return
            victim = dep.live[0]
            self._started(fault, victim.name)
            await dep.stop_coordinator(victim)
            await rt.sleep(fault.duration_s)
            new = await dep.start_coordinator()
            self._record(fault, start, stopped=victim.name, started=new)
        elif fault.kind is FaultKind.SPLIT_BRAIN:
            if len(dep.live) >= 2:
                return  # one split at a time keeps the scenario readable
            self._started(fault, "a new coordinator")
            new = await dep.start_coordinator()
            self._record(fault, start, started=new, beside=[h.name for h in dep.live[:-1]])
        elif fault.kind is FaultKind.STORE_ERRORS:
            self._started(fault, "blob, consensus")
            for store in (dep.blob, dep.consensus):
                store.set_rates(p_fail=STORE_P_FAIL, p_timeout=STORE_P_TIMEOUT)
                store.enabled = True
            try:
                await rt.sleep(fault.duration_s)
            finally:
                dep.blob.enabled = dep.consensus.enabled = False
            self._record(fault, start, p_fail=STORE_P_FAIL, p_timeout=STORE_P_TIMEOUT)
        elif fault.kind is FaultKind.REPLICA_CRASH:
            coord = dep.newest
            if coord is None:
                return
            compute = _incarnation(coord).compute
            cluster, replica = DEFAULT_CLUSTER
            self._started(fault, f"replica {cluster}.{replica}")
            compute.crash_replica(cluster, replica)
            await rt.sleep(fault.duration_s)
            # The coordinator may have been replaced meanwhile: its controller
            # (and replica) went with it.
            if dep.is_live(coord) and compute.replica(cluster, replica).crashed:
                compute.restart_replica(cluster, replica)
            self._record(fault, start, replica=f"{cluster}.{replica}")
        elif fault.kind in ADAPTER_FAULTS:
            await self._adapter_fault(fault, start)
        elif fault.kind in TIME_FAULTS:
            await self._time_fault(fault, start)
        elif fault.kind is FaultKind.ORACLE_SWITCH:
            await self._oracle_switch(fault, start)
        elif fault.kind is FaultKind.PG_KILL:
            assert dep.database_url is not None  # check_plan: real mode only
            self._started(fault, "postgres backends")
            rounds, killed, apps = await _kill_backends(rt, dep.database_url, fault.duration_s)
            self._record(fault, start, rounds=rounds, killed=killed, applications=apps)
        elif fault.kind is FaultKind.PG_SIGKILL:
            pg = _embedded(dep.database_url)
            # Blocking process management (the restart waits for the server):
            # off the event loop, which keeps serving the clients meanwhile.
            pid = await anyio.to_thread.run_sync(pg.sigkill_postmaster)
            if pid is None:
                return  # an overlapping pg-sigkill has it down; that one restarts it
            self._started(fault, f"postmaster {pid}")
            await rt.sleep(fault.duration_s)
            await anyio.to_thread.run_sync(pg.restart)
            self._record(fault, start, postmaster=pid)
        else:
            group = "oracle" if fault.kind is FaultKind.ORACLE_SLOW else "replica"
            self._started(fault, group)
            dep.switch.factors[group] = fault.factor
            try:
                await rt.sleep(fault.duration_s)
            finally:
                dep.switch.factors.pop(group, None)
            self._record(fault, start, factor=fault.factor)


    async def _adapter_fault(self, fault: Fault, start: int) -> None:
        dep, rt = self.dep, self.dep.rt
        coord = dep.newest
        if not isinstance(coord, MultiAdapterCoordinator):
            return  # the deployment is between coordinators
        i = self._victims.randrange(len(coord.adapters))
        if fault.kind is FaultKind.ADAPTER_CRASH:
            serving = sum(not coord.adapter_down(k) for k in range(len(coord.adapters)))
            if coord.adapter_down(i) or serving < 2:
                return  # one crash of an adapter at a time, and one always serves
            self._started(fault, f"adapter {i + 1}")
            await coord.crash_adapter(i)
            await rt.sleep(fault.duration_s)
            if dep.is_live(coord):
                await coord.restart_adapter(i)
        else:
            gate = coord.gates[i]
            self._started(fault, f"adapter {i + 1}")
            pause = fault.kind is FaultKind.ADAPTER_PAUSE
            if pause:
                gate.pause()
            else:
                gate.partition()
            try:
                await rt.sleep(fault.duration_s)
            finally:
                if pause:
                    gate.resume()
                else:
                    gate.heal()
        self._record(fault, start, adapter=i + 1)


    async def _oracle_switch(self, fault: Fault, start: int) -> None:
        dep, rt = self.dep, self.dep.rt
        host = dep.live[-1] if dep.live else None
        if host is None:
            return  # the deployment is between coordinators
        inc = _incarnation(host.coord)
        flips: list[dict[str, Any]] = []
        self._started(fault, host.name)
        try:
            flips.append((await inc.switch_oracle()).as_detail())
            if fault.duration_s:
                await rt.sleep(fault.duration_s)
                # Replaced meanwhile (crash-restart): its successor started on
                # the configured oracle, above both implementations.
                if dep.is_live(host.coord):
                    flips.append((await inc.switch_oracle()).as_detail())
        except Fenced:
            pass  # its timestamp store's epoch moved on: it stops serving at its next oracle call
        except Exception:
            if dep.is_live(host.coord):
                raise
            # It stopped under the switch (crash-restart): nothing left to switch.
        if flips:
            self._record(fault, start, coordinator=host.name, flips=flips)

    def _clocks(self) -> list[tuple[str, ProcessClock]]:
        """The clocks of the live processes that call `write_ts`, oldest
        coordinator first: each coordinator's, or each adapter's of one with
        several (its shared process allocates no timestamps)."""
        return [p for h in self.dep.live for p in _processes(h)]

    async def _time_fault(self, fault: Fault, start: int) -> None:
        dep, rt = self.dep, self.dep.rt
        live = self._clocks()
        if fault.kind is FaultKind.CLOCK_SKEW:
            if len(live) < 2:
                return  # one process has nothing to be skewed against
            i = self._clock_victims.randrange(len(live))
            j = self._clock_victims.randrange(len(live) - 1)
            pair = [live[i], live[j + (j >= i)]]
        else:
            # The newest coordinator's process (one of its adapters').
            if not dep.live:
                return  # the deployment is between coordinators
            own = _processes(dep.live[-1])
            pair = [own[self._clock_victims.randrange(len(own))]]
        if any(c.moved for _, c in pair):
            return  # another time fault has it: one at a time per clock
        now = rt.true_wall_ms()
        detail: dict[str, Any] = {"processes": [name for name, _ in pair]}
        self._started(fault, detail["processes"])
        if fault.kind is FaultKind.CLOCK_STALL:
            rate = 1.0 / fault.factor
            pair[0][1].set_rate(rate, now_ms=now)
            detail["rate"] = rate
        elif fault.kind is FaultKind.CLOCK_JUMP:
            pair[0][1].step(fault.shift_ms, now_ms=now)
            detail["shift_ms"] = fault.shift_ms
        else:
            # Half each way: the first ends `shift` ahead of the second.
            ahead = fault.shift_ms - fault.shift_ms // 2
            pair[0][1].step(ahead, now_ms=now)
            pair[1][1].step(ahead - fault.shift_ms, now_ms=now)
            detail["offsets_ms"] = [ahead, ahead - fault.shift_ms]
        try:
            await rt.sleep(fault.duration_s)
        finally:
            end = rt.true_wall_ms()
            detail["healed_from_ms"] = [c.offset_ms(end) for _, c in pair]
            for _, c in pair:
                c.reset()
        self._record(fault, start, **detail)


#: Every other backend of the run's database (the nemesis's own survives).
_TERMINATE: Final = """
SELECT application_name, pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()"""


async def _kill_backends(
    rt: Runtime, database_url: str, duration_s: float
) -> tuple[int, int, list[str]]:
    """Terminates every other backend of `database_url`'s database now and then
    every `PG_KILL_EVERY_S` while `duration_s` lasts, so reconnecting clients
    are hit again mid-retry. Returns (rounds, backends killed, their
    application names, sorted and deduplicated)."""
    import asyncpg

    from sim.runtime.urls import driver_url

    # Without coordsim's parameters; every call bounded (DESIGN.md §9).
    conn = await asyncpg.connect(driver_url(database_url), timeout=10, command_timeout=10)
    rounds = killed = 0
    apps: set[str] = set()
    try:
        t0 = rt.now()
        while True:
            for row in await conn.fetch(_TERMINATE):
                if row[1]:
                    killed += 1
                    apps.add(row[0] or "?")
            rounds += 1
            if rt.now() - t0 + PG_KILL_EVERY_S > duration_s:
                break
            await rt.sleep(PG_KILL_EVERY_S)
    finally:
        await conn.close(timeout=5)
    return rounds, killed, sorted(apps)


def _processes(host: _Host) -> list[tuple[str, ProcessClock]]:
    """A coordinator's processes that call `write_ts`, with their clocks."""
    if isinstance(host.coord, MultiAdapterCoordinator):
        return [(f"{host.name}/adapter-{i + 1}", c) for i, c in enumerate(host.coord.clocks)]
    return [(host.name, host.clock)]


def _embedded(database_url: str | None) -> EmbeddedPostgres:
    """The embedded server holding `database_url`, which a pg-sigkill kills.

    Raises:
        InvalidUsage: the run's server is not one this process started (e.g.
            `$COORDSIM_POSTGRES_URL`'s), so there is no postmaster to kill.
    """
    from sim.services.postgres import embedded_serving

    pg = None if database_url is None else embedded_serving(database_url)
    if pg is None:
        raise InvalidUsage(
            f"{FaultKind.PG_SIGKILL} needs the embedded Postgres coordsim starts itself "
            "(unset COORDSIM_POSTGRES_URL)"
        )
    return pg


def _incarnation(coord: Coordinator) -> Any:
    """The coordinator's running components (both architectures expose
    `incarnation`; the `Coordinator` ABC does not declare it)."""
    return coord.incarnation  # type: ignore[attr-defined]
