"""Faults against the Postgres-backed oracles: their backends are killed with
`pg_terminate_backend` during load (and, on a private server, the server itself
crashes and restarts). Operations must retry — counted by tier — the history must
stay linearizable, and nothing may hang.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import anyio
import asyncpg
import pytest

from oracle.batching import BatchingOracle
from oracle.memory import MemoryOracle
from oracle.open import oracle_spec
from oracle.testing import (
    RecordingOracle,
    assert_linearizable,
    fresh_timeline,
    open_timeline,
    run_random_workload,
)
from oracle.timestamp_store_postgres import PostgresTimestampStore
from sim.runtime.core import Runtime

if TYPE_CHECKING:
    from oracle.api import TimestampOracle
    from sim.services.postgres import EmbeddedPostgres

pytestmark = [pytest.mark.postgres, pytest.mark.asyncio]

_KILL = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = $1 AND pid <> pg_backend_pid()"""


def _retries(o: TimestampOracle) -> tuple[int, int, int]:
    """(all, determinate, indeterminate) retries of the oracle and its timestamp store."""
    inner = o.inner if isinstance(o, BatchingOracle) else o
    ops = inner.statistics().ops.values()
    total = sum(s.retry_count for s in ops)
    det = sum(s.retry_determinate_count for s in ops)
    indet = sum(s.retry_indeterminate_count for s in ops)
    if isinstance(inner, MemoryOracle):
        store = inner._store
        assert isinstance(store, PostgresTimestampStore)
        total += store.retry_count
    return total, det, indet


async def _killer(
    url: str, app: str, rt: Runtime, every_s: float, enough: anyio.Event, stop: anyio.Event
) -> int:
    """Terminates every backend named `app` each `every_s` until `stop`; sets
    `enough` after the fifth round that killed something. Returns how many died."""
    killed = rounds = 0
    conn = await asyncpg.connect(url)
    try:
        while not stop.is_set():
            await rt.sleep(every_s)
            n = await conn.fetchval(_KILL, app)
            killed += n
            rounds += 1 if n else 0
            if rounds >= 5:
                enough.set()
    finally:
        await conn.close()
    return killed


def _url(name: str, pg_url: str, serializable_url: str) -> str:
    if name == "postgres-serializable":
        return serializable_url
    if name == "memory-pgstore":
        scheme, rest = pg_url.split("://", 1)
        sep = "&" if "?" in rest else "?"
        # A 2 ms window: the timestamp store is written all the time, so kills hit it.
        return f"memory+{scheme}://{rest}{sep}stash=faults-{uuid.uuid4().hex[:8]}&window_ms=2"
    return pg_url


@pytest.mark.parametrize(
    ("name", "every_s"),
    [
        ("postgres", 0.05),
        ("postgres-serializable", 0.05),
        ("batching-postgres", 0.05),
        ("memory-pgstore", 0.05),
        # Kills faster than the pool reconnects: slow going, but it must get through.
        pytest.param("batching-postgres", 0.01, marks=pytest.mark.slow),
        pytest.param("postgres-serializable", 0.01, marks=pytest.mark.slow),
    ],
)
async def test_terminated_backends_are_retried_and_guarantees_hold(
    name: str, every_s: float, pg_url: str, pg_serializable: EmbeddedPostgres
) -> None:
    rt = Runtime(seed=31)
    app = f"coordsim-fault-{uuid.uuid4().hex[:8]}"
    url = _url(name, pg_url, pg_serializable.url)
    server = pg_serializable.url if name == "postgres-serializable" else pg_url
    stop, enough = anyio.Event(), anyio.Event()
    killed = 0
    with anyio.fail_after(60):  # no hang
        async with await open_timeline(
            oracle_spec(url, application_name=app), fresh_timeline("faults"), rt,
            batching=name.startswith("batching"),
        ) as o:
            floor = await o.read_ts()
            rec = RecordingOracle(o, rt)

            async def kill() -> None:
                nonlocal killed
                killed = await _killer(server, app, rt, every_s, enough, stop)

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill)
                # Load until five rounds of kills have landed and one of them
                # hit an operation in flight (on a loaded machine the first
                # rounds can all land between operations); real time passes
                # between operations, and `fail_after` bounds the wait.
                while not enough.is_set() or _retries(o)[0] == 0:
                    await run_random_workload(rec, rt, tasks=64, ops_per_task=5, think_s=0.01)
                stop.set()
            total, det, indet = _retries(o)
    assert killed >= 5
    assert all(r.ok for r in rec.history)  # every operation got through
    assert total > 0, "no operation was retried: the kills missed"
    if name != "memory-pgstore":
        assert det + indet == total
    assert_linearizable(rec.history, read_floor=floor)


async def test_server_crash_and_restart_during_load(private_pg: EmbeddedPostgres) -> None:
    """The whole server crashes (`-m immediate`) and comes back: callers wait it out."""
    rt = Runtime(seed=32)
    stop = anyio.Event()
    with anyio.fail_after(60):
        async with await open_timeline(private_pg.url, fresh_timeline("crash"), rt, batching=True) as o:
            floor = await o.read_ts()
            rec = RecordingOracle(o, rt)

            async def crash() -> None:
                while len(rec.history) < 100:  # under load
                    await rt.sleep(0.001)
                await anyio.to_thread.run_sync(private_pg.restart)
                stop.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(crash)

                async def load_until_restarted() -> None:
                    while not stop.is_set():
                        await run_random_workload(rec, rt, tasks=32, ops_per_task=5, think_s=0.005)

                tg.start_soon(load_until_restarted)
            # And it still works afterwards.
            await run_random_workload(rec, rt, tasks=8, ops_per_task=5)
            total, _, _ = _retries(o)
    assert total > 0
    assert all(r.ok for r in rec.history)
    assert_linearizable(rec.history, read_floor=floor)
