"""Fault injection: Blob and Consensus wrappers that fail on purpose.

Each call, drawn from a seeded `random.Random`, either passes through, fails
`Determinate` before reaching the inner store, or "times out" (`Indeterminate`)
— half of those timeouts *after* the inner call applied, the case that makes
blind retries of writes unsafe. Reads only ever fail `Determinate`, as the
interface contract says, and misuse is still reported as `InvalidUsage` before
any fault is drawn.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

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
from sim.runtime.errors import Determinate, Indeterminate, InvalidUsage

if TYPE_CHECKING:
    import random

__all__ = ["FaultStatistics", "UnreliableBlob", "UnreliableConsensus"]


class _Fate(enum.Enum):
    OK = "ok"
    FAIL = "fail"
    TIMEOUT_BEFORE = "timeout-before"
    TIMEOUT_AFTER = "timeout-after"


@final
@dataclass(frozen=True)
class FaultStatistics:
    calls: int
    failed: int
    timed_out_before: int
    timed_out_after_applying: int


class _Injector:
    def __init__(self, name: str, rng: random.Random, p_fail: float, p_timeout: float) -> None:
        self.name = name
        self.rng = rng
        self.enabled = True
        self.set_rates(p_fail, p_timeout)
        self._counts = dict.fromkeys(_Fate, 0)

    def set_rates(self, p_fail: float, p_timeout: float) -> None:
        if not (0 <= p_fail <= 1 and 0 <= p_timeout <= 1 and p_fail + p_timeout <= 1):
            raise InvalidUsage(
                f"fault rates must be in [0, 1] and sum to <= 1: p_fail={p_fail} p_timeout={p_timeout}"
            )
        self.p_fail = p_fail
        self.p_timeout = p_timeout

    def _fate(self, write: bool) -> _Fate:
        if not self.enabled:
            return _Fate.OK
        r = self.rng.random()
        if r < self.p_fail:
            return _Fate.FAIL
        if r < self.p_fail + self.p_timeout:
            if not write:
                return _Fate.FAIL
            return _Fate.TIMEOUT_AFTER if self.rng.random() < 0.5 else _Fate.TIMEOUT_BEFORE
        return _Fate.OK

    def before(self, op: str, write: bool) -> _Fate:
        """Draws this call's fate and raises now if it fails before reaching the
        inner store; the caller then awaits the inner call and passes the fate
        to `after`. (Two plain calls instead of a coroutine around the inner
        one: every modeled persist round trip passes here; issue 20.)"""
        fate = self._fate(write)
        self._counts[fate] += 1
        if fate is _Fate.FAIL:
            raise Determinate(f"injected failure: {self.name}.{op}")
        if fate is _Fate.TIMEOUT_BEFORE:
            raise Indeterminate(f"injected timeout: {self.name}.{op}")
        return fate

    def after(self, op: str, fate: _Fate) -> None:
        """Raises if `fate` says the call times out after it applied."""
        if fate is _Fate.TIMEOUT_AFTER:
            raise Indeterminate(f"injected timeout after applying: {self.name}.{op}")

    def statistics(self) -> FaultStatistics:
        c = self._counts
        return FaultStatistics(
            calls=sum(c.values()),
            failed=c[_Fate.FAIL],
            timed_out_before=c[_Fate.TIMEOUT_BEFORE],
            timed_out_after_applying=c[_Fate.TIMEOUT_AFTER],
        )


class _FaultControls:
    """The knobs both wrappers share: switch faults on and off, change the rates,
    read the counts."""

    _faults: _Injector

    @property
    def enabled(self) -> bool:
        return self._faults.enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._faults.enabled = value

    def set_rates(self, *, p_fail: float, p_timeout: float) -> None:
        self._faults.set_rates(p_fail, p_timeout)

    def statistics(self) -> FaultStatistics:
        return self._faults.statistics()


@final
class UnreliableBlob(_FaultControls, Blob):
    """A Blob that fails with probability `p_fail` and times out with `p_timeout`.

    Set `enabled = False` (or rates of 0) to let every call through, e.g. to
    inspect the state a faulty run left behind.
    """

    def __init__(
        self, inner: Blob, rng: random.Random, *, p_fail: float = 0.05, p_timeout: float = 0.05
    ) -> None:
        self.inner = inner
        self._faults = _Injector("blob", rng, p_fail, p_timeout)

    async def get(self, key: str) -> bytes | None:
        check_blob_key(key)
        fate = self._faults.before("get", False)
        result = await self.inner.get(key)
        self._faults.after("get", fate)
        return result

    async def set(self, key: str, value: bytes) -> None:
        check_blob_key(key)
        fate = self._faults.before("set", True)
        await self.inner.set(key, value)
        self._faults.after("set", fate)

    async def delete(self, key: str) -> bool:
        check_blob_key(key)
        fate = self._faults.before("delete", True)
        result = await self.inner.delete(key)
        self._faults.after("delete", fate)
        return result

    async def list_keys(self, prefix: str = "") -> list[str]:
        fate = self._faults.before("list_keys", False)
        result = await self.inner.list_keys(prefix)
        self._faults.after("list_keys", fate)
        return result

    async def close(self) -> None:
        await self.inner.close()


@final
class UnreliableConsensus(_FaultControls, Consensus):
    """A Consensus that fails with probability `p_fail` and times out with
    `p_timeout` (see `UnreliableBlob`)."""

    def __init__(
        self,
        inner: Consensus,
        rng: random.Random,
        *,
        p_fail: float = 0.05,
        p_timeout: float = 0.05,
    ) -> None:
        self.inner = inner
        self._faults = _Injector("consensus", rng, p_fail, p_timeout)

    async def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        fate = self._faults.before("head", False)
        result = await self.inner.head(key)
        self._faults.after("head", fate)
        return result

    async def compare_and_set(
        self, key: str, expected: SeqNo | None, new: VersionedData
    ) -> CaSResult:
        check_consensus_key(key)
        check_cas_seqnos(expected, new)
        fate = self._faults.before("compare_and_set", True)
        result = await self.inner.compare_and_set(key, expected, new)
        self._faults.after("compare_and_set", fate)
        return result

    async def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        check_scan_limit(limit)
        fate = self._faults.before("scan", False)
        result = await self.inner.scan(key, from_seqno, limit)
        self._faults.after("scan", fate)
        return result

    async def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        fate = self._faults.before("truncate", True)
        result = await self.inner.truncate(key, seqno)
        self._faults.after("truncate", fate)
        return result

    async def close(self) -> None:
        await self.inner.close()
