"""In-memory Blob and Consensus: product code for virtual-time runs (`mem://`).

Adversarial on purpose: every method yields to the event loop before it acts, so
concurrent callers interleave as they would against a real server. Each call is
atomic after that yield, which is what makes MemConsensus linearizable. A
wrapper that already yields first (`sim.load.latent`'s modeled round trip)
passes `yields=False`: a second yield there only costs a loop turn per call,
about 40 loop callbacks per simulated update (issue 20).
"""

from __future__ import annotations

import bisect
from typing import final

from anyio.lowlevel import checkpoint

from persist.location import (
    Blob,
    CaSResult,
    Consensus,
    SeqNo,
    VersionedData,
    check_blob_key,
    check_cas_seqnos,
    check_consensus_key,
    check_scan_limit,
)
from sim.runtime.errors import InvalidUsage

__all__ = ["MemBlob", "MemConsensus"]


@final
class MemBlob(Blob):
    """A Blob in a dict. Stores nothing across processes or `MemBlob` instances."""

    def __init__(self, *, yields: bool = True) -> None:
        self._data: dict[str, bytes] = {}
        self._yields = yields

    async def get(self, key: str) -> bytes | None:
        check_blob_key(key)
        if self._yields:
            await checkpoint()
        return self._data.get(key)

    async def set(self, key: str, value: bytes) -> None:
        check_blob_key(key)
        value = bytes(value)
        if self._yields:
            await checkpoint()
        self._data[key] = value

    async def delete(self, key: str) -> bool:
        check_blob_key(key)
        if self._yields:
            await checkpoint()
        return self._data.pop(key, None) is not None

    async def list_keys(self, prefix: str = "") -> list[str]:
        if self._yields:
            await checkpoint()
        return sorted(k for k in self._data if k.startswith(prefix))


@final
class MemConsensus(Consensus):
    """A Consensus in a dict of per-key lists kept in seqno order."""

    def __init__(self, *, yields: bool = True) -> None:
        self._logs: dict[str, list[VersionedData]] = {}
        self._yields = yields

    async def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        if self._yields:
            await checkpoint()
        log = self._logs.get(key)
        return log[-1] if log else None

    async def compare_and_set(
        self, key: str, expected: SeqNo | None, new: VersionedData
    ) -> CaSResult:
        check_consensus_key(key)
        check_cas_seqnos(expected, new)
        if self._yields:
            await checkpoint()
        log = self._logs.setdefault(key, [])
        current = log[-1].seqno if log else None
        if current != expected:
            return CaSResult.EXPECTATION_MISMATCH
        log.append(VersionedData(new.seqno, bytes(new.data)))
        return CaSResult.COMMITTED

    async def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        check_scan_limit(limit)
        if self._yields:
            await checkpoint()
        log = self._logs.get(key, [])
        start = bisect.bisect_left(log, from_seqno, key=lambda e: e.seqno)
        return log[start : start + limit]

    async def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        if self._yields:
            await checkpoint()
        log = self._logs.get(key)
        if not log:
            raise InvalidUsage(f"truncate({key!r}, {seqno}): the key was never written")
        if seqno > log[-1].seqno:
            raise InvalidUsage(f"truncate({key!r}, {seqno}): above the head {log[-1].seqno}")
        cut = bisect.bisect_left(log, seqno, key=lambda e: e.seqno)
        del log[:cut]
        return cut
