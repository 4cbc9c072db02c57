"""Benchmark of the persist location: Consensus CaS and Blob put/get.

Consensus: compare_and_set per second and p50/p99 latency on mem and Postgres
(the embedded server, fsync on, unless COORDSIM_POSTGRES_URL is set), with 1 and
16 concurrent writers on distinct keys. Blob: set/get p50 on file (fsync on) and
S3 (a local moto server unless COORDSIM_S3_ENDPOINT is set) at 1 KiB and 1 MiB.

    uv run python bench/persist_location.py [--quick]

Last line: `RESULT pg_cas_per_s_1=… pg_cas_per_s_16=… pg_cas_p50_ms=… s3_put_1k_p50_ms=… file_put_1k_p50_ms=…`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from hdrh.histogram import HdrHistogram

from persist.location import Blob, CaSResult, Consensus, SeqNo, VersionedData
from persist.open import S3_ENDPOINT_ENV, open_blob, open_consensus
from persist.s3_client import create_bucket
from sim.runtime.core import Runtime, run
from sim.services.postgres import postgres_server
from sim.services.s3 import open_s3

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator


@dataclass
class Stat:
    ops: int
    seconds: float
    hist: HdrHistogram

    @property
    def per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    def pct_ms(self, p: float) -> float:
        return float(self.hist.get_value_at_percentile(p)) / 1000.0


def _hist() -> HdrHistogram:
    return HdrHistogram(1, 60_000_000, 3)  # microseconds, up to a minute


async def bench_cas(rt: Runtime, c: Consensus, writers: int, ops_per_writer: int) -> Stat:
    hist = _hist()
    payload = b"x" * 256

    async def writer(w: int) -> None:
        key = f"bench-{uuid.uuid4().hex[:8]}-{w}"
        expected: SeqNo | None = None
        for _ in range(ops_per_writer):
            new = VersionedData(SeqNo.minimum() if expected is None else expected.next(), payload)
            t0 = rt.now()
            result = await c.compare_and_set(key, expected, new)
            hist.record_value(max(1, round((rt.now() - t0) * 1e6)))
            assert result is CaSResult.COMMITTED
            expected = new.seqno

    start = rt.now()
    async with anyio.create_task_group() as tg:
        for w in range(writers):
            tg.start_soon(writer, w)
    return Stat(writers * ops_per_writer, rt.now() - start, hist)


async def bench_blob(rt: Runtime, blob: Blob, size: int, n: int) -> tuple[Stat, Stat]:
    value = os.urandom(size)
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    put, get = _hist(), _hist()
    start = rt.now()
    for i in range(n):
        t0 = rt.now()
        await blob.set(f"{prefix}/{i}", value)
        put.record_value(max(1, round((rt.now() - t0) * 1e6)))
    put_s = rt.now() - start
    start = rt.now()
    for i in range(n):
        t0 = rt.now()
        got = await blob.get(f"{prefix}/{i}")
        get.record_value(max(1, round((rt.now() - t0) * 1e6)))
        assert got == value
    get_s = rt.now() - start
    for i in range(n):
        await blob.delete(f"{prefix}/{i}")
    return Stat(n, put_s, put), Stat(n, get_s, get)


@contextlib.contextmanager
def services() -> Iterator[tuple[str, str]]:
    """(postgres URL, S3 endpoint): from the environment or started here."""
    with contextlib.ExitStack() as stack:
        pg_url = stack.enter_context(postgres_server(fsync=True))
        endpoint = os.environ.get(S3_ENDPOINT_ENV)
        if not endpoint:
            endpoint = stack.enter_context(open_s3()).endpoint
        asyncio.run(create_bucket(endpoint, "coordsim-bench"))
        yield pg_url, endpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer operations (< 1 minute)")
    args = parser.parse_args()
    cas_ops = 100 if args.quick else 500
    blob_n = 20 if args.quick else 100

    with services() as (pg_url, s3_endpoint):

        async def go(rt: Runtime) -> dict[str, float]:
            rows: list[tuple[str, Stat]] = []
            mem = await open_consensus("mem://")
            rows.append(("mem cas x1", await bench_cas(rt, mem, 1, cas_ops * 10)))
            rows.append(("mem cas x16", await bench_cas(rt, mem, 16, cas_ops)))
            pg = await open_consensus(pg_url)
            try:
                rows.append(("pg cas x1", await bench_cas(rt, pg, 1, cas_ops)))
                rows.append(("pg cas x16", await bench_cas(rt, pg, 16, cas_ops)))
            finally:
                await pg.close()
            with tempfile.TemporaryDirectory(prefix="coordsim-bench-") as tmp:
                blobs: list[tuple[str, Callable[[], Awaitable[Blob]]]] = [
                    ("file", lambda: _file_blob(tmp)),
                    ("s3", lambda: open_blob(f"s3://coordsim-bench/run?endpoint={s3_endpoint}")),
                ]
                for name, make in blobs:
                    blob = await make()
                    try:
                        for size, label in ((1024, "1k"), (1 << 20, "1m")):
                            put, get = await bench_blob(rt, blob, size, blob_n)
                            rows.append((f"{name} put {label}", put))
                            rows.append((f"{name} get {label}", get))
                    finally:
                        await blob.close()
            print(f"{'operation':<16}{'ops':>8}{'ops/s':>12}{'p50 ms':>10}{'p99 ms':>10}")
            for label, s in rows:
                print(f"{label:<16}{s.ops:>8}{s.per_s:>12.0f}{s.pct_ms(50):>10.3f}{s.pct_ms(99):>10.3f}")
            by = dict(rows)
            return {
                "pg_cas_per_s_1": by["pg cas x1"].per_s,
                "pg_cas_per_s_16": by["pg cas x16"].per_s,
                "pg_cas_p50_ms": by["pg cas x1"].pct_ms(50),
                "pg_cas_p99_ms": by["pg cas x1"].pct_ms(99),
                "mem_cas_per_s_1": by["mem cas x1"].per_s,
                "mem_cas_per_s_16": by["mem cas x16"].per_s,
                "s3_put_1k_p50_ms": by["s3 put 1k"].pct_ms(50),
                "s3_get_1k_p50_ms": by["s3 get 1k"].pct_ms(50),
                "s3_put_1m_p50_ms": by["s3 put 1m"].pct_ms(50),
                "file_put_1k_p50_ms": by["file put 1k"].pct_ms(50),
                "file_get_1k_p50_ms": by["file get 1k"].pct_ms(50),
                "file_put_1m_p50_ms": by["file put 1m"].pct_ms(50),
            }

        result = run(go, virtual=False)
    print("RESULT " + " ".join(f"{k}={v:.3f}" if v < 100 else f"{k}={v:.0f}" for k, v in result.items()))


async def _file_blob(root: str) -> Blob:
    return await open_blob(f"file://{root}")  # fsync on, as the default


if __name__ == "__main__":
    main()
