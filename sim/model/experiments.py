"""Small, fixed experiments that reproduce what the seeds' system is known to
do, each a function returning its measurements: `coordsim validate` holds
them to published facts, and the fidelity tests to the issue's numbers.

All run in virtual mode on the shipped latency profile (optionally with some
names overridden, e.g. a 500 ms oracle), on in-memory stores behind modeled
latencies, with a fixed seed: the same call gives the same numbers.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar, final

import anyio

from sim.history.recorder import HistoryRecorder
from sim.load.deployment import Deployment, LatencySwitch
from sim.load.latency_profile import load_profile
from sim.load.run_config import DEFAULT_PROFILE
from sim.runtime.core import run
from sim.runtime.latency import Constant, LatencyModel

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from coordinator.config import CoordinatorConfig
    from coordinator.session import Coordinator, CoordinatorStatistics, Session
    from sim.runtime.core import Runtime

__all__ = [
    "BatchingResult",
    "Latencies",
    "OracleTraffic",
    "SubscribeStarts",
    "ThroughputResult",
    "VictimResult",
    "WriteResult",
    "batched_read_ts",
    "latency_model",
    "oracle_traffic",
    "percentile",
    "statement_latencies",
    "subscribe_starts",
    "throughput",
    "victim_select_one",
    "writes_per_commit",
]

T = TypeVar("T")


def latency_model(overrides_ms: Mapping[str, float] | None = None) -> LatencyModel:
    """The shipped profile with `overrides_ms` (name → constant ms) on top. A
    name overrides its more specific names too (`oracle.pg` replaces
    `oracle.pg.read_ts`, …), as a user who sets it means."""
    spec = load_profile(DEFAULT_PROFILE).to_dict()
    for name, ms in (overrides_ms or {}).items():
        for key in [k for k in spec if k.startswith(name + ".")]:
            del spec[key]
        spec[name] = Constant(ms / 1000).to_dict()
    return LatencyModel.from_dict(spec)


def percentile(samples: list[float], q: float) -> float:
    """The `q`-th percentile (0-100, nearest rank) of `samples`."""
    ordered = sorted(samples)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


@final
@dataclass(frozen=True)
class Latencies:
    """Latency summary in ms over `n` operations."""

    n: int
    p50_ms: float
    p95_ms: float
    mean_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latencies:
        if not seconds:
            return cls(0, float("nan"), float("nan"), float("nan"))
        ms = [s * 1000 for s in seconds]
        return cls(len(ms), percentile(ms, 50), percentile(ms, 95), statistics.fmean(ms))


def _run(
    config: CoordinatorConfig,
    body: Callable[[Runtime, Coordinator], Awaitable[T]],
    *,
    seed: int,
    overrides_ms: Mapping[str, float] | None,
) -> T:
    """`body` on a fresh modeled deployment of `config` (virtual mode, the
    shipped profile with `overrides_ms`): its result."""

    async def main(rt: Runtime) -> T:
        deployment = Deployment.running(rt, config, HistoryRecorder(rt.now), LatencySwitch(), modeled=True)
        async with deployment as dep:
            assert dep.newest is not None
            return await body(rt, dep.newest)

    return run(main, seed=seed, virtual=True, latency=latency_model(overrides_ms))


@final
@dataclass(frozen=True)
class VictimResult:
    """The victim's `SELECT 1` latencies beside the inserters, and what the
    inserters achieved."""

    victim: Latencies
    inserts: int
    writes_per_commit: float


#: The victim's pause between queries: it probes the loop, it does not load it.
VICTIM_THINK_S: Final = 0.01


def victim_select_one(
    config: CoordinatorConfig,
    *,
    inserters: int = 8,
    duration_s: float = 30.0,
    warmup_s: float = 2.0,
    seed: int = 1,
    overrides_ms: Mapping[str, float] | None = None,
) -> VictimResult:
    """Seed 000's victim experiment: one session loops `SELECT 1` (pausing
    `VICTIM_THINK_S` between queries) beside `inserters` closed-loop INSERT
    sessions; the victim's latencies after `warmup_s`, for `duration_s`
    simulated seconds. A constant query needs nothing but the coordinator, so
    its latency is the time it waits for the loop."""

    async def body(rt: Runtime, coord: Coordinator) -> VictimResult:
        assert (await coord.connect().execute("CREATE TABLE t (a int)")).ok
        stop = anyio.Event()
        latencies: list[float] = []
        inserts = [0]
        start = rt.now()

        async def inserter(i: int) -> None:
            s = coord.connect()
            k = 0
            while not stop.is_set():
                k += 1
                if (await s.execute(f"INSERT INTO t VALUES ({i * 1_000_000 + k})")).ok:
                    inserts[0] += 1

        async def victim() -> None:
            s = coord.connect()
            while not stop.is_set():
                t0 = rt.now()
                r = await s.execute("SELECT 1")
                if r.ok and t0 - start >= warmup_s:
                    latencies.append(rt.now() - t0)
                await rt.sleep(VICTIM_THINK_S)

        before: list[CoordinatorStatistics] = []
        async with anyio.create_task_group() as tg:
            for i in range(inserters):
                tg.start_soon(inserter, i)
            tg.start_soon(victim)
            await rt.sleep(warmup_s)
            before.append(coord.statistics())
            await rt.sleep(duration_s)
            after = coord.statistics()
            stop.set()
        commits = after.group_commits - before[0].group_commits
        writes = after.writes_group_committed - before[0].writes_group_committed
        return VictimResult(Latencies.of(latencies), inserts[0], writes / commits if commits else 0.0)

    return _run(config, body, seed=seed, overrides_ms=overrides_ms)


@final
@dataclass(frozen=True)
class WriteResult:
    """Closed-loop writers: writes per group commit (of those that carried
    writes: the periodic empty ones do not count), throughput (simulated
    ops/s), backend oracle queries and loop messages per statement."""

    writes_per_commit: float
    ops_per_s: float
    oracle_calls_per_op: float
    loop_messages_per_op: float
    latency: Latencies


def writes_per_commit(
    config: CoordinatorConfig,
    *,
    clients: int,
    statement: str = "insert",
    ops_per_client: int = 10,
    seed: int = 1,
    overrides_ms: Mapping[str, float] | None = None,
) -> WriteResult:
    """`clients` sessions each run `ops_per_client` INSERTs (or UPDATEs of one
    row per client, `statement="update"`), all at once, on a fresh table."""

    async def body(rt: Runtime, coord: Coordinator) -> WriteResult:
        setup = coord.connect()
        assert (await setup.execute("CREATE TABLE t (a int, b int)")).ok
        if statement == "update":
            rows = ", ".join(f"({i}, 0)" for i in range(clients))
            assert (await setup.execute(f"INSERT INTO t VALUES {rows}")).ok
        before = coord.statistics()
        latencies: list[float] = []
        t0 = rt.now()

        async def client(i: int) -> None:
            s = coord.connect()
            for k in range(ops_per_client):
                sql = (f"UPDATE t SET b = b + 1 WHERE a = {i}" if statement == "update"
                       else f"INSERT INTO t VALUES ({i * 1_000_000 + k}, 0)")
                start = rt.now()
                r = await s.execute(sql)
                assert r.ok, r.error
                latencies.append(rt.now() - start)

        async with anyio.create_task_group() as tg:
            for i in range(clients):
                tg.start_soon(client, i)
        span = rt.now() - t0
        after = coord.statistics()
        commits = (after.group_commits - after.empty_group_commits) - (before.group_commits - before.empty_group_commits)
        writes = after.writes_group_committed - before.writes_group_committed
        statements = after.statements - before.statements or 1
        return WriteResult(
            writes_per_commit=writes / commits if commits else 0.0,
            ops_per_s=clients * ops_per_client / span if span > 0 else 0.0,
            oracle_calls_per_op=(after.oracle_calls - before.oracle_calls) / statements,
            loop_messages_per_op=(after.loop_messages - before.loop_messages) / statements,
            latency=Latencies.of(latencies),
        )

    return _run(config, body, seed=seed, overrides_ms=overrides_ms)


@final
@dataclass(frozen=True)
class ThroughputResult:
    """A built-in workload's closed loop: simulated ops/s over the window,
    latencies, failed operations, writes per group commit, and the
    coordinator's counters per statement."""

    ops_per_s: float
    latency: Latencies
    errors: int
    writes_per_commit: float
    oracle_calls_per_op: float
    loop_messages_per_op: float


def throughput(
    config: CoordinatorConfig,
    workload_name: str,
    *,
    clients: int,
    duration_s: float = 2.0,
    warmup_s: float = 0.5,
    tables: int = 4,
    seed: int = 1,
    overrides_ms: Mapping[str, float] | None = None,
) -> ThroughputResult:
    """`clients` closed-loop sessions run `workload_name` (see `sim.load.workloads`)
    for `warmup_s`, then are measured for `duration_s` simulated seconds."""
    from sim.load.workloads import OpContext, workload

    wl = workload(workload_name)

    async def body(rt: Runtime, coord: Coordinator) -> ThroughputResult:
        await wl.setup(coord.connect(), tables)
        stop = anyio.Event()
        measuring = [False]
        latencies: list[float] = []
        errors = [0]
        counter = [0]

        async def client(i: int) -> None:
            s = coord.connect()
            k = 0
            while not stop.is_set():
                t0 = rt.now()
                r = await wl.op(s, OpContext(i, k, tables, rt, counter, level=clients))
                k += 1
                if measuring[0]:
                    if r.ok:
                        latencies.append(rt.now() - t0)
                    else:
                        errors[0] += 1

        async with anyio.create_task_group() as tg:
            for i in range(clients):
                tg.start_soon(client, i)
            await rt.sleep(warmup_s)
            before = coord.statistics()
            measuring[0] = True
            await rt.sleep(duration_s)
            measuring[0] = False
            after = coord.statistics()
            stop.set()
        commits = after.group_commits - before.group_commits
        writes = after.writes_group_committed - before.writes_group_committed
        statements = after.statements - before.statements or 1
        return ThroughputResult(
            ops_per_s=len(latencies) / duration_s,
            latency=Latencies.of(latencies),
            errors=errors[0],
            writes_per_commit=writes / commits if commits else 0.0,
            oracle_calls_per_op=(after.oracle_calls - before.oracle_calls) / statements,
            loop_messages_per_op=(after.loop_messages - before.loop_messages) / statements,
        )

    return _run(config, body, seed=seed, overrides_ms=overrides_ms)


@final
@dataclass(frozen=True)
class BatchingResult:
    """`read_ts` through `BatchingOracle`: backing queries per round trip of
    the window, and the callers' waits in round trips."""

    calls: int
    backing_queries: int
    queries_per_round_trip: float
    max_wait_round_trips: float
    p50_wait_round_trips: float


def batched_read_ts(
    *, callers: int, round_trip_ms: float = 1.0, duration_s: float = 1.0, seed: int = 1
) -> BatchingResult:
    """`callers` tasks call `read_ts()` through a `BatchingOracle` over the
    modeled Postgres oracle whose every statement takes `round_trip_ms`, each
    pausing a random fraction of a round trip between calls (so requests
    arrive at every phase of a backing call, not in lockstep with it)."""
    from oracle.batching import BatchingOracle
    from oracle.open import OracleBackend, OracleSpec, open_oracles

    rtt = round_trip_ms / 1000

    async def main(rt: Runtime) -> BatchingResult:
        oracles = await open_oracles(OracleSpec(OracleBackend.MODELED), rt)
        inner = await oracles.timeline("realtime", owns_backend=True)
        waits: list[float] = []
        async with BatchingOracle(inner, rt) as oracle:
            stop = anyio.Event()

            async def caller(i: int) -> None:
                pause = random.Random(seed * 1_000_003 + i)
                while not stop.is_set():
                    await rt.sleep(pause.random() * rtt)
                    t0 = rt.now()
                    await oracle.read_ts()
                    waits.append(rt.now() - t0)

            async with anyio.create_task_group() as tg:
                for i in range(callers):
                    tg.start_soon(caller, i)
                await rt.sleep(duration_s)
                stop.set()
            stats = inner.statistics()
        backing = stats.ops["read_ts"].start_count if "read_ts" in stats.ops else 0
        in_rtt = [w / rtt for w in waits]
        return BatchingResult(
            calls=len(waits),
            backing_queries=backing,
            queries_per_round_trip=backing / (duration_s / rtt),
            max_wait_round_trips=max(in_rtt),
            p50_wait_round_trips=percentile(in_rtt, 50),
        )

    return run(main, seed=seed, virtual=True, latency=LatencyModel({"oracle.pg": Constant(rtt)}, default=Constant(0.0)))


@final
@dataclass(frozen=True)
class DdlResult:
    """CREATE TABLE and DROP TABLE latencies on a catalog padded with tables."""

    create: Latencies
    drop: Latencies


def ddl_latency(
    config: CoordinatorConfig,
    *,
    padding: int,
    reps: int = 20,
    seed: int = 1,
    overrides_ms: Mapping[str, float] | None = None,
) -> DdlResult:
    """The DDL scalability audit's experiment (Materialize
    test/envd-ddl-scalability): pad the catalog with `padding` tables, then
    time `reps` CREATE TABLEs and the `reps` DROP TABLEs of them, one at a
    time from one session."""

    async def body(rt: Runtime, coord: Coordinator) -> DdlResult:
        s = coord.connect()
        for i in range(padding):
            assert (await s.execute(f"CREATE TABLE pad_{i} (a int)")).ok
        timings: dict[str, list[float]] = {"create": [], "drop": []}
        for kind, sql in (("create", "CREATE TABLE x_{} (a int)"), ("drop", "DROP TABLE x_{}")):
            for j in range(reps):
                t0 = rt.now()
                r = await s.execute(sql.format(j))
                assert r.ok, r.error
                timings[kind].append(rt.now() - t0)
        return DdlResult(Latencies.of(timings["create"]), Latencies.of(timings["drop"]))

    return _run(config, body, seed=seed, overrides_ms=overrides_ms)


@final
@dataclass(frozen=True)
class OracleTraffic:
    """Backing oracle queries while `inserters` closed-loop sessions insert (0:
    an idle environment, where only the keepalive tick commits): per second
    and per group commit (the periodic empty ones included)."""

    queries_per_s: float
    queries_per_commit: float
    commits_per_s: float


def oracle_traffic(
    config: CoordinatorConfig,
    *,
    inserters: int,
    duration_s: float = 30.0,
    warmup_s: float = 2.0,
    seed: int = 1,
    overrides_ms: Mapping[str, float] | None = None,
) -> OracleTraffic:
    """PR #37706's profile of an environment's oracle traffic: count the
    queries that reach the oracle's backing store over `duration_s`."""

    async def body(rt: Runtime, coord: Coordinator) -> OracleTraffic:
        assert (await coord.connect().execute("CREATE TABLE t (a int)")).ok
        await rt.sleep(warmup_s)
        stop = anyio.Event()

        async def inserter(i: int) -> None:
            s = coord.connect()
            k = 0
            while not stop.is_set():
                await s.execute(f"INSERT INTO t VALUES ({i * 1_000_000 + k})")
                k += 1

        async with anyio.create_task_group() as tg:
            for i in range(inserters):
                tg.start_soon(inserter, i)
            before = coord.statistics()
            await rt.sleep(duration_s)
            after = coord.statistics()
            stop.set()
        queries = after.oracle_calls - before.oracle_calls
        commits = after.group_commits - before.group_commits
        return OracleTraffic(queries / duration_s, queries / commits if commits else math.nan, commits / duration_s)

    return _run(config, body, seed=seed, overrides_ms=overrides_ms)


@final
@dataclass(frozen=True)
class SubscribeStarts:
    """How long `subscribers` SUBSCRIBEs started together take to answer their
    `as_of`: the last one's latency (the batch's), averaged over `rounds`, and
    every start's latency."""

    last_ms: float
    starts: Latencies
    rounds: int


def subscribe_starts(
    config: CoordinatorConfig,
    *,
    subscribers: int,
    rounds: int = 5,
    warmup_s: float = 2.0,
    pause_s: float = 2.0,
    seed: int = 1,
    overrides_ms: Mapping[str, float] | None = None,
) -> SubscribeStarts:
    """PR #37355's reproducer: `subscribers` sessions each start a SUBSCRIBE
    at once (EXPLAIN TIMESTAMP took the same path: a linearized `read_ts`),
    `rounds` times, `pause_s` apart, after `warmup_s` of an idle environment
    whose keepalive tick commits as it always does."""

    async def body(rt: Runtime, coord: Coordinator) -> SubscribeStarts:
        assert (await coord.connect().execute("CREATE TABLE t (a int)")).ok
        await rt.sleep(warmup_s)
        sessions = [coord.connect() for _ in range(subscribers)]
        lasts: list[float] = []
        starts: list[float] = []
        for _ in range(rounds):
            t0 = rt.now()
            ends: list[float] = []

            async def start(s: Session, t0: float = t0, ends: list[float] = ends) -> None:
                async with s.subscribe("SUBSCRIBE TO t"):
                    ends.append(rt.now() - t0)

            async with anyio.create_task_group() as tg:
                for s in sessions:
                    tg.start_soon(start, s)
            lasts.append(max(ends))
            starts.extend(ends)
            await rt.sleep(pause_s)
        return SubscribeStarts(statistics.fmean(lasts) * 1000, Latencies.of(starts), rounds)

    return _run(config, body, seed=seed, overrides_ms=overrides_ms)


#: Issue #24395's session is a person at psql: the next statement comes
#: seconds after the last one returned. The model's session pauses
#: `PSQL_PAUSE_S` plus a uniform draw from one keepalive period (1 s), so each
#: statement starts at a random phase of the keepalive tick and after the
#: backlog of ticks a long on-loop DDL leaves (about 1 s of oracle calls for
#: a 4 s DDL at 100 ms per round trip). Back to back, each statement started
#: where the last ended, so 5 reps measured one phase: the SELECT's p50 was
#: 900 ms (n = 5); with pauses of up to 1 s, 581 ms, or 1,225 ms with the 2024
#: stash's round trips (n = 40), as it met that backlog or not; after 2 s,
#: about 400 ms either way. Floors of 2 s and 5 s give the same figures
#: (2026-11-28), so the floor is not a knob.
PSQL_PAUSE_S: Final = 2.0


def statement_latencies(
    config: CoordinatorConfig,
    *,
    reps: int = 40,
    seed: int = 1,
    overrides_ms: Mapping[str, float] | None = None,
) -> dict[str, Latencies]:
    """One session, alone, `reps` times: CREATE TABLE, SELECT from it and
    INSERT into it (issue #24395's psql session), each after a person's pause
    (`PSQL_PAUSE_S` plus a draw of up to 1 s from a random stream of its own,
    not the latencies'); each kind's latencies."""
    pauses = random.Random(f"psql-{seed}")

    async def body(rt: Runtime, coord: Coordinator) -> dict[str, Latencies]:
        s = coord.connect()
        seconds: dict[str, list[float]] = {"create": [], "select": [], "insert": []}
        for i in range(reps):
            for kind, sql in (("create", f"CREATE TABLE t_{i} (c int)"), ("select", f"SELECT * FROM t_{i}"),
                              ("insert", f"INSERT INTO t_{i} VALUES (1)")):
                await rt.sleep(PSQL_PAUSE_S + pauses.uniform(0.0, 1.0))
                t0 = rt.now()
                r = await s.execute(sql)
                assert r.ok, r.error
                seconds[kind].append(rt.now() - t0)
        return {k: Latencies.of(v) for k, v in seconds.items()}

    return _run(config, body, seed=seed, overrides_ms=overrides_ms)
