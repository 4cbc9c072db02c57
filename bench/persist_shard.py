"""Benchmark of persist shards: appends, listen lag, and state size under compaction.

Single-writer `compare_and_append` per second and p50/p99 latency on mem and on
Postgres Consensus + file Blob (the embedded server, fsync on, unless
COORDSIM_POSTGRES_URL is set; file Blob with fsync). Listen end-to-end lag: from
an append's acknowledgement to its delivery to a listener in another client
(which learns of new state by polling Consensus) and in the writer's own client.
State size: small appends with a reader following along, without compaction
and then after compaction + GC (2,000 with --quick, else 10,000), and 10,000 with
compaction running throughout.

    uv run python bench/persist_shard.py [--quick]

Last line: `RESULT pg_cas_append_per_s=… pg_cas_append_p99_ms=… listen_lag_p50_ms=… live_batches_after_10k=…`
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import uuid
from dataclasses import dataclass

import anyio
from hdrh.histogram import HdrHistogram

from persist.client import PersistClient, PersistConfig, ReadHandle
from persist.codec import Update
from persist.frontier import Frontier
from persist.location import Blob, Consensus, SeqNo
from persist.open import open_blob, open_consensus, open_location
from sim.runtime.core import Runtime, run
from sim.services.postgres import postgres_server


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


def _us(seconds: float) -> int:
    return max(1, round(seconds * 1e6))


def _row(i: int, ts: int) -> Update:
    return Update(f"key-{i % 1000}".encode(), b"v" * 32, ts, 1)


async def bench_appends(rt: Runtime, blob: Blob, consensus: Consensus, n: int) -> Stat:
    """One writer, `n` compare_and_appends of 10 rows each, back to back."""
    hist = _hist()
    shard = f"bench-{uuid.uuid4().hex[:12]}"
    async with PersistClient(blob, consensus, rt) as client:
        w, r = await client.open(shard)
        start = rt.now()
        for i in range(n):
            t0 = rt.now()
            await w.compare_and_append([_row(i * 10 + j, i) for j in range(10)], i, i + 1)
            hist.record_value(_us(rt.now() - t0))
            if i % 100 == 99:
                await r.downgrade_since(i)
        elapsed = rt.now() - start
        await w.expire()
        await r.expire()
    return Stat(n, elapsed, hist)


async def bench_listen_lag(rt: Runtime, blob: Blob, consensus: Consensus, n: int) -> tuple[Stat, Stat]:
    """Lag from an append's acknowledgement to its delivery, to a listener in a
    second client (polls Consensus) and in the writer's own client (woken by the
    commit). A delivery before the acknowledgement counts as 0."""
    shard = f"bench-{uuid.uuid4().hex[:12]}"
    acked: dict[int, float] = {}
    lags = {"other": _hist(), "same": _hist()}

    async def follow(name: str, reader: ReadHandle, done: anyio.Event) -> None:
        async for batch in reader.listen(0):
            t = rt.now()
            assert batch.progress.ts is not None
            for ts in range(batch.progress.ts):
                if ts in acked and (name, ts) not in delivered:
                    delivered.add((name, ts))
                    lags[name].record_value(_us(max(0.0, t - acked[ts])))
            if batch.progress >= Frontier.at(n):
                done.set()
                return

    delivered: set[tuple[str, int]] = set()
    async with PersistClient(blob, consensus, rt) as writer_client, PersistClient(
        blob, consensus, rt.derive("listener")
    ) as listener_client:
        w, same_reader = await writer_client.open(shard)
        await w.compare_and_append([_row(0, 0)], 0, 1)
        other_reader = await listener_client.open_reader(shard)
        done_other, done_same = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow, "other", other_reader, done_other)
            tg.start_soon(follow, "same", same_reader, done_same)
            for i in range(1, n):
                await w.compare_and_append([_row(i, i)], i, i + 1)
                acked[i] = rt.now()
                await rt.sleep(0.01)  # a steady trickle, not a burst
            await done_other.wait()
            await done_same.wait()
        await w.expire()
    return Stat(n - 1, 0.0, lags["other"]), Stat(n - 1, 0.0, lags["same"])


@dataclass
class Size:
    batches: int
    blobs: int
    blob_bytes: int
    consensus_entries: int

    def __str__(self) -> str:
        return (
            f"{self.batches} batches, {self.blobs} blobs ({self.blob_bytes / 1024:.0f} KiB), "
            f"{self.consensus_entries} Consensus entries"
        )


async def _size(client: PersistClient, blob: Blob, consensus: Consensus, shard: str) -> Size:
    m = await client.machine(shard)
    state = await m.fetch()
    assert state is not None
    keys = await blob.list_keys(f"{shard}/")
    sizes = [len(await blob.get(k) or b"") for k in keys]
    entries = await consensus.scan(shard, SeqNo(0), 1_000_000)
    return Size(len(state.batches), len(keys), sum(sizes), len(entries))


async def bench_state_size(rt: Runtime, n: int, backlog: int) -> tuple[Size, Size, Size]:
    """(`backlog` appends without compaction, then after compaction + GC; `n`
    appends with compaction throughout)."""
    sizes: list[Size] = []
    for compaction, count in ((False, backlog), (True, n)):
        blob, consensus = await open_location()
        async with PersistClient(blob, consensus, rt, config=PersistConfig(compaction=compaction)) as client:
            w, r = await client.open("s")
            for i in range(count):
                await w.compare_and_append([_row(i, i)], i, i + 1)
                if i % 50 == 49:
                    await r.downgrade_since(i)
            await r.downgrade_since(count - 1)
            await client.wait_idle()
            await r.downgrade_since(count - 1)  # move the seqno hold past the last compaction
            await client.wait_idle()
            sizes.append(await _size(client, blob, consensus, "s"))
            if not compaction:
                # The same location, now with a compacting client.
                async with PersistClient(blob, consensus, rt.derive("compactor")) as other:
                    await other.maintain("s")
                    await r.downgrade_since(count - 1)
                    await other.maintain("s")
                    sizes.append(await _size(other, blob, consensus, "s"))
    return sizes[0], sizes[1], sizes[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer operations (< 1 minute)")
    args = parser.parse_args()
    mem_n = 2_000 if args.quick else 10_000
    pg_n = 200 if args.quick else 1_000
    lag_n = 100 if args.quick else 500

    backlog = 2_000 if args.quick else 10_000

    async def sizes(rt: Runtime) -> tuple[Size, Size, Size]:
        return await bench_state_size(rt, 10_000, backlog)

    before, after, steady = run(sizes, seed=1, virtual=True)

    with postgres_server(fsync=True) as pg_url, tempfile.TemporaryDirectory(prefix="coordsim-bench-") as tmp:

        async def go(rt: Runtime) -> dict[str, float]:
            rows: list[tuple[str, Stat]] = []
            rows.append(("mem cas_append x1", await bench_appends(rt, *await open_location(), mem_n)))
            async with contextlib.AsyncExitStack() as stack:
                pg = await open_consensus(pg_url)
                stack.push_async_callback(pg.close)
                blob = await open_blob(f"file://{tmp}")  # fsync on, as the default
                rows.append(("pg+file cas_append x1", await bench_appends(rt, blob, pg, pg_n)))
                other, same = await bench_listen_lag(rt, blob, pg, lag_n)
            print(f"{'operation':<24}{'ops':>8}{'ops/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
            for label, s in rows:
                print(f"{label:<24}{s.ops:>8}{s.per_s:>10.0f}{s.pct_ms(50):>10.3f}{s.pct_ms(99):>10.3f}")
            for label, s in (("listen lag, other client", other), ("listen lag, same client", same)):
                print(f"{label:<24}{s.ops:>8}{'':>10}{s.pct_ms(50):>10.3f}{s.pct_ms(99):>10.3f}")
            by = dict(rows)
            return {
                "pg_cas_append_per_s": by["pg+file cas_append x1"].per_s,
                "pg_cas_append_p50_ms": by["pg+file cas_append x1"].pct_ms(50),
                "pg_cas_append_p99_ms": by["pg+file cas_append x1"].pct_ms(99),
                "mem_cas_append_per_s": by["mem cas_append x1"].per_s,
                "mem_cas_append_p50_ms": by["mem cas_append x1"].pct_ms(50),
                "mem_cas_append_p99_ms": by["mem cas_append x1"].pct_ms(99),
                "listen_lag_p50_ms": other.pct_ms(50),
                "listen_lag_p99_ms": other.pct_ms(99),
                "listen_lag_same_client_p50_ms": same.pct_ms(50),
            }

        result = run(go, virtual=False)
    print(f"{f'{backlog} appends, no compaction:':<38}{before}")
    print(f"{'  then compaction + GC:':<38}{after}")
    print(f"{'10000 appends, compaction throughout:':<38}{steady}")
    result["live_batches_after_10k"] = steady.batches
    result["batches_before_compaction"] = before.batches
    result["batches_after_compaction"] = after.batches
    first = ["pg_cas_append_per_s", "pg_cas_append_p99_ms", "listen_lag_p50_ms", "live_batches_after_10k"]
    keys = first + [k for k in result if k not in first]
    print("RESULT " + " ".join(_fmt(k, result[k]) for k in keys))


def _fmt(key: str, value: float) -> str:
    if float(value).is_integer() and (key.startswith("live") or key.startswith("batches")):
        return f"{key}={int(value)}"
    return f"{key}={value:.3f}" if value < 100 else f"{key}={value:.0f}"


if __name__ == "__main__":
    main()
