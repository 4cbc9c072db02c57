"""Blob and Consensus wrappers that add modeled latency, so virtual-mode runs pay
for persist round trips as real ones do (`blob.get`, `blob.set`, `blob.delete`,
`blob.list`, `consensus.head`, `consensus.cas`, `consensus.scan`,
`consensus.truncate`; each falls back to `blob`/`consensus`, then the model's
default). The wrapped store's semantics are unchanged: only time passes.

Each call samples and sleeps itself (`Runtime.sample`, `Runtime.sleep`) rather
than awaiting `Runtime.delay`, which does the same in one coroutine frame
more; every modeled persist round trip passes here (issue 20).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from persist.location import Blob, CaSResult, Consensus, SeqNo, VersionedData

if TYPE_CHECKING:
    from sim.runtime.core import Runtime

__all__ = ["LatentBlob", "LatentConsensus"]


@final
class LatentBlob(Blob):
    """`inner` with one sample of `blob.<op>` slept before each operation."""

    def __init__(self, inner: Blob, rt: Runtime) -> None:
        self.inner = inner
        self._rt = rt

    async def get(self, key: str) -> bytes | None:
        await self._rt.sleep(self._rt.sample("blob.get"))
        return await self.inner.get(key)

    async def set(self, key: str, value: bytes) -> None:
        await self._rt.sleep(self._rt.sample("blob.set"))
        await self.inner.set(key, value)

    async def delete(self, key: str) -> bool:
        await self._rt.sleep(self._rt.sample("blob.delete"))
        return await self.inner.delete(key)

    async def list_keys(self, prefix: str = "") -> list[str]:
        await self._rt.sleep(self._rt.sample("blob.list"))
        return await self.inner.list_keys(prefix)

    async def close(self) -> None:
        await self.inner.close()


@final
class LatentConsensus(Consensus):
    """`inner` with one sample of `consensus.<op>` slept before each operation
    (the operation then takes effect at the end of the round trip)."""

    def __init__(self, inner: Consensus, rt: Runtime) -> None:
        self.inner = inner
        self._rt = rt

    async def head(self, key: str) -> VersionedData | None:
        await self._rt.sleep(self._rt.sample("consensus.head"))
        return await self.inner.head(key)

    async def compare_and_set(
        self, key: str, expected: SeqNo | None, new: VersionedData
    ) -> CaSResult:
        await self._rt.sleep(self._rt.sample("consensus.cas"))
        return await self.inner.compare_and_set(key, expected, new)

    async def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        await self._rt.sleep(self._rt.sample("consensus.scan"))
        return await self.inner.scan(key, from_seqno, limit)

    async def truncate(self, key: str, seqno: SeqNo) -> int:
        await self._rt.sleep(self._rt.sample("consensus.truncate"))
        return await self.inner.truncate(key, seqno)

    async def close(self) -> None:
        await self.inner.close()
