"""The oracle's structured events (sim/runtime/events.py): a 40001
serialization failure is an `oracle.retry` event and counts in its call's
`oracle.call` retries; the batching oracle reports each backing call as a
`read_ts.batch` of the requests it answered."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
import asyncpg
import pytest

from oracle.batching import BatchingOracle
from oracle.open import oracle_spec
from oracle.testing import fresh_timeline, open_timeline
from sim.runtime.core import Runtime, run
from sim.runtime.events import EventSink
from sim.runtime.urls import driver_url

if TYPE_CHECKING:
    from pathlib import Path


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_a_40001_is_a_retry_of_its_call(pg_url: str, tmp_path: Path) -> None:
    """A transaction holds the timeline's row while `write_ts` waits for it,
    then commits a change: under SERIALIZABLE the waiting UPDATE fails with
    40001 (it cannot see the committed row), and the client retries it."""
    sink = EventSink(file=tmp_path / "events.jsonl", bound={"run": "t"})
    rt = Runtime(seed=5, events=sink.log())
    timeline = fresh_timeline("events")
    blocker = await asyncpg.connect(driver_url(pg_url))
    try:
        async with await open_timeline(replace(oracle_spec(pg_url), pool_size=1), timeline, rt) as o:
            await o.write_ts()  # the row exists, the statement is prepared
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute("UPDATE timestamp_oracle SET write_ts = write_ts + 1 WHERE timeline = $1", timeline)
            got: list[int] = []

            async def allocate() -> None:
                got.append((await o.write_ts()).ts)

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(allocate)
                    while not await blocker.fetchval(  # a backend waiting for the blocker's row lock
                        "SELECT count(*) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"
                    ):
                        await rt.sleep(0.005)  # a real server's lock queue: nothing to await on it
                    await tx.commit()
    finally:
        await blocker.close()
        sink.close()
    assert len(got) == 1
    events = _read(tmp_path / "events.jsonl")
    retries = [e for e in events if e["event"] == "oracle.retry"]
    assert [(e["op"], e["sqlstate"], e["tier"]) for e in retries] == [("write_ts", "40001", "determinate")]
    calls = [e for e in events if e["event"] == "oracle.call" and e["op"] == "write_ts"]
    assert [(c["retries"], c["ok"]) for c in calls] == [(0, True), (1, True)]
    assert all((c["run"], c["seed"], c["timeline"], c["implementation"]) == ("t", 5, timeline, "postgres")
               for c in calls)


def test_a_read_ts_batch_reports_the_requests_it_answered(tmp_path: Path) -> None:
    sink = EventSink(file=tmp_path / "events.jsonl")

    async def main(rt: Runtime) -> list[int]:
        inner = await open_timeline("modeled://", "realtime", rt)
        got: list[int] = []
        async with BatchingOracle(inner, rt) as o:

            async def read() -> None:
                got.append(await o.read_ts())

            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(read)
            await o.read_ts()
        return got

    try:
        assert run(main, seed=3, events=sink.log()) == [0] * 5
    finally:
        sink.close()
    events = _read(tmp_path / "events.jsonl")
    batches = [e for e in events if e["event"] == "read_ts.batch"]
    assert [(b["batch_size"], b["ok"], b["timeline"]) for b in batches] == [(5, True, "realtime"), (1, True, "realtime")]
    # One backing call each, reported by the inner oracle; the callers' requests are not.
    assert [e["op"] for e in events if e["event"] == "oracle.call"] == ["read_ts", "read_ts"]
