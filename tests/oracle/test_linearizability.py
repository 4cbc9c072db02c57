"""Linearizability under real concurrency: 64 tasks on one timeline, two OS
processes on one Postgres row, and the checker itself on known-bad histories."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from oracle.testing import (
    OpRecord,
    RecordingOracle,
    assert_linearizable,
    check_history,
    fresh_timeline,
    run_random_workload,
)
from sim.runtime.core import Runtime
from sim.runtime.latency import LatencyModel, LogNormal

if TYPE_CHECKING:
    from tests.oracle.conftest import OracleImpl

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.asyncio
async def test_64_tasks_random_operations_are_linearizable(oracle_impl: OracleImpl) -> None:
    # Virtual runs need time to pass between events, or every operation would
    # overlap every other and the check would be vacuous: model a 2 ms timestamp-store
    # transaction and let clients think up to 1 ms.
    latency = LatencyModel({"stash.txn": LogNormal(0.002, 0.5), "oracle.pg": LogNormal(0.001, 0.5)})
    rt = Runtime(seed=64, latency=latency)
    think = 0.0 if oracle_impl.on_postgres else 0.001
    async with await oracle_impl.maker(rt)(fresh_timeline("lin")) as o:
        floor = await o.read_ts()
        rec = RecordingOracle(o, rt)
        with anyio.fail_after(60):
            await run_random_workload(rec, rt, tasks=64, ops_per_task=40, think_s=think)
        stats = o.statistics()
    assert len(rec.history) >= 64 * 40
    assert_linearizable(rec.history, read_floor=floor)
    # Real-time order was exercised, not just overlap: most operations began
    # after others had completed (strictly: ties would not count).
    first_done = min(r.complete_ns for r in rec.history)
    assert sum(1 for r in rec.history if r.invoke_ns > first_done) > len(rec.history) // 2
    if oracle_impl.batching:
        assert stats.batches_count < stats.batched_op_count  # reads were coalesced


@pytest.mark.postgres
@pytest.mark.asyncio
@pytest.mark.parametrize("batching", [False, True], ids=["postgres", "batching-postgres"])
async def test_two_processes_on_one_row_are_linearizable(
    pg_url: str, tmp_path: Path, batching: bool
) -> None:
    """Two OS processes share the timeline's row; their merged history (one
    system-wide monotonic clock) must be linearizable."""
    timeline = fresh_timeline("two-proc")
    outs = [tmp_path / f"p{i}.jsonl" for i in range(2)]
    argv = [
        [
            sys.executable, "-m", "tests.oracle.proc_worker", pg_url, timeline, str(out),
            "--client", f"p{i}", "--seed", str(i), "--tasks", "32", "--ops", "40",
            *(["--batching"] if batching else []),
        ]
        for i, out in enumerate(outs)
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with anyio.fail_after(90):
        procs = [
            await anyio.open_process(a, cwd=ROOT, env=env, stderr=None) for a in argv
        ]
        try:
            for p in procs:  # both connected and warm before either starts
                assert p.stdout is not None
                line = await p.stdout.receive()
                assert line.startswith(b"ready"), line
            for p in procs:
                assert p.stdin is not None
                await p.stdin.send(b"go\n")
            for p in procs:
                assert await p.wait() == 0
        finally:
            for p in procs:
                if p.returncode is None:
                    p.kill()
                    await p.aclose()
    histories = [[OpRecord.from_json(x) for x in out.read_text().splitlines()] for out in outs]
    merged = [r for h in histories for r in h]
    assert len(merged) >= 2 * 32 * 40
    # The processes really overlapped: each started before the other finished.
    spans = [(min(r.invoke_ns for r in h), max(r.complete_ns for r in h)) for h in histories]
    assert spans[0][0] < spans[1][1]
    assert spans[1][0] < spans[0][1]
    # And their operations were ordered against each other in real time.
    cross = sum(
        1
        for a in histories[0][:200]
        for b in histories[1][:200]
        if a.complete_ns < b.invoke_ns or b.complete_ns < a.invoke_ns
    )
    assert cross > 0
    assert_linearizable(merged)


# --- The checker finds each broken guarantee ---------------------------------------------


def _r(op: str, invoke: int, complete: int, ts: int | None, ok: bool = True) -> OpRecord:
    return OpRecord("c", op, invoke, complete, ts, ok)


@pytest.mark.parametrize(
    ("history", "kind"),
    [
        # write_ts not above an earlier write_ts / read_ts / peek / apply_write.
        ([_r("write_ts", 0, 1, 10), _r("write_ts", 2, 3, 10)], "timestamp-regression"),
        ([_r("apply_write", 0, 1, 5), _r("read_ts", 2, 3, 5), _r("write_ts", 4, 5, 5)], "timestamp-regression"),
        ([_r("apply_write", 0, 1, 20), _r("write_ts", 2, 3, 20)], "timestamp-regression"),
        ([_r("write_ts", 0, 1, 9), _r("peek_write_ts", 2, 3, 8)], "timestamp-regression"),
        # read_ts below an applied write (the batching hazard) or an earlier read.
        ([_r("apply_write", 0, 1, 7), _r("read_ts", 2, 3, 6)], "stale-read-ts"),
        ([_r("apply_write", 0, 1, 7), _r("read_ts", 2, 3, 7), _r("read_ts", 4, 5, 6)], "stale-read-ts"),
        # read_ts above anything applied: reads a write still in flight.
        ([_r("write_ts", 0, 1, 7), _r("read_ts", 2, 3, 7)], "read-beyond-applied"),
    ],
)
def test_checker_catches(history: list[OpRecord], kind: str) -> None:
    found = {v.kind for v in check_history(history)}
    assert kind in found, found


def test_checker_accepts_concurrency_and_failed_operations() -> None:
    ok = [
        # Overlapping: no order, so no bound.
        _r("apply_write", 0, 10, 7),
        _r("read_ts", 5, 6, 3),
        # A failed apply_write bounds nothing from below but may raise reads.
        _r("apply_write", 11, 12, 50, ok=False),
        _r("read_ts", 13, 14, 50),
        _r("read_ts", 15, 16, 50),
        _r("write_ts", 17, 18, 51),
        # Ties in time are concurrent.
        _r("write_ts", 19, 20, 60),
        _r("read_ts", 20, 21, 50),
        _r("write_ts", 20, 22, 61),
    ]
    assert check_history(ok) == []
    assert check_history([_r("read_ts", 0, 1, 100)], read_floor=100) == []
