"""The nemesis: scheduled and random faults injected into a running scenario.

A `Deployment` is one environment (in-memory stores in virtual mode; a fresh
Postgres database and files in real mode) and the coordinator processes running
on it; the `Nemesis` acts on it at the times of a `FaultPlan`: a coordinator
crashed and restarted on the same stores, a second coordinator started beside
the first (split brain), Blob/Consensus calls that fail or time out (the
`persist.faults` wrappers), a replica crashed or slowed, oracle round trips
slowed (virtual mode), the database's backends killed or the embedded
server's postmaster SIGKILLed and restarted (real mode). Every fault
is recorded as an internal event (`EventKind.FAULT`) so explanations can
mention it, and every fault heals before the nemesis returns, so a scenario
ends on a healthy deployment.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import string
import tempfile
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, Literal, final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import anyio.lowlevel
import anyio.to_thread

from controllers.replica import REPLICA_LATENCIES
from coordinator.environment import Environment
from coordinator.factory import build_coordinator
from persist.faults import UnreliableBlob, UnreliableConsensus
from persist.location import InvalidUsage
from persist.mem import MemBlob, MemConsensus
from sim.history import EventKind, Status
from sim.recording import event_sink
from sim.runtime import Distribution, LatencyModel

if TYPE_CHECKING:
    import random
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence

    from anyio.abc import TaskGroup, TaskStatus

    from coordinator.config import CoordinatorConfig
    from coordinator.session import Coordinator
    from persist.location import Blob, Consensus
    from sim.backends import EmbeddedPostgres
    from sim.history import HistoryRecorder
    from sim.runtime import Runtime

__all__ = [
    "DEFAULT_CLUSTER",
    "MODES",
    "Deployment",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "LatencySwitch",
    "Mode",
    "Nemesis",
    "Stores",
    "check_plan",
    "kinds_for",
    "open_stores",
    "switchable_latency",
]

#: The builtin cluster and its one replica (catalog.migrations.initial_state).
DEFAULT_CLUSTER: Final = (1, 1)
#: Store failure rates while a `store-errors` fault is active.
STORE_P_FAIL: Final = 0.05
STORE_P_TIMEOUT: Final = 0.05
#: Seconds between the kill rounds of a `pg-kill` fault longer than this.
PG_KILL_EVERY_S: Final = 0.01

#: "virtual" (in-memory stores, virtual time) or "real" (Postgres, wall time).
Mode = Literal["virtual", "real"]
MODES: Final[tuple[Mode, ...]] = ("virtual", "real")


class FaultKind(StrEnum):
    CRASH_RESTART = (
        "crash-restart"  # the oldest coordinator stops; a new one starts after `duration`
    )
    SPLIT_BRAIN = "split-brain"  # a second coordinator starts beside the first
    STORE_ERRORS = "store-errors"  # Blob/Consensus calls fail or time out for `duration`
    REPLICA_CRASH = "replica-crash"  # the default replica crashes; restarts after `duration`
    REPLICA_SLOW = "replica-slow"  # replica hops `factor` times slower for `duration`
    ORACLE_SLOW = "oracle-slow"  # oracle and stash round trips `factor` times slower
    PG_KILL = "pg-kill"  # the run's Postgres backends are terminated, repeatedly for `duration`
    PG_SIGKILL = "pg-sigkill"  # the embedded postmaster is SIGKILLed; restarted after `duration`


#: Which mode each fault needs, for the kinds that work in only one: pg-kill
#: and pg-sigkill need a server to kill; oracle-slow scales modeled round trips, and real
#: mode's oracle and stash round trips are real I/O that no model slows.
_ONLY_IN: Final[Mapping[FaultKind, Mode]] = {
    FaultKind.PG_KILL: "real",
    FaultKind.PG_SIGKILL: "real",
    FaultKind.ORACLE_SLOW: "virtual",
}


def kinds_for(mode: Mode, kinds: Iterable[FaultKind]) -> tuple[FaultKind, ...]:
    """`kinds` without those that cannot act in `mode` (random plans draw from these)."""
    return tuple(k for k in kinds if _ONLY_IN.get(k, mode) == mode)


def check_plan(plan: FaultPlan, mode: str) -> None:
    """Rejects a plan with a fault that would do nothing in `mode`.

    Raises:
        InvalidUsage: an unknown mode, or e.g. `pg-kill` in virtual mode.
    """
    if mode not in MODES:
        raise InvalidUsage(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    for fault in plan.faults:
        needs = _ONLY_IN.get(fault.kind, mode)
        if needs != mode:
            raise InvalidUsage(f"{fault.kind} needs --mode {needs} (fault {fault})")


@final
@dataclass(frozen=True, order=True)
class Fault:
    """One fault at virtual time `at_s` (seconds after the scenario starts)."""

    at_s: float
    kind: FaultKind
    duration_s: float = 0.0
    factor: float = 20.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.at_s) and self.at_s >= 0 and self.duration_s >= 0):
            raise InvalidUsage(f"a fault needs at_s >= 0 and duration_s >= 0: {self}")

    def __str__(self) -> str:
        s = f"{self.kind}@{self.at_s * 1000:g}ms"
        if self.duration_s:
            s += f"+{self.duration_s * 1000:g}ms"
        if self.kind in (FaultKind.REPLICA_SLOW, FaultKind.ORACLE_SLOW):
            s += f"x{self.factor:g}"
        return s

    @classmethod
    def parse(cls, text: str) -> Fault:
        """Reads `kind@AT ms[+DURATION ms][xFACTOR]`, the form `str()` writes."""
        try:
            kind, _, rest = text.strip().partition("@")
            factor = 20.0
            if "x" in rest:
                rest, _, f = rest.partition("x")
                factor = float(f)
            at, _, dur = rest.partition("+")
            return cls(
                float(at.removesuffix("ms")) / 1000,
                FaultKind(kind),
                float(dur.removesuffix("ms")) / 1000 if dur else 0.0,
                factor,
            )
        except ValueError as exc:
            raise InvalidUsage(
                f"bad fault {text!r}: expected kind@AT[+DUR][xFACTOR] ({exc})"
            ) from exc


@final
@dataclass(frozen=True)
class FaultPlan:
    """The faults of one run, in time order."""

    faults: tuple[Fault, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", tuple(sorted(self.faults)))

    def __len__(self) -> int:
        return len(self.faults)

    def __str__(self) -> str:
        return ",".join(str(f) for f in self.faults) or "none"

    def without(self, index: int) -> FaultPlan:
        return FaultPlan(self.faults[:index] + self.faults[index + 1 :])

    @classmethod
    def parse(cls, text: str) -> FaultPlan:
        if text.strip() in ("", "none"):
            return cls()
        return cls(tuple(Fault.parse(t) for t in text.split(",")))

    @classmethod
    def random(
        cls,
        rng: random.Random,
        kinds: Sequence[FaultKind],
        *,
        count: int,
        horizon_s: float,
        max_duration_s: float = 0.02,
    ) -> FaultPlan:
        """`count` faults of the given kinds at uniform times in `[0, horizon_s)`."""
        if not kinds:
            return cls()
        out = []
        for _ in range(count):
            kind = kinds[rng.randrange(len(kinds))]
            at = round(rng.uniform(0, horizon_s), 6)
            dur = round(rng.uniform(0.1, 1.0) * max_duration_s, 6)
            factor = float(rng.choice((5, 20, 50)))
            out.append(Fault(at, kind, dur, factor))
        return cls(tuple(out))


# --- latency spikes ------------------------------------------------------------------------


@final
class LatencySwitch:
    """Shared by every `_Switchable` distribution of a run: which groups are
    slowed now, and by what factor. Derived Runtimes copy the latency model by
    reference, so flipping the switch reaches every component at once."""

    def __init__(self) -> None:
        self.factors: dict[str, float] = {}


@final
class _Switchable(Distribution):
    def __init__(self, base: Distribution, switch: LatencySwitch, group: str) -> None:
        self.base, self.switch, self.group = base, switch, group

    def sample(self, rng: random.Random) -> float:
        return self.base.sample(rng) * self.switch.factors.get(self.group, 1.0)

    def to_dict(self) -> dict[str, Any]:
        return self.base.to_dict()

    def mean(self) -> float:
        return self.base.mean()


#: Which latency names each spike group slows.
_GROUPS: Final[Mapping[str, tuple[str, ...]]] = {
    # Every oracle operation by name: a calibrated profile gives each its own
    # distribution, which would shadow a spike of `oracle.pg` alone.
    "oracle": ("oracle.pg", *(f"oracle.pg.{op}" for op in ("read_ts", "write_ts", "peek_write_ts", "apply_write")),
               "stash.txn", "catalog.stash.txn"),
    "replica": ("replica.command", "replica.response"),
}


def switchable_latency(base: LatencyModel) -> tuple[LatencyModel, LatencySwitch]:
    """`base` with the oracle's and the replicas' round trips behind a switch."""
    switch = LatencySwitch()
    overrides: dict[str, Distribution] = {}
    for group, names in _GROUPS.items():
        for name in names:
            dist = base.distribution(name) if base.configures(name) else REPLICA_LATENCIES.get(name)
            if dist is None:
                dist = base.distribution(name)
            overrides[name] = _Switchable(dist, switch, group)
    return base.with_overrides(overrides), switch


# --- the deployment ------------------------------------------------------------------------


@final
@dataclass
class _Host:
    name: str
    coord: Coordinator
    #: The process is gone: its clients' connections drop (set before `stop`).
    killed: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    exited: anyio.Event = field(default_factory=anyio.Event)


@final
@dataclass(frozen=True)
class Stores:
    """The base stores of a deployment (before the fault wrappers)."""

    blob: Blob
    consensus: Consensus
    #: Real mode: the run's database (oracle, stashes, Consensus); None: virtual.
    database_url: str | None = None


@contextlib.asynccontextmanager
async def open_stores(postgres_url: str | None) -> AsyncIterator[Stores]:
    """In-memory stores (`postgres_url` None), or real ones: a fresh database on
    `postgres_url`'s server for Consensus, the oracle and the stashes, and files
    in a temporary directory for Blob; all removed afterwards, because shard ids
    and stash tables are not namespaced per run."""
    if postgres_url is None:
        yield Stores(MemBlob(), MemConsensus())
        return
    from persist.open import open_blob, open_consensus
    from sim.runner import drop_database, fresh_database

    db = await fresh_database(postgres_url)
    tmp = tempfile.mkdtemp(prefix="coordsim-anomalies-")
    try:
        blob = await open_blob(f"file://{tmp}?fsync=false")
        try:
            # Named, so a pg-kill's event says whose backends it killed.
            consensus = await open_consensus(
                _with_param(db, "application_name", "coordsim-consensus")
            )
            try:
                yield Stores(blob, consensus, db)
            finally:
                await consensus.close()
        finally:
            await blob.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        await drop_database(postgres_url, db)


def _with_param(url: str, name: str, value: str) -> str:
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), (name, value)]
    return urlunsplit(parts._replace(query=urlencode(query)))


@final
class Deployment:
    """One environment and the coordinator processes running on it.

    Coordinators are named `a`, `b`, … in start order; `live` lists those
    running. Clients pick one with `pick` and wait with `wait_changed` when the
    one they used went away.
    """

    def __init__(
        self,
        rt: Runtime,
        config: CoordinatorConfig,
        recorder: HistoryRecorder,
        tg: TaskGroup,
        switch: LatencySwitch,
        stores: Stores,
    ) -> None:
        self.rt = rt
        self.config = config
        self.recorder = recorder
        self.switch = switch
        frt = rt.derive("faults")
        self.blob = UnreliableBlob(stores.blob, frt.derive("blob").rng, p_fail=0.0, p_timeout=0.0)
        self.consensus = UnreliableConsensus(
            stores.consensus, frt.derive("consensus").rng, p_fail=0.0, p_timeout=0.0
        )
        self.blob.enabled = self.consensus.enabled = False
        #: Real mode: the run's own database (pg-kill terminates its backends).
        self.database_url = stores.database_url
        self.env = Environment(
            rt, blob=self.blob, consensus=self.consensus, postgres_url=stores.database_url
        )
        self.live: list[_Host] = []
        self._tg = tg
        self._started = 0
        self._changed = anyio.Event()

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls,
        rt: Runtime,
        config: CoordinatorConfig,
        recorder: HistoryRecorder,
        switch: LatencySwitch,
        *,
        postgres_url: str | None = None,
    ) -> AsyncIterator[Deployment]:
        """A deployment with its first coordinator started; on exit every
        coordinator stops.

        Args:
            postgres_url: real mode: the server on which the run gets a fresh
                database (dropped afterwards); None: virtual mode, in memory.
        """
        async with open_stores(postgres_url) as st, anyio.create_task_group() as tg:
            dep = cls(rt, config, recorder, tg, switch, st)
            await dep.start_coordinator()
            try:
                yield dep
            finally:
                for h in list(dep.live):
                    h.stop.set()

    @property
    def newest(self) -> Coordinator | None:
        return self.live[-1].coord if self.live else None

    def pick(self, index: int) -> Coordinator | None:
        """The coordinator client `index` should use: clients spread over the
        live coordinators (a load balancer in front of a split brain)."""
        if not self.live:
            return None
        return self.live[index % len(self.live)].coord

    def is_live(self, coord: Coordinator) -> bool:
        return any(h.coord is coord for h in self.live)

    def host_of(self, coord: Coordinator) -> _Host | None:
        return next((h for h in self.live if h.coord is coord), None)

    async def wait_changed(self) -> None:
        """Waits until a coordinator starts or stops."""
        await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def start_coordinator(self) -> str:
        """Starts a new coordinator on the same stores (fencing older ones)."""
        name = _name(self._started)
        self._started += 1
        await self._tg.start(self._host, name)
        self._notify()
        return name

    async def stop_coordinator(self, host: _Host) -> None:
        """Stops `host` as a crash does: its clients' connections drop first
        (their statements end `info`), then the process shuts down."""
        host.killed.set()
        for _ in range(3):  # let the dropped connections' cancellations land
            await anyio.lowlevel.checkpoint()
        host.stop.set()
        await host.exited.wait()

    async def _host(self, name: str, *, task_status: TaskStatus[None]) -> None:
        rt = self.rt if name == "a" else self.rt.derive(f"coordinator-{name}")
        host: _Host | None = None
        try:
            async with build_coordinator(
                self.config, self.env, rt, events=event_sink(self.recorder), actor=name
            ) as coord:
                host = _Host(name, coord)
                self.live.append(host)
                task_status.started()
                await host.stop.wait()
                self.live.remove(host)
                self._notify()
        finally:
            if host is not None:
                host.exited.set()


def _name(i: int) -> str:
    letters = string.ascii_lowercase
    return letters[i] if i < len(letters) else f"c{i}"


# --- the nemesis ----------------------------------------------------------------------------


@final
class Nemesis:
    """Runs a `FaultPlan` against a `Deployment`; `run` returns once every
    fault has been injected and healed."""

    def __init__(self, dep: Deployment, plan: FaultPlan) -> None:
        """Raises `InvalidUsage` if a fault cannot act on `dep` (`check_plan`)."""
        check_plan(plan, "virtual" if dep.database_url is None else "real")
        if any(f.kind is FaultKind.PG_SIGKILL for f in plan.faults):
            _embedded(dep.database_url)
        self.dep = dep
        self.plan = plan
        self.injected: list[Fault] = []

    async def run(self) -> None:
        rt, t0 = self.dep.rt, self.dep.rt.now()
        async with anyio.create_task_group() as tg:
            for fault in self.plan.faults:
                await rt.sleep(t0 + fault.at_s - rt.now())
                tg.start_soon(self._inject, fault)

    def _record(self, fault: Fault, start_ns: int, **detail: Any) -> None:
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
            await dep.stop_coordinator(victim)
            await rt.sleep(fault.duration_s)
            new = await dep.start_coordinator()
            self._record(fault, start, stopped=victim.name, started=new)
        elif fault.kind is FaultKind.SPLIT_BRAIN:
            if len(dep.live) >= 2:
                return  # one split at a time keeps the scenario readable
            new = await dep.start_coordinator()
            self._record(fault, start, started=new, beside=[h.name for h in dep.live[:-1]])
        elif fault.kind is FaultKind.STORE_ERRORS:
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
            compute.crash_replica(cluster, replica)
            await rt.sleep(fault.duration_s)
            # The coordinator may have been replaced meanwhile: its controller
            # (and replica) went with it.
            if dep.is_live(coord) and compute.replica(cluster, replica).crashed:
                compute.restart_replica(cluster, replica)
            self._record(fault, start, replica=f"{cluster}.{replica}")
        elif fault.kind is FaultKind.PG_KILL:
            assert dep.database_url is not None  # check_plan: real mode only
            rounds, killed, apps = await _kill_backends(rt, dep.database_url, fault.duration_s)
            self._record(fault, start, rounds=rounds, killed=killed, applications=apps)
        elif fault.kind is FaultKind.PG_SIGKILL:
            pg = _embedded(dep.database_url)
            # Blocking process management (the restart waits for the server):
            # off the event loop, which keeps serving the clients meanwhile.
            pid = await anyio.to_thread.run_sync(pg.sigkill_postmaster)
            if pid is None:
                return  # an overlapping pg-sigkill has it down; that one restarts it
            await rt.sleep(fault.duration_s)
            await anyio.to_thread.run_sync(pg.restart)
            self._record(fault, start, postmaster=pid)
        else:
            group = "oracle" if fault.kind is FaultKind.ORACLE_SLOW else "replica"
            dep.switch.factors[group] = fault.factor
            try:
                await rt.sleep(fault.duration_s)
            finally:
                dep.switch.factors.pop(group, None)
            self._record(fault, start, factor=fault.factor)


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

    conn = await asyncpg.connect(database_url, timeout=10)
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
        await conn.close()
    return rounds, killed, sorted(apps)


def _embedded(database_url: str | None) -> EmbeddedPostgres:
    """The embedded server holding `database_url`, which a pg-sigkill kills.

    Raises:
        InvalidUsage: the run's server is not one this process started (e.g.
            `$COORDSIM_POSTGRES_URL`'s), so there is no postmaster to kill.
    """
    from sim.backends import embedded_serving

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
