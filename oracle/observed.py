"""An oracle wrapper that reports every call — operation, timeline, start and end
on the Runtime clock, the timestamp involved, success — to an observer.

Traces record these as internal events, so the checker can verify the oracle
guarantees of seed 000 on what clients were actually handed (put it in front of
`BatchingOracle` to see batched answers, the known-bad variant's included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, final

from oracle.api import TimestampOracle, WriteTimestamp

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from oracle.metrics import OracleStatistics
    from sim.runtime.core import Runtime

__all__ = ["ObservedOracle", "OracleCall", "OracleObserver"]

T = TypeVar("T")


@final
@dataclass(frozen=True, slots=True)
class OracleCall:
    """One finished call: `ts` is the timestamp returned (`write_ts`, `read_ts`,
    `peek_write_ts`) or given (`apply_write`); None if the call failed."""

    op: str
    timeline: str
    start_s: float
    end_s: float
    ts: int | None
    ok: bool


#: Receives each finished call; must not block.
OracleObserver: TypeAlias = "Callable[[OracleCall], None]"


@final
class ObservedOracle(TimestampOracle):
    """Passes every call to `inner` and reports it to `observer` (which must not
    block). Closing it closes `inner`; `async with` it enters `inner`'s context
    (a `BatchingOracle` runs its worker there)."""

    def __init__(self, inner: TimestampOracle, rt: Runtime, observer: OracleObserver) -> None:
        self._inner = inner
        self._rt = rt
        self._observer = observer
        # An oracle's timeline is fixed: read through the wrappers once, not
        # on every call reported (issue 20).
        self._timeline = inner.timeline

    @property
    def timeline(self) -> str:
        return self._timeline

    @property
    def inner(self) -> TimestampOracle:
        return self._inner

    def __repr__(self) -> str:
        return f"ObservedOracle({self._inner!r})"

    async def _observe(self, op: str, call: Callable[[], Awaitable[T]], ts_of: Callable[[T], int | None]) -> T:
        start = self._rt.now()
        try:
            result = await call()
        except BaseException:
            self._observer(OracleCall(op, self._timeline, start, self._rt.now(), None, False))
            raise
        self._observer(OracleCall(op, self._timeline, start, self._rt.now(), ts_of(result), True))
        return result

    # The calls return `_observe`'s coroutine instead of awaiting it in one of
    # their own: a layer less on each suspension of the statement that awaits
    # them (issue 20).

    def write_ts(self) -> Coroutine[Any, Any, WriteTimestamp]:
        return self._observe("write_ts", self._inner.write_ts, _write_ts_of)

    def peek_write_ts(self) -> Coroutine[Any, Any, int]:
        return self._observe("peek_write_ts", self._inner.peek_write_ts, _itself)

    def read_ts(self) -> Coroutine[Any, Any, int]:
        return self._observe("read_ts", self._inner.read_ts, _itself)

    async def apply_write(self, ts: int) -> None:
        async def call() -> None:
            await self._inner.apply_write(ts)

        await self._observe("apply_write", call, lambda _: ts)

    def statistics(self) -> OracleStatistics:
        return self._inner.statistics()

    async def close(self) -> None:
        await self._inner.close()

    async def __aenter__(self) -> ObservedOracle:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._inner.__aexit__(*exc_info)


def _itself(ts: int) -> int:
    return ts


def _write_ts_of(w: WriteTimestamp) -> int:
    return w.ts
