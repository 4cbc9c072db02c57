"""Fault injection for the stash: a `StashStore` wrapper that fails on purpose.

Each call, drawn from a seeded `random.Random`, passes through, fails
`Determinate` before reaching the inner store, or "times out" (`Indeterminate`)
— for writes, half of those timeouts *after* the inner call applied, the case
that makes blind retries unsafe unless the write is idempotent (appends are,
through their writer token). `Fenced` and `InvalidUsage` from the inner store
pass through untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, final

from catalog.stash_catalog import StashStore
from sim.runtime.errors import Determinate, Indeterminate, InvalidUsage

if TYPE_CHECKING:
    import random
    from collections.abc import Awaitable, Callable, Sequence

    from catalog.api import AppendResult
    from catalog.objects import CatalogState, CatalogUpdate

__all__ = ["UnreliableStashStore"]

T = TypeVar("T")


@final
class UnreliableStashStore(StashStore):
    """`inner` with faults: probability `p_fail` of a Determinate failure and
    `p_timeout` of a timeout per call. `enabled = False` lets everything through."""

    def __init__(
        self, inner: StashStore, rng: random.Random, *, p_fail: float = 0.05, p_timeout: float = 0.05
    ) -> None:
        if not (0 <= p_fail <= 1 and 0 <= p_timeout <= 1 and p_fail + p_timeout <= 1):
            raise InvalidUsage(f"fault rates must be in [0, 1] and sum to <= 1: {p_fail}, {p_timeout}")
        self.inner = inner
        self._rng = rng
        self.p_fail = p_fail
        self.p_timeout = p_timeout
        self.enabled = True
        self.injected = 0
        self.applied_then_timed_out = 0

    async def _call(self, op: str, write: bool, inner: Callable[[], Awaitable[T]]) -> T:
        if not self.enabled:
            return await inner()
        r = self._rng.random()
        if r < self.p_fail + (0 if write else self.p_timeout):
            self.injected += 1
            raise Determinate(f"injected failure: stash.{op}")
        if r < self.p_fail + self.p_timeout:
            self.injected += 1
            if self._rng.random() < 0.5:
                raise Indeterminate(f"injected timeout: stash.{op}")
            await inner()
            self.applied_then_timed_out += 1
            raise Indeterminate(f"injected timeout after applying: stash.{op}")
        return await inner()

    async def read_meta(self) -> tuple[int, int]:
        return await self._call("read_meta", False, self.inner.read_meta)

    async def read_state(self) -> tuple[int, CatalogState]:
        return await self._call("read_state", False, self.inner.read_state)

    async def read_log(self, lo: int) -> tuple[int, list[CatalogUpdate]] | None:
        return await self._call("read_log", False, lambda: self.inner.read_log(lo))

    async def snapshot(self, ts: int) -> CatalogState | None:
        return await self._call("snapshot", False, lambda: self.inner.snapshot(ts))

    async def append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate],
        epoch: int | None, writer: str, token: str,
    ) -> AppendResult:
        return await self._call(
            "append", True,
            lambda: self.inner.append(expected_upper, new_upper, updates, epoch, writer, token),
        )

    async def confirm(self, epoch: int) -> None:
        await self._call("confirm", False, lambda: self.inner.confirm(epoch))

    async def compact(self, since: int) -> None:
        await self._call("compact", True, lambda: self.inner.compact(since))

    async def wait_for_change(self, upper: int) -> None:
        await self.inner.wait_for_change(upper)

    async def close(self) -> None:
        await self.inner.close()
