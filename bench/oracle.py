"""Benchmark of the Postgres/CockroachDB timestamp oracle, with and without read_ts
batching (seed 000: batching is what makes the distributed oracle viable).

Modes: `read` (N = 1, 8, 64, 256 tasks looping `read_ts`), `write` (one
group-commit loop: `write_ts` → modeled table append → `apply_write` → `read_ts`)
and `mixed` (64 readers beside the group-commit loop). Each runs batched (a
`BatchingOracle` in front) and raw (every call its own query); `--raw` runs only
raw. Printed per run: ops/s, backend queries/s, average batch size and p50/p95/
p99 latency — plus, measured in the same run, the raw asyncpg round-trip rate of
the very SELECT `read_ts` issues, so the numbers read as a ratio to the physical
limit. Postgres is the embedded server (fsync on) unless COORDSIM_POSTGRES_URL
is set.

    uv run python bench/oracle.py [--quick] [--raw] [--mode read|write|mixed|all]

Last line: `RESULT batched_read_ts_per_s_64=… raw_read_ts_per_s_64=… ratio_64=… avg_batch_64=… raw_select_per_s_1conn=…`
"""

# ruff: noqa: E402 - the project's imports must follow the sys.path fix below.
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

# Run as a script, this file's directory is first on sys.path, so `import oracle`
# would import this very file (bench/oracle.py). Drop it; the project itself is
# installed in the venv (and the repository root is the working directory).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import anyio
import asyncpg

from oracle.batching import BatchingOracle
from oracle.open import oracle_spec
from oracle.postgres import _READ_TS
from oracle.testing import fresh_timeline, open_timeline
from sim.runtime.core import Runtime, run
from sim.services.postgres import postgres_server

if TYPE_CHECKING:
    from collections.abc import Sequence

    from oracle.api import TimestampOracle

READ_TASKS = (1, 8, 64, 256)
MIXED_READERS = 64


@dataclass
class Row:
    mode: str
    config: str
    tasks: int
    ops: int
    seconds: float
    queries: int
    batch_requests: int = 0
    batches: int = 0
    # Latencies in µs, kept raw: appending costs far less than recording into a
    # histogram, and the harness must not eat the CPU the batched path needs.
    lat_us: list[int] = field(default_factory=list)
    note: str = ""

    @property
    def per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    @property
    def queries_per_s(self) -> float:
        return self.queries / self.seconds if self.seconds > 0 else 0.0

    @property
    def avg_batch(self) -> float:
        return self.batch_requests / self.batches if self.batches else 1.0

    def pct_ms(self, p: float) -> float:
        if not self.lat_us:
            return 0.0
        ordered = sorted(self.lat_us)
        return ordered[min(len(ordered) - 1, math.ceil(len(ordered) * p / 100) - 1)] / 1000.0


def _backend_queries(o: TimestampOracle) -> int:
    """Statements the oracle sent so far (attempts, retries included)."""
    inner = o.inner if isinstance(o, BatchingOracle) else o
    return sum(s.start_count + s.retry_count for s in inner.statistics().ops.values())


def _batch_counts(o: TimestampOracle) -> tuple[int, int]:
    s = o.statistics()
    return s.batched_op_count, s.batches_count


async def _measure(
    rt: Runtime, o: TimestampOracle, row: Row, seconds: float, loops: Sequence[_Loop]
) -> Row:
    """Runs every loop until `seconds` have passed and fills in `row`."""
    q0, (r0, b0) = _backend_queries(o), _batch_counts(o)
    deadline = rt.now() + seconds
    start = rt.now()
    async with anyio.create_task_group() as tg:
        for loop in loops:
            tg.start_soon(loop.run, rt, deadline)
    row.seconds = rt.now() - start
    row.queries = _backend_queries(o) - q0
    r1, b1 = _batch_counts(o)
    row.batch_requests, row.batches = r1 - r0, b1 - b0
    for loop in loops:
        if loop.counts:
            row.ops += loop.ops
            row.lat_us.extend(loop.lat_us)
    return row


class _Loop:
    """One client task: repeats `step` until the deadline, timing each step."""

    def __init__(self, o: TimestampOracle, *, counts: bool = True, append_s: float = 0.0) -> None:
        self.o = o
        self.counts = counts
        self.append_s = append_s
        self.ops = 0
        self.lat_us: list[int] = []

    async def step(self, rt: Runtime) -> None:
        await self.o.read_ts()

    async def run(self, rt: Runtime, deadline: float) -> None:
        while rt.now() < deadline:
            t0 = rt.now()
            await self.step(rt)
            self.lat_us.append(round((rt.now() - t0) * 1e6))
            self.ops += 1


class _GroupCommit(_Loop):
    """The group-commit shape: allocate, append (modeled), apply, then read."""

    async def step(self, rt: Runtime) -> None:
        w = await self.o.write_ts()
        await rt.sleep(self.append_s)  # the persist compare_and_append, modeled
        await self.o.apply_write(w.ts)
        await self.o.read_ts()


async def raw_select_rate(url: str, timeline: str, rt: Runtime, seconds: float) -> Row:
    """The physical limit: one asyncpg connection, the prepared `read_ts` SELECT
    back to back."""
    conn = await asyncpg.connect(url)
    row = Row("select", "asyncpg 1 conn", 1, 0, 0.0, 0)
    try:
        stmt = await conn.prepare(_READ_TS)
        await stmt.fetchval(timeline)
        start = rt.now()
        deadline = start + seconds
        while rt.now() < deadline:
            t0 = rt.now()
            await stmt.fetchval(timeline)
            row.lat_us.append(round((rt.now() - t0) * 1e6))
            row.ops += 1
        row.seconds = rt.now() - start
        row.queries = row.ops
    finally:
        await conn.close()
    return row


async def bench(
    rt: Runtime, url: str, *, seconds: float, modes: list[str], configs: list[str],
    pool_size: int, append_s: float,
) -> list[Row]:
    rows: list[Row] = []
    spec = replace(oracle_spec(url), pool_size=pool_size)
    async with await open_timeline(spec, fresh_timeline("bench"), rt) as inner:
        # Warm the pool: every connection open and its statements prepared.
        async with anyio.create_task_group() as tg:
            for _ in range(pool_size * 4):
                tg.start_soon(inner.read_ts)
        rows.append(await raw_select_rate(url, inner.timeline, rt, seconds))
        for config in configs:
            o: TimestampOracle = inner
            async with BatchingOracle(inner, rt, owns_inner=False) as batching:
                if config == "batched":
                    o = batching
                for mode in modes:
                    if mode == "read":
                        for n in READ_TASKS:
                            row = Row("read", config, n, 0, 0.0, 0)
                            rows.append(await _measure(rt, o, row, seconds, [_Loop(o) for _ in range(n)]))
                    elif mode == "write":
                        row = Row("write", config, 1, 0, 0.0, 0, note="commits")
                        loops: list[_Loop] = [_GroupCommit(o, append_s=append_s)]
                        rows.append(await _measure(rt, o, row, seconds, loops))
                    else:
                        # Reads are the measured ops; the committer keeps writes
                        # applying underneath, so batches see a moving read_ts.
                        row = Row("mixed", config, MIXED_READERS, 0, 0.0, 0, note="+1 committer")
                        loops = [_Loop(o) for _ in range(MIXED_READERS)]
                        loops.append(_GroupCommit(o, counts=False, append_s=append_s))
                        rows.append(await _measure(rt, o, row, seconds, loops))
    return rows


def _print(rows: list[Row]) -> None:
    head = f"{'mode':<7}{'config':<16}{'tasks':>6}{'ops/s':>10}{'queries/s':>11}{'batch':>7}"
    print(head + f"{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}  note")
    for r in rows:
        print(
            f"{r.mode:<7}{r.config:<16}{r.tasks:>6}{r.per_s:>10.0f}{r.queries_per_s:>11.0f}"
            f"{r.avg_batch:>7.1f}{r.pct_ms(50):>9.3f}{r.pct_ms(95):>9.3f}{r.pct_ms(99):>9.3f}  {r.note}"
        )


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "nan"
    return f"{v:.0f}" if v >= 100 else f"{v:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short runs (< 1 minute in all)")
    parser.add_argument("--raw", action="store_true", help="no batching: raw configuration only")
    parser.add_argument("--mode", choices=["read", "write", "mixed", "all"], default="all")
    parser.add_argument("--pool-size", type=int, default=8, help="connections in the oracle's pool")
    parser.add_argument("--append-ms", type=float, default=2.0, help="modeled table append")
    parser.add_argument("--seconds", type=float, default=None, help="per run (default 5, --quick 1)")
    args = parser.parse_args()
    seconds = args.seconds or (1.0 if args.quick else 5.0)
    modes = ["read", "write", "mixed"] if args.mode == "all" else [args.mode]
    if "read" not in modes:
        modes.insert(0, "read")  # the RESULT line needs it
    configs = ["raw"] if args.raw else ["batched", "raw"]

    with postgres_server(fsync=True) as url:

        async def go(rt: Runtime) -> list[Row]:
            return await bench(
                rt, url, seconds=seconds, modes=modes, configs=configs,
                pool_size=args.pool_size, append_s=args.append_ms / 1000,
            )

        rows = run(go, virtual=False)
    _print(rows)
    by = {(r.mode, r.config, r.tasks): r for r in rows}
    raw64 = by[("read", "raw", 64)]
    batched64 = by.get(("read", "batched", 64))
    batched = batched64.per_s if batched64 else math.nan
    result = {
        "batched_read_ts_per_s_64": batched,
        "raw_read_ts_per_s_64": raw64.per_s,
        "ratio_64": batched / raw64.per_s if raw64.per_s else math.nan,
        "avg_batch_64": batched64.avg_batch if batched64 else math.nan,
        "raw_select_per_s_1conn": by[("select", "asyncpg 1 conn", 1)].per_s,
    }
    print("RESULT " + " ".join(f"{k}={_fmt(v)}" for k, v in result.items()))


if __name__ == "__main__":
    main()
