"""The conformance suites must reject broken implementations (they are not
tests that cannot fail)."""

from __future__ import annotations

import pytest
from anyio.lowlevel import checkpoint

from persist.location import Blob, CaSResult, Consensus, SeqNo, VersionedData
from persist.mem import MemBlob, MemConsensus
from persist.testing import ConformanceFailure, check_blob, check_consensus


class _RacyConsensus(Consensus):
    """Checks the head, yields, then appends: two racers can both win a seqno."""

    def __init__(self) -> None:
        self.inner = MemConsensus()
        self.logs: dict[str, list[VersionedData]] = {}

    async def head(self, key: str) -> VersionedData | None:
        return await self.inner.head(key)

    async def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        head = await self.inner.head(key)
        if (head.seqno if head else None) != expected:
            return CaSResult.EXPECTATION_MISMATCH
        await checkpoint()
        self.inner._logs.setdefault(key, []).append(new)
        return CaSResult.COMMITTED

    async def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        return await self.inner.scan(key, from_seqno, limit)

    async def truncate(self, key: str, seqno: SeqNo) -> int:
        return await self.inner.truncate(key, seqno)


class _OffByOneTruncate(Consensus):
    def __init__(self) -> None:
        self.inner = MemConsensus()

    async def head(self, key: str) -> VersionedData | None:
        return await self.inner.head(key)

    async def compare_and_set(self, key: str, expected: SeqNo | None, new: VersionedData) -> CaSResult:
        return await self.inner.compare_and_set(key, expected, new)

    async def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        return await self.inner.scan(key, from_seqno, limit)

    async def truncate(self, key: str, seqno: SeqNo) -> int:
        return await self.inner.truncate(key, seqno.next() if seqno > SeqNo(0) else seqno)


class _UnsortedListing(Blob):
    def __init__(self) -> None:
        self.inner = MemBlob()

    async def get(self, key: str) -> bytes | None:
        return await self.inner.get(key)

    async def set(self, key: str, value: bytes) -> None:
        await self.inner.set(key, value)

    async def delete(self, key: str) -> bool:
        return await self.inner.delete(key)

    async def list_keys(self, prefix: str = "") -> list[str]:
        return list(reversed(await self.inner.list_keys(prefix)))


class _TornWrites(Blob):
    """Writes a value in two steps: a concurrent reader can see a prefix."""

    def __init__(self) -> None:
        self.inner = MemBlob()

    async def get(self, key: str) -> bytes | None:
        return await self.inner.get(key)

    async def set(self, key: str, value: bytes) -> None:
        await self.inner.set(key, value[: len(value) // 2])
        await checkpoint()
        await self.inner.set(key, value)

    async def delete(self, key: str) -> bool:
        return await self.inner.delete(key)

    async def list_keys(self, prefix: str = "") -> list[str]:
        return await self.inner.list_keys(prefix)


@pytest.mark.asyncio
@pytest.mark.parametrize("broken", [_RacyConsensus, _OffByOneTruncate])
async def test_consensus_suite_rejects(broken: type[Consensus]) -> None:
    async def make() -> Consensus:
        return broken()

    with pytest.raises(ConformanceFailure):
        await check_consensus(make)


@pytest.mark.asyncio
@pytest.mark.parametrize("broken", [_UnsortedListing, _TornWrites])
async def test_blob_suite_rejects(broken: type[Blob]) -> None:
    async def make() -> Blob:
        return broken()

    with pytest.raises(ConformanceFailure):
        await check_blob(make)
