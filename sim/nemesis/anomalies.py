"""Anomaly scenarios: short, seeded client programs whose recorded histories the
checkers judge — seed 001's three steps (and its index variant), concurrent DDL
+ DML + reads, coordinator crash/restart, split brain, and busy batched reads —
optionally under a nemesis (`sim.nemesis.nemesis`).

`run_scenario` is the one entry point the regression suite, `coordsim anomalies`,
`coordsim shrink` and the Spark sweep call. In virtual mode (the default) same
arguments ⇒ same history; real mode runs the same bodies on the stock loop
against a fresh Postgres database, where the seed fixes the statements and the
fault plan but not the interleaving. Importing this module has no side effects.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, final

import anyio

from coordinator.config import KnownBad, named
from coordinator.session import Result
from coordinator.statements import SqlError, SqlState
from sim.history.recorder import HistoryRecorder
from sim.history.recording import RecordingSession
from sim.load.deployment import Deployment, switchable_latency
from sim.nemesis.nemesis import Nemesis
from sim.nemesis.plan import MODES, FaultKind, FaultPlan, Mode, check_plan, kinds_for
from sim.runtime.core import Runtime, run
from sim.runtime.errors import InvalidUsage
from sim.runtime.latency import Constant, LatencyModel, LogNormal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from coordinator.session import Coordinator
    from sim.history.model import Event, History

__all__ = [
    "CONFIG_NAMES",
    "MODES",
    "SCENARIOS",
    "Scenario",
    "Spec",
    "default_spec",
    "latency_model",
    "parse_known_bad",
    "run_scenario",
    "run_spec",
]

CONFIG_NAMES: Final = ("event-loop", "event-loop+pg-oracle", "decoupled")
#: Seconds (virtual, or wall in real mode) after which a run counts as stuck.
STUCK_AFTER_S: Final = 30.0
#: Limits of `--clients` and `--size` (operations or rounds per client), and of
#: their product: a history row costs ~0.5 KiB while recorded, so 10^8
#: operations is already more than a 24 GiB machine holds; a scenario's defaults
#: are a few clients and a dozen operations each.
MAX_CLIENTS: Final = 100_000
MAX_SIZE: Final = 10**7
MAX_SCENARIO_OPS: Final = 10**8
#: A slow fault's factor: 10^4 turns a 1 ms round trip into 10 s.
MAX_FAULT_FACTOR: Final = 10_000.0


def latency_model() -> LatencyModel:
    """Round trips of the order measured on an embedded Postgres (a stash or
    oracle statement ~0.5-2 ms) and a replica hop (~0.25 ms, the replica's
    default), as the coordinator tests use."""
    return LatencyModel(
        {
            "stash.txn": LogNormal(0.0015, 0.4),
            "catalog.stash.txn": LogNormal(0.002, 0.4),
            "oracle.pg": LogNormal(0.0008, 0.4),
            "controller.catalog_feed": LogNormal(0.002, 0.5),
        },
        default=Constant(0.0),
    )


@final
@dataclass(frozen=True)
class Scenario:
    """A scenario's defaults: how many clients and operations, which faults the
    seed draws (`fault_kinds` that can act in the run's mode, `fault_count`
    over the first `horizon_s`), and latency overrides."""

    name: str
    doc: str
    clients: int
    size: int
    fault_kinds: tuple[FaultKind, ...] = ()
    fault_count: int = 0
    horizon_s: float = 0.05
    oracle_spread: float | None = None  # sigma of oracle.pg (busy-reads: queueing at the server)


SCENARIOS: Final[dict[str, Scenario]] = {
    s.name: s
    for s in (
        Scenario(
            "seed001", "seed 001: c1 CREATE TABLE, c2 INSERT, c1 SELECT; pairs in parallel", 2, 4
        ),
        Scenario(
            "seed001-index",
            "seed 001 with an index on the table, so the SELECT reads a dataflow",
            2,
            3,
        ),
        Scenario(
            "ddl-dml",
            "clients insert into and read shared tables while creating and dropping their own; random replica, oracle and store faults",
            4,
            10,
            fault_kinds=(
                FaultKind.REPLICA_SLOW,
                FaultKind.ORACLE_SLOW,
                FaultKind.REPLICA_CRASH,
                FaultKind.STORE_ERRORS,
                # Last, so virtual mode (which drops it) draws the plans it always drew.
                FaultKind.PG_KILL,
            ),
            fault_count=2,
        ),
        Scenario(
            "crash-restart",
            "ddl-dml while the coordinator crashes and restarts on the same stores",
            4,
            10,
            fault_kinds=(FaultKind.CRASH_RESTART,),
            fault_count=2,
        ),
        Scenario(
            "split-brain",
            "readers and writers (ddl-dml) while a second coordinator starts beside the first; readers stay on the old one",
            4,
            10,
            fault_kinds=(FaultKind.SPLIT_BRAIN,),
            fault_count=1,
            horizon_s=0.03,
        ),
        Scenario(
            "busy-reads",
            "background readers keep the read_ts batcher busy; insert n, then read it",
            8,
            12,
            oracle_spread=1.0,
        ),
    )
}


def parse_known_bad(names: list[str] | tuple[str, ...]) -> KnownBad:
    """`KnownBad` with the named toggles on (`-` or `_` spelling)."""
    known = set(KnownBad.__dataclass_fields__)
    toggles = {}
    for n in names:
        key = n.replace("-", "_")
        if key not in known:
            raise InvalidUsage(
                f"unknown known-bad variant {n!r}; known: {', '.join(sorted(known))}"
            )
        toggles[key] = True
    return KnownBad(**toggles)


@final
@dataclass(frozen=True)
class Spec:
    """Everything one run depends on: same spec ⇒ same history (virtual mode;
    real mode replays the same statements and faults, not the same interleaving).

    Raises:
        InvalidUsage: an unknown mode, or a fault that cannot act in it
            (`pg-kill` needs real mode, `oracle-slow` virtual).
    """

    scenario: str
    config: str
    seed: int
    known_bad: KnownBad = field(default_factory=KnownBad)
    clients: int = 2
    size: int = 4
    faults: FaultPlan = field(default_factory=FaultPlan)
    mode: Mode = "virtual"

    def __post_init__(self) -> None:
        check_plan(self.faults, self.mode)
        # Lower bounds (>= 1) are `_run`'s: the shrinker steps down to them.
        if self.clients > MAX_CLIENTS:
            raise InvalidUsage(f"--clients {self.clients} exceeds the maximum {MAX_CLIENTS} clients")
        if self.size > MAX_SIZE:
            raise InvalidUsage(f"--size {self.size} exceeds the maximum {MAX_SIZE} operations per client")
        if self.clients * self.size > MAX_SCENARIO_OPS:
            raise InvalidUsage(
                f"--clients {self.clients} x --size {self.size} exceeds the maximum "
                f"{MAX_SCENARIO_OPS} operations in one run"
            )
        if not -(2**63) < self.seed < 2**63:
            raise InvalidUsage(f"--seed {self.seed} does not fit in 64 bits (a trace stores it as int64)")
        for fault in self.faults.faults:
            # A fault still pending when the run counts as stuck would turn a
            # typo (`@99999999ms`) into a "liveness bug" after 30 s.
            end = fault.at_s + fault.duration_s
            if not end < STUCK_AFTER_S:
                raise InvalidUsage(
                    f"fault {fault} ends {end:g} s into the run; a run is stopped as stuck after {STUCK_AFTER_S:g} s"
                )
            if not (math.isfinite(fault.factor) and 0 < fault.factor <= MAX_FAULT_FACTOR):
                raise InvalidUsage(f"fault {fault}: factor must be > 0 and <= {MAX_FAULT_FACTOR:g}, got {fault.factor}")

    def command(self) -> str:
        """A one-line shell command replaying this run."""
        parts = [
            "uv",
            "run",
            "coordsim",
            "anomalies",
            "run",
            self.scenario,
            "--config",
            self.config,
        ]
        parts += ["--seed", str(self.seed)]
        if self.mode != "virtual":
            parts += ["--mode", self.mode]
        for k in self.known_bad.enabled():
            parts += ["--known-bad", k.replace("_", "-")]
        parts += ["--clients", str(self.clients), "--size", str(self.size)]
        parts += ["--faults", str(self.faults)]
        return shlex.join(parts)


def default_spec(
    name: str,
    config_name: str,
    seed: int,
    *,
    known_bad: KnownBad | None = None,
    mode: Mode = "virtual",
) -> Spec:
    """The spec `run_scenario` uses when given only a scenario, config and seed:
    the scenario's sizes and a fault plan drawn from the seed (from the fault
    kinds that can act in `mode`)."""
    sc = _scenario(name)
    named(config_name)  # unknown names fail here, with the list of known ones
    if mode not in MODES:
        raise InvalidUsage(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    rt_rng = _plan_rng(seed)
    plan = FaultPlan.random(
        rt_rng, kinds_for(mode, sc.fault_kinds), count=sc.fault_count, horizon_s=sc.horizon_s
    )
    return Spec(name, config_name, seed, known_bad or KnownBad(), sc.clients, sc.size, plan, mode)


def _plan_rng(seed: int) -> random.Random:
    return Runtime(seed=seed).derive("nemesis-plan").rng


def _scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise InvalidUsage(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def run_scenario(
    name: str,
    config_name: str,
    seed: int,
    *,
    known_bad: KnownBad = KnownBad(),  # noqa: B008 - frozen, never mutated
    faults: FaultPlan | None = None,
    size: int | None = None,
    clients: int | None = None,
    mode: Mode = "virtual",
    postgres_url: str | None = None,
) -> tuple[History, list[Event]]:
    """Runs one scenario and returns its history and internal events.

    Args:
        name: a key of `SCENARIOS`.
        config_name: a named coordinator configuration (`coordinator.config.named`).
        seed: drives every choice (jitter, operations, the default fault plan).
        known_bad: defects to switch on.
        faults: the nemesis plan; None: the scenario's default plan for `seed`.
        size: operations (or rounds) per client; None: the scenario's default.
        clients: None: the scenario's default.
        mode: "virtual" or "real" (see `run_spec`).
        postgres_url: real mode's server (see `run_spec`).
    """
    spec = default_spec(name, config_name, seed, known_bad=known_bad, mode=mode)
    spec = replace(
        spec,
        faults=spec.faults if faults is None else faults,
        size=spec.size if size is None else size,
        clients=spec.clients if clients is None else clients,
    )
    return run_spec(spec, postgres_url=postgres_url)


def run_spec(spec: Spec, *, postgres_url: str | None = None) -> tuple[History, list[Event]]:
    """Runs `spec` (see `run_scenario`).

    Virtual mode: the virtual-time loop and in-memory stores with modeled
    latency. Real mode: the stock loop, and a fresh database (dropped
    afterwards) on `postgres_url`'s server — else `$COORDSIM_POSTGRES_URL`'s,
    else an embedded throwaway cluster started for this run — holding persist's
    Consensus, the oracle and the stashes, with Blob in files. Only the modeled
    parts (replica hops, the catalog feed, coordinator CPU) keep their latency
    model there.

    Raises:
        InvalidUsage: a bad spec.
        BackendUnavailable: real mode found no Postgres.
    """
    if spec.mode == "virtual":
        if postgres_url is not None:
            raise InvalidUsage("postgres_url is for real mode; this spec is virtual")
        return _run(spec, None)
    if postgres_url is not None:
        return _run(spec, postgres_url)
    from sim.services.postgres import postgres_server

    with postgres_server(fsync=False) as url:
        return _run(spec, url)


def _run(spec: Spec, postgres_url: str | None) -> tuple[History, list[Event]]:
    sc = _scenario(spec.scenario)
    if spec.clients < 1 or spec.size < 1:
        raise InvalidUsage(f"a scenario needs clients >= 1 and size >= 1: {spec}")
    cfg = named(spec.config).with_overrides(known_bad=spec.known_bad)
    base = latency_model()
    if sc.oracle_spread is not None:
        base = base.with_overrides({"oracle.pg": LogNormal(0.0008, sc.oracle_spread)})
    latency, switch = switchable_latency(base)
    body = _BODIES[spec.scenario]

    async def main(rt: Runtime) -> HistoryRecorder:
        rec = HistoryRecorder(rt.now)
        # Virtual seconds: a scenario takes well under one; a run that has not
        # finished after this long is stuck (a liveness bug), not slow.
        with anyio.fail_after(STUCK_AFTER_S):
            await _scenario_main(rt, rec)
        return rec

    async def _scenario_main(rt: Runtime, rec: HistoryRecorder) -> None:
        async with Deployment.running(rt, cfg, rec, switch, postgres_url=postgres_url) as dep:
            ctx = _Ctx(rt, dep, rec, spec)
            async with anyio.create_task_group() as tg:
                tg.start_soon(Nemesis(dep, spec.faults).run)
                await body(ctx)

    rec = run(main, seed=spec.seed, virtual=postgres_url is None, latency=latency)
    return rec.history(), rec.events()


# --- clients ---------------------------------------------------------------------------------

#: The coordinator went away under the statement, or fenced it.
_GONE: Final = frozenset({SqlState.ADMIN_SHUTDOWN.value})


@final
class _Client:
    """One client: sticks to a live coordinator, moves (as a fresh process)
    when the one it used stops, fences it, or a new one takes its share of
    clients."""

    def __init__(self, ctx: _Ctx, index: int) -> None:
        self.ctx, self.index, self.name = ctx, index, f"c{index + 1}"
        self.rng = ctx.rt.derive(f"client-{index}").rng
        self._session: RecordingSession | None = None
        self._coord: Coordinator | None = None
        self._gone: list[Coordinator] = []

    async def _bind(self) -> RecordingSession:
        dep = self.ctx.dep
        while True:
            live = [h.coord for h in dep.live if all(h.coord is not g for g in self._gone)]
            if live:
                break
            await dep.wait_changed()
        coord = live[self.index % len(live)]
        if coord is not self._coord or self._session is None:
            if self._session is None:
                self._session = RecordingSession(coord.connect(), self.ctx.rec, client=self.name)
            else:
                self._session.rebind(coord.connect())
            self._coord = coord
        return self._session

    async def execute(self, sql: str) -> Result:
        """Runs `sql` on this client's coordinator. If that process dies
        meanwhile the connection drops: the statement ends `info` (the
        recording session records a cancelled statement so) and the client
        moves on."""
        session = await self._bind()
        coord = self._coord
        assert coord is not None
        host = self.ctx.dep.host_of(coord)
        result: Result | None = None
        async with anyio.create_task_group() as tg:

            async def drop_on_crash() -> None:
                if host is not None:
                    await host.killed.wait()
                    tg.cancel_scope.cancel()

            tg.start_soon(drop_on_crash)
            try:
                result = await session.execute(sql)
            except InvalidUsage as exc:
                # A decoupled coordinator stopped under the statement lets its
                # oracle's "closed" error escape instead of answering 57P01
                # (reported to the lead); the recording session already
                # recorded the statement as `info`.
                if self.ctx.dep.is_live(coord):
                    raise
                result = Result.failed(SqlError(SqlState.ADMIN_SHUTDOWN, f"connection lost: {exc}"))
            tg.cancel_scope.cancel()
        if result is None:
            result = Result.failed(SqlError(SqlState.ADMIN_SHUTDOWN, "connection lost"))
        if result.code in _GONE or not self.ctx.dep.is_live(coord):
            self._gone.append(coord)
        return result

    async def jitter(self, upto: float = 0.002) -> None:
        await self.ctx.rt.sleep(self.rng.uniform(0, upto))


@final
@dataclass
class _Ctx:
    rt: Runtime
    dep: Deployment
    rec: HistoryRecorder
    spec: Spec

    def clients(self, n: int | None = None) -> list[_Client]:
        return [_Client(self, i) for i in range(self.spec.clients if n is None else n)]


async def _all(*fns: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async with anyio.create_task_group() as tg:
        for fn in fns:
            tg.start_soon(fn)


# --- scenario bodies -----------------------------------------------------------------------------


async def _seed001(ctx: _Ctx, *, index: bool) -> None:
    """Seed 001's c1 CREATE TABLE foo; c2 INSERT INTO foo; c1 SELECT * FROM foo —
    each step starting after the previous one returned (the side channel) —
    for `size` rounds, by `clients // 2` pairs at once."""
    clients = ctx.clients(max(2, ctx.spec.clients + ctx.spec.clients % 2))

    async def pair(p: int, c1: _Client, c2: _Client) -> None:
        for n in range(ctx.spec.size):
            t = f"foo_{p}_{n}"
            await c1.execute(f"CREATE TABLE {t} (a int)")
            if index:
                await c1.execute(f"CREATE INDEX {t}_idx ON {t} (a)")
            await c1.jitter()
            await c2.execute(f"INSERT INTO {t} VALUES ({p * 1000 + n})")
            await c2.jitter()
            await c1.execute(f"SELECT * FROM {t}")

    pairs = [(clients[i], clients[i + 1]) for i in range(0, len(clients) - 1, 2)]
    await _all(*(lambda p=p, a=a, b=b: pair(p, a, b) for p, (a, b) in enumerate(pairs)))


async def _seed001_plain(ctx: _Ctx) -> None:
    await _seed001(ctx, index=False)


async def _seed001_index(ctx: _Ctx) -> None:
    await _seed001(ctx, index=True)


async def _ddl_dml(ctx: _Ctx, *, readers: bool = False) -> None:
    """Each client, `size` times: insert a unique value into or read one of a
    few shared tables, or create / drop / write / read its own table — so
    catalog changes interleave with every peek and write. Tables are dropped
    only by the client that uses them: an INSERT racing a DROP of its table is
    the pinned `test_insert_racing_drop` case (tests/anomalies).

    With `readers`, even-numbered clients only read: after a split they stay
    on the old coordinator (clients spread by index) while the others write
    through the new one — the hazard confirm_leadership guards against."""
    shared = max(2, ctx.spec.clients // 2)

    async def client(c: _Client) -> None:
        own, exists = f"d{c.index}", False
        for i in range(ctx.spec.size):
            r = c.rng.random()
            value = c.index * 10_000 + i
            if readers and c.index % 2 == 0:
                await c.execute(f"SELECT * FROM t{c.rng.randrange(shared)}")
            elif r < 0.15:
                await c.execute(f"DROP TABLE {own}" if exists else f"CREATE TABLE {own} (a int)")
                exists = not exists
            elif r < 0.25:
                await c.execute(
                    f"INSERT INTO {own} VALUES ({value})" if exists else f"SELECT * FROM {own}"
                )
            elif r < 0.6:
                await c.execute(f"INSERT INTO t{c.rng.randrange(shared)} VALUES ({value})")
            else:
                await c.execute(f"SELECT * FROM t{c.rng.randrange(shared)}")
            await c.jitter()

    setup = _Client(ctx, ctx.spec.clients)
    for k in range(shared):
        await setup.execute(f"CREATE TABLE t{k} (a int)")
    await _all(*(lambda c=c: client(c) for c in ctx.clients()))


async def _split_brain(ctx: _Ctx) -> None:
    await _ddl_dml(ctx, readers=True)


async def _busy_reads(ctx: _Ctx) -> None:
    """Unrecorded background readers keep the read_ts batcher busy; one client
    inserts n and, once acknowledged, another reads the table."""
    writer, reader, setup = _Client(ctx, 0), _Client(ctx, 1), _Client(ctx, 2)
    await setup.execute("CREATE TABLE t (a int)")
    done = anyio.Event()

    async def background(k: int) -> None:
        while not done.is_set():
            coord = ctx.dep.newest
            if coord is None:
                await ctx.dep.wait_changed()
                continue
            await coord.connect().execute("SELECT count(*) FROM t")

    async def main() -> None:
        for n in range(ctx.spec.size):
            await writer.jitter()
            await writer.execute(f"INSERT INTO t VALUES ({n})")
            await reader.execute("SELECT * FROM t")
        done.set()

    await _all(main, *(lambda k=k: background(k) for k in range(max(0, ctx.spec.clients - 2))))


_BODIES: Final[dict[str, Callable[[_Ctx], Awaitable[None]]]] = {
    "seed001": _seed001_plain,
    "seed001-index": _seed001_index,
    "ddl-dml": _ddl_dml,
    "crash-restart": _ddl_dml,
    "split-brain": _split_brain,
    "busy-reads": _busy_reads,
}

if TYPE_CHECKING:
    import random
