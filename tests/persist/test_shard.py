"""Persist shards: appends, reads, leases, idempotency, compaction and GC bounds."""

from __future__ import annotations

import random
from collections import Counter

import anyio
import pytest

from persist.client import Appended, PersistClient, PersistConfig, UpperMismatch
from persist.codec import Update, consolidate
from persist.faults import UnreliableBlob, UnreliableConsensus
from persist.frontier import Frontier
from persist.location import CaSResult, Consensus, SeqNo, VersionedData
from persist.machine import LeaseExpiredError, MachineConfig
from persist.open import open_blob, open_consensus, open_location
from persist.state import decode_diff
from sim.runtime.core import Runtime
from sim.runtime.errors import Indeterminate, InvalidUsage


def row(i: int, ts: int, diff: int = 1) -> Update:
    return Update(f"k{i}".encode(), f"v{i}".encode(), ts, diff)


def _rt() -> Runtime:
    return Runtime(seed=1)


pytestmark = pytest.mark.virtual


@pytest.mark.asyncio
async def test_compare_and_append_then_snapshot_is_exact() -> None:
    async with PersistClient(*await open_location(), _rt()) as client:
        w, r = await client.open("s")
        assert await w.compare_and_append([row(1, 0), row(2, 1)], 0, 2) == Appended(Frontier.at(2))
        assert await w.compare_and_append([row(1, 2, -1)], 2, 5) == Appended(Frontier.at(5))
        assert await w.compare_and_append([], 3, 6) == UpperMismatch(Frontier.at(5))
        assert await r.snapshot(0) == [row(1, 0)]
        assert await r.snapshot(1) == [row(1, 1), row(2, 1)]
        assert await r.snapshot(4) == [row(2, 4)]
        assert await r.fetch_recent_upper() == Frontier.at(5)


@pytest.mark.asyncio
async def test_bad_times_are_invalid_usage() -> None:
    async with PersistClient(*await open_location(), _rt()) as client:
        w, r = await client.open("s")
        with pytest.raises(InvalidUsage, match="outside"):
            await w.compare_and_append([row(1, 5)], 0, 5)
        with pytest.raises(InvalidUsage, match="less than lower"):
            await w.compare_and_append([], 5, 3)
        with pytest.raises(InvalidUsage, match="outside"):
            await w.append([row(1, 0)], 1, 2)
        await w.compare_and_append([row(1, 0)], 0, 10)
        await r.downgrade_since(5)
        with pytest.raises(InvalidUsage, match="below its since"):
            await r.snapshot(4)


@pytest.mark.asyncio
async def test_snapshot_waits_until_as_of_is_complete() -> None:
    rt = _rt()
    async with PersistClient(*await open_location(), rt) as client:
        w, r = await client.open("s")
        got: list[list[Update]] = []

        async def read() -> None:
            got.append(await r.snapshot(3))

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await rt.sleep(1)
            assert got == []
            await w.compare_and_append([row(1, 3)], 0, 4)
        assert got == [[row(1, 3)]]


@pytest.mark.asyncio
async def test_listen_after_snapshot_reproduces_the_collection() -> None:
    async with PersistClient(*await open_location(), _rt()) as client:
        w, r = await client.open("s")
        await w.compare_and_append([row(1, 0), row(2, 1)], 0, 2)
        seen = list(await r.snapshot(1))
        listen = r.listen(1)
        progress: list[Frontier] = []

        async def consume() -> None:
            async for batch in listen:
                seen.extend(batch.updates)
                progress.append(batch.progress)
                if batch.progress == Frontier.at(9):
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await w.compare_and_append([row(3, 2), row(1, 3, -1)], 2, 4)
            await w.compare_and_append([], 4, 7)
            await w.compare_and_append([row(4, 8)], 7, 9)
        assert progress == sorted(progress)
        assert progress[-1] == Frontier.at(9)
        assert set(progress) <= {Frontier.at(4), Frontier.at(7), Frontier.at(9)}
        assert sorted(seen) == sorted([row(1, 1), row(2, 1), row(3, 2), row(1, 3, -1), row(4, 8)])
        pending = r.listen(8)  # progress 9: the since must stay below it
        with pytest.raises(InvalidUsage, match="below the progress"):
            await r.downgrade_since(9)
        await r.downgrade_since(8)
        pending.close()
        await r.downgrade_since(9)


@pytest.mark.asyncio
async def test_replicated_writers_append_identical_data_once() -> None:
    async with PersistClient(*await open_location(), _rt()) as client:
        a, r = await client.open("s")
        b = await client.open_writer("s")
        data = [row(i, i) for i in range(10)]
        assert await a.append(data[:5], 0, 5) == Appended(Frontier.at(5))
        # b is behind: its [0, 5) is already there, so only [5, 8) lands.
        assert await b.append(data[:8], 0, 8) == Appended(Frontier.at(8))
        assert await a.append(data[5:8], 5, 8) == Appended(Frontier.at(8))
        assert await a.append([], 10, 12) == UpperMismatch(Frontier.at(8))  # a gap
        assert await r.snapshot(7) == [u._replace(ts=7) for u in data[:8]]


@pytest.mark.asyncio
async def test_racing_writers_one_winner_per_upper() -> None:
    rt = _rt()
    async with PersistClient(*await open_location(), rt) as client:
        writers = [await client.open_writer("s") for _ in range(8)]
        reader = await client.open_reader("s")
        wins: dict[int, int] = {}
        mismatches: list[tuple[int, Frontier]] = []

        async def race(i: int) -> None:
            w = writers[i]
            upper = 0
            while upper < 40:
                result = await w.compare_and_append([row(i, upper)], upper, upper + 1)
                if isinstance(result, Appended):
                    assert upper not in wins, f"two winners at upper {upper}"
                    wins[upper] = i
                    upper += 1
                else:
                    assert result.current.ts is not None
                    assert result.current.ts > upper
                    mismatches.append((upper, result.current))
                    upper = result.current.ts

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(race, i)
        # Every loser saw an upper the shard really had (one past a won upper).
        assert all(current.ts is not None and current.ts - 1 in wins for _, current in mismatches)
        assert sorted(wins) == list(range(len(wins)))
        assert len(wins) >= 40
        assert mismatches, "eight writers racing must collide"
        snap = await reader.snapshot(max(wins))
        assert {u.key: u.diff for u in snap} == dict(Counter(f"k{w}".encode() for w in wins.values()))


class _TimeoutAfterFirstCaS(Consensus):
    """Applies the first CaS of command `kind` after arming, then reports it
    Indeterminate."""

    def __init__(self, inner: Consensus, kind: str = "compare_and_append") -> None:
        self.inner = inner
        self.kind = kind
        self.armed = False
        self.fired = 0

    async def head(self, key: str) -> VersionedData | None:
        return await self.inner.head(key)

    async def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        result = await self.inner.compare_and_set(key, expected, new)
        if self.armed and result is CaSResult.COMMITTED and decode_diff(new.data).command == self.kind:
            self.armed = False
            self.fired += 1
            raise Indeterminate("injected: applied, then timed out")
        return result

    async def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        return await self.inner.scan(key, from_seqno, limit)

    async def truncate(self, key: str, seqno: SeqNo) -> int:
        return await self.inner.truncate(key, seqno)


@pytest.mark.asyncio
async def test_retry_after_indeterminate_cas_never_appends_twice() -> None:
    consensus = _TimeoutAfterFirstCaS(await open_consensus("mem://"))
    async with PersistClient(await open_blob("mem://"), consensus, _rt()) as client:
        w, r = await client.open("s")
        consensus.armed = True
        assert await w.compare_and_append([row(1, 0)], 0, 1) == Appended(Frontier.at(1))
        assert consensus.fired == 1
        assert await r.snapshot(0) == [row(1, 0)]
        assert await w.compare_and_append([row(2, 1)], 1, 2) == Appended(Frontier.at(2))
        assert await r.snapshot(1) == [row(1, 1), row(2, 1)]


@pytest.mark.asyncio
async def test_expired_handles_get_a_clear_error() -> None:
    rt = _rt()
    cfg = PersistConfig(machine=MachineConfig(lease_ms=1_000))
    async with PersistClient(*await open_location(), rt, config=cfg) as client:
        stale_w = await client.open_writer("s", heartbeat=False)
        stale_r = await client.open_reader("s", heartbeat=False)
        live_w, live_r = await client.open("s")
        await rt.sleep(5)  # the stale handles' leases run out; the live ones heartbeat
        await live_w.compare_and_append([row(1, 0)], 0, 1)  # any transition expires leases
        with pytest.raises(LeaseExpiredError, match="expired"):
            await stale_w.compare_and_append([row(2, 1)], 1, 2)
        with pytest.raises(LeaseExpiredError, match="expired"):
            await stale_r.downgrade_since(1)
        state = (await client.machine("s")).state
        assert stale_w.writer_id not in state.writers
        assert stale_r.reader_id not in state.readers
        assert await live_r.snapshot(0) == [row(1, 0)]


@pytest.mark.asyncio
async def test_restart_sees_exactly_the_committed_state() -> None:
    blob, consensus = await open_location()
    expected: list[Update] = []
    async with PersistClient(blob, consensus, Runtime(seed=3)) as client:
        w, _ = await client.open("s")
        for i in range(300):
            await w.compare_and_append([row(i % 7, i, 1 if i % 3 else -1)], i, i + 1)
            expected.append(row(i % 7, i, 1 if i % 3 else -1))
        await client.wait_idle()
        committed = await (await client.machine("s")).fetch()
    async with PersistClient(blob, consensus, Runtime(seed=4)) as client:
        # Rebuilt from the latest rollup plus the diffs after it: the very same state.
        assert await (await client.machine("s")).fetch() == committed
        w, r = await client.open("s")
        assert w.upper == Frontier.at(300)
        want = [u._replace(ts=299) for u in consolidate(expected, since=299)]
        assert await r.snapshot(299) == want


@pytest.mark.asyncio
async def test_state_stays_bounded_under_10k_appends() -> None:
    """10,000 small appends with a reader following and downgrading its since:
    O(log n) live batches, no orphaned blobs after GC, Consensus holds at most
    about two rollup intervals of diffs."""
    blob, consensus = await open_location()
    rt = Runtime(seed=5)
    n = 10_000
    async with PersistClient(blob, consensus, rt) as client:
        w, r = await client.open("s")
        for i in range(n):
            await w.compare_and_append([row(i % 100, i)], i, i + 1)
            if i % 50 == 49:
                await r.downgrade_since(i)
        await r.downgrade_since(n - 1)
        await client.wait_idle()
        await r.downgrade_since(n - 1)  # move the seqno hold past the last compaction
        await client.wait_idle()
        m = await client.machine("s")
        state = m.state
        assert len(state.batches) <= 40, len(state.batches)
        live = set(state.live_blob_keys()) | {f"s/rollup/v{v:020d}" for v in state.rollups}
        garbage = {g.key for g in state.garbage}
        on_blob = set(await blob.list_keys("s/"))
        assert on_blob - live - garbage == set(), "orphaned blobs"
        assert len(garbage) <= 40
        entries = await consensus.scan("s", SeqNo(0), 100_000)
        assert len(entries) <= 2 * m.cfg.rollup_interval + 10, len(entries)
        assert len(await r.snapshot(n - 1)) == 100
        stats = client.statistics()
        assert stats.compactions > 0
        assert stats.gc_deleted_blobs > 0
        assert stats.gc_truncated_entries > 0


@pytest.mark.asyncio
async def test_unreliable_location_loses_and_duplicates_nothing() -> None:
    rng = random.Random(9)
    blob = UnreliableBlob(await open_blob("mem://"), rng, p_fail=0.1, p_timeout=0.1)
    consensus = UnreliableConsensus(await open_consensus("mem://"), rng, p_fail=0.1, p_timeout=0.1)
    async with PersistClient(blob, consensus, Runtime(seed=6)) as client:
        w, r = await client.open("s")
        for i in range(200):
            assert await w.compare_and_append([row(i, i)], i, i + 1) == Appended(Frontier.at(i + 1))
        snap = await r.snapshot(199)
    assert sorted(u.key for u in snap) == sorted(f"k{i}".encode() for i in range(200))
    assert all(u.diff == 1 for u in snap)
    assert consensus.statistics().timed_out_after_applying > 0


@pytest.mark.asyncio
async def test_compaction_applied_under_an_indeterminate_cas_keeps_its_blob() -> None:
    """Regression: a compaction whose CaS landed but reported Indeterminate was
    re-applied, refused ("inputs are gone"), and its output blob deleted while
    the state still referenced it."""
    consensus = _TimeoutAfterFirstCaS(await open_consensus("mem://"), "compaction")
    consensus.armed = True
    blob = await open_blob("mem://")
    async with PersistClient(blob, consensus, _rt()) as client:
        w, r = await client.open("s")
        for i in range(8):
            await w.compare_and_append([row(i, i)], i, i + 1)
        await client.wait_idle()
        assert consensus.fired == 1
        state = (await client.machine("s")).state
        for b in state.batches:
            assert b.key is None or await blob.get(b.key) is not None, b
        assert await r.snapshot(7) == [row(i, 7) for i in range(8)]


@pytest.mark.asyncio
async def test_finished_shard_is_tombstoned_and_reclaimed() -> None:
    """Upper and since both empty: the shard can never be written or read again,
    so its batches are deleted and new handles are refused (seed 002)."""
    blob = await open_blob("mem://")
    async with PersistClient(blob, await open_consensus("mem://"), _rt()) as client:
        w, r = await client.open("s")
        await w.compare_and_append([row(1, 0)], 0, 1)
        await w.compare_and_append([row(2, 1)], 1, Frontier.EMPTY)
        with pytest.raises(InvalidUsage, match="empty frontier"):
            await w.compare_and_append([], Frontier.EMPTY, Frontier.EMPTY)
        assert await r.snapshot(5) == [row(1, 5), row(2, 5)]
        await r.downgrade_since(Frontier.EMPTY)
        await client.wait_idle()
        await client.maintain("s")
        state = (await client.machine("s")).state
        assert state.tombstone
        assert state.batches == ()
        assert not state.readers
        assert not state.writers
        assert [k for k in await blob.list_keys("s/") if "/b/" in k] == []
        with pytest.raises(InvalidUsage, match="tombstoned"):
            await client.open("s")


@pytest.mark.asyncio
async def test_statistics_is_a_frozen_snapshot() -> None:
    async with PersistClient(*await open_location(), _rt()) as client:
        w, _ = await client.open("s")
        await w.compare_and_append([row(1, 0)], 0, 1)
        assert await w.compare_and_append([], 0, 2) == UpperMismatch(Frontier.at(1))
        stats = client.statistics()
        assert stats.cas_attempts["compare_and_append"] == 1
        assert stats.batches_written == 1
        assert stats.bytes_written > 0
        with pytest.raises(AttributeError):
            stats.batches_written = 2  # type: ignore[misc]
        await w.compare_and_append([row(2, 1)], 1, 2)
        assert stats.batches_written == 1
        assert client.statistics().batches_written == 2
