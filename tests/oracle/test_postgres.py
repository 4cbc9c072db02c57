"""The Postgres oracle's specifics: the seed's SQL, prepared statements, the pool
bound, 40001 under SERIALIZABLE retried and counted by tier; and the opening
function and metrics every oracle shares."""

from __future__ import annotations

import math
import random
import re
from dataclasses import replace
from typing import TYPE_CHECKING

import anyio
import pytest

from oracle import postgres as pg_oracle
from oracle.api import CATALOG_TIMELINE, REALTIME_TIMELINE
from oracle.batching import BatchingOracle
from oracle.memory import MemoryOracle
from oracle.metrics import _Histogram
from oracle.open import OracleBackend, open_oracles, oracle_spec
from oracle.postgres import PostgresOracle
from oracle.testing import ManualWallClock, fresh_timeline, open_timeline
from sim.runtime.backend_stats import BACKEND_STATS, BackendStats
from sim.runtime.core import Runtime
from sim.runtime.errors import Determinate, InvalidUsage
from sim.runtime.pg import Isolation, with_isolation
from sim.runtime.pgclient import DEFAULT_RETRY, PostgresClient
from sim.runtime.retry import RetryPolicy

if TYPE_CHECKING:
    from oracle.api import TimestampOracle
    from sim.runtime.pgclient import Conn
    from sim.services.postgres import EmbeddedPostgres


def _norm(sql: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", sql))).strip()


# Seed 000's text, with its `$timeline` / `$wall_clock_ts` placeholders numbered.
SEED_TABLE = """CREATE TABLE IF NOT EXISTS timestamp_oracle (
timeline text NOT NULL, read_ts bigint NOT NULL, write_ts bigint NOT NULL, PRIMARY KEY(timeline) )"""
SEED_WRITE_TS = """UPDATE timestamp_oracle SET write_ts = GREATEST(write_ts + 1, $2)
WHERE timeline = $1 RETURNING write_ts"""
SEED_PEEK = "SELECT write_ts FROM timestamp_oracle WHERE timeline = $1"
SEED_READ_TS = "SELECT read_ts FROM timestamp_oracle WHERE timeline = $1"


def test_statements_are_the_seeds() -> None:
    assert _norm(pg_oracle._SCHEMA) == _norm(SEED_TABLE)
    assert _norm(pg_oracle._WRITE_TS) == _norm(SEED_WRITE_TS)
    assert _norm(pg_oracle._PEEK_WRITE_TS) == _norm(SEED_PEEK)
    assert _norm(pg_oracle._READ_TS) == _norm(SEED_READ_TS)
    # apply_write: the seed's `GREATEST` form, reading $2 where the seed's text
    # reads the old write_ts (see the module; the literal text is a known-bad
    # variant that test_conformance shows the suite rejects).
    assert "GREATEST(write_ts, $2)" in pg_oracle._APPLY_WRITE
    assert "read_ts = GREATEST(read_ts, $2)" in pg_oracle._APPLY_WRITE
    assert "ON CONFLICT (timeline) DO NOTHING" in _norm(pg_oracle._INIT)


def test_retry_backoff_is_capped_exponential_with_jitter() -> None:
    rt = Runtime(seed=40)
    policy = DEFAULT_RETRY
    for attempt in range(20):
        top = min(policy.cap_s, policy.base_s * 2**attempt)
        samples = {policy.backoff(rt, attempt) for _ in range(50)}
        assert all(top / 2 <= s <= top for s in samples)
        assert len(samples) > 1  # jittered: concurrent retriers spread out
    assert policy.backoff(rt, 30) <= policy.cap_s


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_statements_are_prepared_once_per_connection(pg_url: str) -> None:
    rt = Runtime(seed=41)
    async with await PostgresOracle.open(pg_url, fresh_timeline("prep"), rt, pool_size=1) as o:
        for _ in range(10):
            w = await o.write_ts()
            await o.peek_write_ts()
            await o.apply_write(w.ts)
            await o.read_ts()

        async def prepared(conn: Conn) -> list[tuple[str, int]]:
            rows = await conn.fetch(
                "SELECT statement, generic_plans + custom_plans AS uses FROM pg_prepared_statements"
            )
            return [(_norm(r["statement"]), r["uses"]) for r in rows]

        # pool_size=1: the session that ran every operation is the one asked.
        stmts = [(s, n) for s, n in await o.client.run("inspect", prepared, write=False)]
    oracle_stmts = {s: n for s, n in stmts if "timestamp_oracle" in s and "INSERT" not in s}
    assert set(oracle_stmts) == {
        _norm(pg_oracle._WRITE_TS),
        _norm(pg_oracle._PEEK_WRITE_TS),
        _norm(pg_oracle._READ_TS),
        _norm(pg_oracle._APPLY_WRITE),
    }
    assert all(n >= 10 for n in oracle_stmts.values()), oracle_stmts


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_the_pool_bounds_connections(pg_url: str) -> None:
    rt = Runtime(seed=42)
    app = f"coordsim-pool-{fresh_timeline()[-12:]}"
    url = pg_url + ("&" if "?" in pg_url else "?") + f"pool_size=3&application_name={app}"
    async with await open_timeline(url, fresh_timeline("pool"), rt) as o:
        async def count(conn: Conn) -> int:
            n: int = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app
            )
            return n

        async def reader() -> None:
            for _ in range(10):
                await o.read_ts()

        async with anyio.create_task_group() as tg:
            for _ in range(64):
                tg.start_soon(reader)
        assert isinstance(o, PostgresOracle)
        # The pool keeps what it opened (idle connections live for minutes).
        held = await o.client.run("count", count, write=False)
    assert 1 <= held <= 3


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_serialization_failures_are_retried_and_counted(
    pg_serializable: EmbeddedPostgres,
) -> None:
    """Under SERIALIZABLE (as in CockroachDB) concurrent updates of the row fail
    with 40001; they are Determinate, retried, and every allocation is distinct."""
    rt = Runtime(seed=43)
    async with await PostgresOracle.open(
        pg_serializable.url, fresh_timeline("40001"), rt, pool_size=16
    ) as o:
        got: list[int] = []

        async def writer() -> None:
            for _ in range(10):
                w = await o.write_ts()
                got.append(w.ts)
                await o.apply_write(w.ts)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(32):
                    tg.start_soon(writer)
        stats = o.statistics()
    assert len(set(got)) == len(got) == 320
    retried = stats.op("write_ts").retry_count + stats.op("apply_write").retry_count
    determinate = (
        stats.op("write_ts").retry_determinate_count + stats.op("apply_write").retry_determinate_count
    )
    assert retried > 0, "no 40001 under SERIALIZABLE contention"
    assert determinate == retried  # 40001 means rolled back: Determinate
    samples = stats.metrics()
    key = f'ts_oracle_retry_count{{timeline="{o.timeline}",op="write_ts",tier="determinate"}}'
    assert samples[key] == stats.op("write_ts").retry_determinate_count


# --- The opening function and the metrics -------------------------------------------------


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_open_oracles_opens_one_oracle_per_timeline() -> None:
    clock = ManualWallClock()
    rt = Runtime(seed=44, wall_clock=clock)
    async with await open_oracles("mem://?window_ms=50", rt) as oracles:
        assert oracles.backend is OracleBackend.MEMORY
        realtime = await oracles.timeline()
        catalog = await oracles.timeline(CATALOG_TIMELINE)
        assert realtime.timeline == REALTIME_TIMELINE
        assert catalog.timeline == CATALOG_TIMELINE
        assert await oracles.timeline(REALTIME_TIMELINE) is realtime
        w = await realtime.write_ts()
        await realtime.apply_write(w.ts)
        # Timelines are independent.
        assert await catalog.read_ts() == 0
        assert (await catalog.write_ts()).ts == clock.ms
        assert await oracles.persisted_upper(REALTIME_TIMELINE) == w.ts + 50
        with pytest.raises(InvalidUsage, match="owns_backend"):
            await oracles.timeline("other", owns_backend=True)
    with pytest.raises(InvalidUsage, match="closed"):
        await oracles.timeline("late")
    with pytest.raises(InvalidUsage):  # closing the handle closed its oracles
        await realtime.read_ts()
    async with await open_timeline("mem://", REALTIME_TIMELINE, rt, batching=True) as o:
        assert isinstance(o, BatchingOracle)
        assert isinstance(o.inner, MemoryOracle)
        assert await o.read_ts() == 0
    with pytest.raises(InvalidUsage, match="unknown"):
        oracle_spec("mem://?bogus=1")
    with pytest.raises(InvalidUsage, match="scheme"):
        await open_oracles("mysql://x/y", rt)
    with pytest.raises(InvalidUsage, match="window_ms"):
        await open_oracles("mem://?window_ms=0", rt)
    with pytest.raises(InvalidUsage, match="in-memory oracle"):
        replace(oracle_spec("modeled://"), skip_epoch_fencing=True)


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_a_process_bumps_the_epoch_once_for_all_its_timelines() -> None:
    rt = Runtime(seed=47)
    async with await open_oracles("mem://", rt) as oracles:
        epochs = [oracles.epoch]  # None: nothing is fenced until a timeline opens
        await oracles.timeline()
        epochs.append(oracles.epoch)
        await oracles.timeline(CATALOG_TIMELINE)
        epochs.append(oracles.epoch)
    assert epochs == [None, 1, 1]


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_open_oracles_shares_one_pool_across_timelines(pg_url: str) -> None:
    rt = Runtime(seed=45)
    async with await open_oracles(pg_url, rt) as oracles:
        a, b = await oracles.timeline(fresh_timeline("a")), await oracles.timeline(fresh_timeline("b"))
        assert isinstance(a, PostgresOracle)
        assert isinstance(b, PostgresOracle)
        assert a.client is b.client
        await a.apply_write(500)
        assert (await a.read_ts(), await b.read_ts()) == (500, 0)


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_metrics_count_every_operation() -> None:
    rt = Runtime(seed=46)
    async with await open_timeline("mem://", REALTIME_TIMELINE, rt) as o:
        for _ in range(3):
            w = await o.write_ts()
            await o.apply_write(w.ts)
            await o.read_ts()
        await o.peek_write_ts()
        stats = o.statistics()
    assert stats.implementation == "memory"
    for op, n in (("write_ts", 3), ("apply_write", 3), ("read_ts", 3), ("peek_write_ts", 1)):
        s = stats.op(op)
        assert (s.start_count, s.succeeded_count, s.failed_count) == (n, n, 0), op
    assert stats.op("stash_write_upper").succeeded_count >= 1
    samples = stats.metrics()
    assert samples['ts_oracle_start_count{timeline="realtime",op="write_ts"}'] == 3
    assert samples['ts_oracle_succeeded_count{timeline="realtime",op="read_ts"}'] == 3
    assert 'ts_oracle_seconds{timeline="realtime",op="read_ts",quantile="0.99"}' in samples
    assert all(k.startswith("ts_oracle_") for k in samples)


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_the_client_keeps_healthy_connections_and_drops_doubtful_ones(pg_url: str) -> None:
    rt = Runtime(seed=47)
    client = await PostgresClient.connect(
        pg_url, rt, pool_size=1, retry=RetryPolicy(deadline_s=0.0)
    )

    async def pid(conn: Conn) -> int:
        n: int = await conn.fetchval("SELECT pg_backend_pid()")
        return n

    async def divide_by_zero(conn: Conn) -> None:
        await conn.fetchval("SELECT 1/0")

    async def sleep(conn: Conn) -> None:
        await conn.execute("SELECT pg_sleep(5)")

    try:
        first = await client.run("pid", pid, write=False)
        # A server error outside a transaction: the session is fine, kept.
        with pytest.raises(Determinate, match="22012"):
            await client.run("divide", divide_by_zero, write=False)
        assert await client.run("pid", pid, write=False) == first
        # Cancelled mid-statement: the session may still be busy, dropped.
        with anyio.move_on_after(0.05):
            await client.run("sleep", sleep, write=False)
        second = await client.run("pid", pid, write=False)
        assert second != first
    finally:
        await client.close()
    with pytest.raises(InvalidUsage, match="closed"):
        await client.run("pid", pid, write=False)


def test_latency_percentiles_are_within_a_bucket() -> None:
    rng = random.Random(48)
    values = sorted(rng.randint(1, 5_000_000) for _ in range(20_000))
    hist = _Histogram()
    for v in values:
        hist.record(v)
    for p in (50, 95, 99, 100):
        exact = values[math.ceil(len(values) * p / 100) - 1]
        assert abs(hist.percentile(p) - exact) <= exact / 16, p
    assert hist.max == values[-1]
    assert _Histogram().percentile(99) == 0


# --- issue 35: the isolation level, and what a run records of its backends -----------------


@pytest.mark.postgres
@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("level", "shown"),
    [(None, "serializable"), (Isolation.SERIALIZABLE, "serializable"), (Isolation.READ_COMMITTED, "read committed")],
)
async def test_sessions_and_transactions_run_at_the_chosen_level(
    pg_url: str, level: Isolation | None, shown: str
) -> None:
    """SERIALIZABLE by default (CockroachDB's level), whatever the server's
    default; `?isolation=read-committed` chooses the other, for the single
    statements (the session's default) and the explicit transactions alike."""
    rt = Runtime(seed=51)
    url = pg_url if level is None else with_isolation(pg_url, level)
    client = await PostgresClient.connect(url, rt, pool_size=1)
    try:
        expected = Isolation.SERIALIZABLE if level is None else level
        assert client.isolation is expected

        async def session(conn: Conn) -> str:
            return str(await conn.fetchval("SHOW transaction_isolation"))

        async def explicit(conn: Conn) -> str:
            async with conn.transaction(isolation=client.isolation.asyncpg):
                return str(await conn.fetchval("SHOW transaction_isolation"))

        assert await client.run("show", session, write=False) == shown
        assert await client.run("show", explicit, write=False) == shown
    finally:
        await client.close()


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_backend_stats_record_round_trips_and_40001_retries(pg_url: str) -> None:
    """With a run's `BackendStats` installed, each statement is one sample of
    its kind; under SERIALIZABLE contention on the row, 40001s are retried and
    counted by kind and SQLSTATE (and none at READ COMMITTED)."""
    counts: dict[Isolation, int] = {}
    for level in (Isolation.SERIALIZABLE, Isolation.READ_COMMITTED):
        stats = BackendStats()
        token = BACKEND_STATS.set(stats)
        try:
            rt = Runtime(seed=52)
            async with await PostgresOracle.open(
                with_isolation(pg_url, level), fresh_timeline("stats"), rt, pool_size=16
            ) as o:
                mark = stats.mark()

                async def writer(o: TimestampOracle = o) -> None:
                    for _ in range(10):
                        await o.apply_write((await o.write_ts()).ts)
                        await o.read_ts()

                with anyio.fail_after(60):
                    async with anyio.create_task_group() as tg:
                        for _ in range(16):
                            tg.start_soon(writer)
                window = stats.since(mark)
        finally:
            BACKEND_STATS.reset(token)
        kinds = {k.kind: k for k in window.kinds()}
        assert {"oracle.pg.write_ts", "oracle.pg.apply_write", "oracle.pg.read_ts"} <= set(kinds)
        for name in ("oracle.pg.write_ts", "oracle.pg.apply_write", "oracle.pg.read_ts"):
            k = kinds[name]
            assert k.count == 160, k
            assert k.p50_ms is not None
            assert k.p99_ms is not None
            assert 0 < k.p50_ms <= k.p99_ms
        group = window.group("oracle.pg.")
        assert group.kind == "oracle.pg.*"
        assert group.count == 480
        counts[level] = group.retries_40001
        assert group.retries_40001 == sum(k.retries_40001 for k in kinds.values())
    assert counts[Isolation.SERIALIZABLE] > 0, "no 40001 under SERIALIZABLE contention"
    assert counts[Isolation.READ_COMMITTED] == 0
