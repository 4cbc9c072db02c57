"""Runs one workload under one coordinator configuration, in real or virtual
mode, and returns a row per measured concurrency level plus the run's trace
(every client operation and internal event, DESIGN.md §7).

Each (workload, configuration) pair gets a fresh deployment (a fresh database in
real mode, fresh in-memory stores in virtual mode) and the same seed, so the
configurations see the same statements. The schema is set up and warmed before
the first measured level; levels run in sweep order on the same coordinator.
"""

from __future__ import annotations

import contextlib
import functools
import math
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

import anyio

from coordinator.environment import Environment
from coordinator.factory import build_coordinator
from persist.location import CoordsimError
from persist.mem import MemBlob, MemConsensus
from persist.urls import driver_url
from sim.history import HistoryRecorder
from sim.latent import LatentBlob, LatentConsensus
from sim.loadgen import LevelResult, closed_loop, open_loop, ops_for_level
from sim.recording import RecordingSession, event_sink
from sim.runtime import Runtime, run
from sim.traces import write_trace
from sim.workloads import OpContext, workload

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from coordinator.session import Coordinator
    from sim.config import Config

__all__ = ["LevelRow", "RunOutput", "fresh_database", "level_client", "level_ops", "run_pair"]


@final
@dataclass(frozen=True)
class LevelRow:
    """One row of `results.csv` (latencies in ms; see `sim.report`)."""

    workload: str
    config: str
    mode: str
    concurrency: int
    ops: int
    errors: int
    elapsed_s: float
    throughput_ops_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    oracle_queries_per_op: float
    loop_busy_fraction: float


@final
@dataclass(frozen=True)
class RunOutput:
    rows: list[LevelRow]
    trace_dir: Path


@final
class SessionFactory:
    """Recording sessions on one coordinator, each its own history process."""

    def __init__(self, coord: Coordinator, recorder: HistoryRecorder) -> None:
        self.coord = coord
        self.recorder = recorder

    def __call__(self, client: str) -> RecordingSession:
        return RecordingSession(self.coord.connect(), self.recorder, client=client)


def level_ops(cfg: Config, workload_name: str, concurrency: int) -> int:
    """Operations measured at `concurrency`: `ops_per_level` times the workload's
    `ops_scale`, scaled with sqrt(concurrency) (`sim.loadgen.ops_for_level`)."""
    base = max(1, math.ceil(cfg.ops_per_level * workload(workload_name).ops_scale))
    return ops_for_level(base, concurrency)


def level_client(concurrency: int, client: int) -> str:
    """The history `client` label of a measured operation: `L<level>/c<client>`
    (setup is `setup`, warm-up `warmup/c<i>`, background load `bg/...`)."""
    return f"L{concurrency}/c{client}"


async def fresh_database(pg_url: str) -> str:
    """Creates a database with a random name on `pg_url`'s server; returns its URL.
    (Shard ids and stash tables are not namespaced, so each deployment gets its own.)"""
    import asyncpg

    name = f"coordsim_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(driver_url(pg_url), timeout=10)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    base, _, query = pg_url.partition("?")
    root = base.rsplit("/", 1)[0]
    return f"{root}/{name}" + (f"?{query}" if query else "")


#: How long dropping a run's database may take when the run is being stopped.
DROP_WITHIN_S: Final = 5.0


async def drop_database(pg_url: str, db_url: str) -> None:
    """Best effort, but it happens: a leftover database on a user's server is
    litter, not an error. Runs shielded (within `DROP_WITHIN_S`), because it is
    the cleanup of a run that Ctrl-C or an error is unwinding, and first ends
    the run's own sessions that a cancelled close left open: PostgreSQL's DROP
    DATABASE would wait 5 s for them and then fail."""
    import asyncpg

    name = db_url.partition("?")[0].rsplit("/", 1)[1]
    with anyio.move_on_after(DROP_WITHIN_S, shield=True):
        try:
            conn = await asyncpg.connect(driver_url(pg_url), timeout=DROP_WITHIN_S)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return
        try:
            with contextlib.suppress(asyncpg.PostgresError):
                # PostgreSQL only (CockroachDB has no such function, and drops
                # a database in use anyway); the sessions are our own.
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = $1 AND pid <> pg_backend_pid()",
                    name,
                )
            with contextlib.suppress(asyncpg.PostgresError):
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def environment(cfg: Config, rt: Runtime) -> AsyncIterator[Environment]:
    """A fresh deployment: modeled in-memory stores (virtual) or a fresh database
    plus files or `blob_url` (real)."""
    if cfg.mode == "virtual":
        yield Environment(
            rt, blob=LatentBlob(MemBlob(), rt), consensus=LatentConsensus(MemConsensus(), rt)
        )
        return
    from persist.open import open_blob, open_consensus

    pg = cfg.effective_postgres_url()
    if pg is None:
        raise CoordsimError("real mode needs a Postgres (start one or set COORDSIM_POSTGRES_URL)")
    db = await fresh_database(pg)
    tmp = tempfile.mkdtemp(prefix="coordsim-blob-")
    try:
        blob = await open_blob(cfg.blob_url or f"file://{tmp}?fsync=false")
        consensus = await open_consensus(db)
        try:
            yield Environment(rt, blob=blob, consensus=consensus, postgres_url=db)
        finally:
            await consensus.close()
            await blob.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        await drop_database(pg, db)


async def measure(
    cfg: Config,
    config_name: str,
    workload_name: str,
    rt: Runtime,
    recorder: HistoryRecorder,
    on_level: Callable[[LevelRow], None],
) -> list[LevelRow]:
    """Set-up, warm-up and the sweep on one fresh coordinator."""
    wl = workload(workload_name)
    rows: list[LevelRow] = []
    counter = [0]
    async with environment(cfg, rt) as env, build_coordinator(
        cfg.coordinator(config_name), env, rt, events=event_sink(recorder)
    ) as coord:
        sessions = SessionFactory(coord, recorder)
        await wl.setup(sessions("setup"), cfg.tables)
        if cfg.warmup_ops:
            await _level(cfg, sessions, wl.name, rt, counter, 0, min(4, cfg.warmup_ops), cfg.warmup_ops)
        for c in cfg.concurrency:
            before = coord.statistics()
            res = await _level(cfg, sessions, wl.name, rt, counter, c, c, level_ops(cfg, wl.name, c))
            after = coord.statistics()
            row = _row(cfg, config_name, workload_name, res, before, after, c)
            rows.append(row)
            on_level(row)
    return rows


async def _level(
    cfg: Config,
    factory: SessionFactory,
    workload_name: str,
    rt: Runtime,
    counter: list[int],
    level: int,
    concurrency: int,
    ops: int,
) -> LevelResult:
    wl = workload(workload_name)

    def label(i: int) -> str:
        return level_client(level, i) if level else f"warmup/c{i}"

    sessions = [factory(label(i)) for i in range(concurrency)]

    async def op(client: int, k: int) -> bool:
        ctx = OpContext(client, k, cfg.tables, rt, counter, level=level)
        r = await wl.op(sessions[client], ctx)
        return r.error is None

    bg_n = [0]

    def bg_session() -> RecordingSession:
        bg_n[0] += 1
        return factory(f"bg/L{level}/{bg_n[0]}")

    result: LevelResult | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(wl.background, bg_session, cfg.tables, rt, tag=str(level)))
        if cfg.open_loop_rate is not None and level:
            result = await open_loop(rt, op, rate=cfg.open_loop_rate, ops=ops, max_in_flight=concurrency)
        else:
            result = await closed_loop(rt, op, concurrency=concurrency, ops=ops)
        tg.cancel_scope.cancel()
    assert result is not None
    return result


def _row(
    cfg: Config, config_name: str, workload_name: str, res: LevelResult, before: Any, after: Any, c: int
) -> LevelRow:
    busy = after.loop_busy_s - before.loop_busy_s
    oracle = after.oracle_calls - before.oracle_calls
    return LevelRow(
        workload=workload_name,
        config=config_name,
        mode=cfg.mode,
        concurrency=c,
        ops=res.ops,
        errors=res.errors,
        elapsed_s=res.elapsed_s,
        throughput_ops_s=res.throughput,
        p50_ms=res.percentile_ms(50),
        p99_ms=res.percentile_ms(99),
        p999_ms=res.percentile_ms(99.9),
        oracle_queries_per_op=oracle / res.ops if res.ops else 0.0,
        loop_busy_fraction=busy / res.elapsed_s / max(1, after.loop_cores) if res.elapsed_s > 0 else 0.0,
    )


def run_pair(
    cfg: Config,
    config_name: str,
    workload_name: str,
    trace_dir: Path,
    *,
    on_level: Callable[[LevelRow], None] = lambda row: None,
) -> RunOutput:
    """Runs `workload_name` under `config_name` on its own loop (virtual or
    real) and writes its trace to `trace_dir`."""
    holder: dict[str, Any] = {}

    async def main(rt: Runtime) -> list[LevelRow]:
        recorder = HistoryRecorder(rt.now)
        holder["recorder"] = recorder
        return await measure(cfg, config_name, workload_name, rt, recorder, on_level)

    rows = run(main, seed=cfg.seed, virtual=cfg.mode == "virtual", latency=cfg.latency())
    recorder: HistoryRecorder = holder["recorder"]
    write_trace(
        trace_dir,
        recorder.history(),
        recorder.events(),
        run=f"{workload_name}/{config_name}",
        config=config_name,
        seed=cfg.seed,
        extra_meta={
            "workload": workload_name,
            "mode": cfg.mode,
            "concurrency": list(cfg.concurrency),
            "open_loop_rate": cfg.open_loop_rate,
        },
    )
    return RunOutput(rows, trace_dir)
