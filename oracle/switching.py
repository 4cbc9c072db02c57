"""One timeline's oracle whose implementation is replaced while it serves:
seed 000's rollout, which switched a running deployment between the in-memory
oracle and the distributed one "back and forth" behind a feature flag
(Materialize's `timestamp_oracle_impl`).

The rule that keeps a switch linearizable (`SwitchingOracle.switch`): **the
new oracle starts at or above everything the old one handed out, and nothing
reaches it before it does.** In order: (1) new calls wait; (2) the calls in
flight on the old oracle complete (or fail) there — none is left to take
effect after the switch, where no later `read_ts` of the new oracle would see
it; (3) the old oracle's `write_ts` and `read_ts` are read; (4) the new oracle
is fast-forwarded to them (`Advancing.advance`: `write_ts` and `read_ts` each
raised to at least the old value, never lowered); (5) only then does it serve.
Every guarantee of `oracle.api.TimestampOracle` then holds across the switch
as if one oracle had served throughout: a later `write_ts` exceeds every
earlier result because the new `write_ts` starts at the old one's, and a later
`read_ts` covers every completed `apply_write` because those all completed on
the old oracle before its `read_ts` was read.

Source: Materialize's coordinator read the flag (`timestamp_oracle_impl`,
`postgres` or `catalog`) once at start-up — "all oracles must use the same
impl!" — and opened the configured oracle at `initially`, the largest
timestamp either implementation held for the timeline
(`get_initial_oracle_timestamps` in `src/adapter/src/coord.rs`: the
catalog's persisted timestamps, and `GREATEST(read_ts, write_ts)` of each row
of the Postgres oracle, `get_all_timelines`); `PostgresTimestampOracle::open`
(`src/adapter/src/coord/timestamp_oracle/postgres_oracle.rs`, later the
`src/timestamp-oracle` crate) then creates the row at `initially` and
`apply_write(initially)` forwards an existing one, "to what we're given from
outside". Its comment admits "linearizability violations, because there is no
central moment where [we] do distributed coordination for both oracle types",
which is why the rollout kept `confirm_leadership()` (seed 000): an old
process still serving from the old implementation learns it was deposed only
from that check. A live switch inside one process has that central moment —
steps 1-2 — so it can be exact; and it raises `read_ts` only to the old
`read_ts` (not to `GREATEST(read_ts, write_ts)`, which is safe at start-up
but would here name a timestamp whose write is still being appended).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, final, runtime_checkable

import anyio

from oracle.api import TimestampOracle, check_timestamp
from oracle.metrics import OpStatistics, OracleStatistics
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from oracle.api import WriteTimestamp

__all__ = ["Advancing", "Handover", "SwitchingOracle"]

T = TypeVar("T")


@runtime_checkable
class Advancing(Protocol):
    """An oracle a switch can fast-forward (`MemoryOracle`, `ModeledOracle`,
    `PostgresOracle`)."""

    async def advance(self, *, read_ts: int, write_ts: int) -> None:
        """Raises `write_ts` to at least `max(write_ts, read_ts)` and `read_ts`
        to at least `read_ts`, durably, before returning; lowers neither.
        Idempotent. Raises `InvalidUsage` for a timestamp outside
        `[0, MAX_TIMESTAMP]`."""


@final
@dataclass(frozen=True, slots=True)
class Handover:
    """What one switch did: the implementations (`OracleStatistics.implementation`
    names), the old oracle's state it was read at (None: not read, the
    known-bad switch), and how many calls were drained from the old oracle."""

    timeline: str
    old: str
    new: str
    read_ts: int | None
    write_ts: int | None
    drained: int

    def as_detail(self) -> dict[str, Any]:
        return {"timeline": self.timeline, "from": self.old, "to": self.new,
                "read_ts": self.read_ts, "write_ts": self.write_ts, "drained": self.drained}


@final
class SwitchingOracle(TimestampOracle):
    """Serves every call from its current oracle; `switch` replaces it (see
    the module docstring). Until a switch it only passes calls through: no
    extra suspension, so a run that never switches is the run it was.

    The oracles it was given are the caller's to close (`close` closes none).
    """

    def __init__(self, inner: TimestampOracle) -> None:
        self._inner = inner
        self._timeline = inner.timeline
        #: Set while a switch holds new calls back.
        self._gate: anyio.Event | None = None
        #: Calls in the current oracle, and the event a draining switch awaits.
        self._in_flight = 0
        self._drained: anyio.Event | None = None
        self._lock = anyio.Lock()
        #: Every oracle served from so far (statistics span the switches).
        self._history: list[TimestampOracle] = [inner]
        self._closed = False

    @property
    def timeline(self) -> str:
        return self._timeline

    @property
    def current(self) -> TimestampOracle:
        return self._inner

    @property
    def switches(self) -> int:
        return len(self._history) - 1

    def __repr__(self) -> str:
        return f"SwitchingOracle({self._inner!r})"

    # --- calls

    async def _call(self, op: Callable[[TimestampOracle], Awaitable[T]]) -> T:
        if self._closed:
            raise InvalidUsage(f"{self!r} is closed")
        while self._gate is not None:
            await self._gate.wait()
        inner = self._inner
        self._in_flight += 1
        try:
            return await op(inner)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._drained is not None:
                self._drained.set()

    async def write_ts(self) -> WriteTimestamp:
        return await self._call(_write_ts)

    async def peek_write_ts(self) -> int:
        return await self._call(_peek_write_ts)

    async def read_ts(self) -> int:
        return await self._call(_read_ts)

    async def apply_write(self, ts: int) -> None:
        check_timestamp(ts, "apply_write ts")

        async def apply(inner: TimestampOracle) -> None:
            await inner.apply_write(ts)

        await self._call(apply)

    # --- the switch

    async def switch(self, new: TimestampOracle, *, fast_forward: bool = True) -> Handover:
        """Serves from `new` from now on, by the rule of the module docstring.
        One switch at a time; the old oracle is left open (its owner closes
        it), though nothing reaches it any more.

        Args:
            fast_forward: False is the known-bad switch
                (`KnownBad.unsynced_oracle_switch`): `new` serves at once, at
                whatever state it had, while calls still in flight on the old
                oracle take effect there, unseen by the new one.

        Raises:
            InvalidUsage: `new` is of another timeline, or cannot be
                fast-forwarded (not `Advancing`).
            Whatever the old oracle's reads or `new.advance` raise: the switch
            did not happen, and the old oracle serves on.
        """
        if new.timeline != self._timeline:
            raise InvalidUsage(f"cannot switch {self!r} to an oracle of timeline {new.timeline!r}")
        if fast_forward and not isinstance(new, Advancing):
            raise InvalidUsage(f"{new!r} cannot be fast-forwarded (it has no `advance`)")
        async with self._lock:
            old = self._inner
            if not fast_forward:
                self._swap(new)
                return Handover(self._timeline, _kind(old), _kind(new), None, None, 0)
            gate = self._gate = anyio.Event()
            try:
                drained = self._in_flight
                if drained:
                    self._drained = anyio.Event()
                    await self._drained.wait()
                    self._drained = None
                write_ts = await old.peek_write_ts()
                read_ts = await old.read_ts()
                assert isinstance(new, Advancing)
                await new.advance(read_ts=read_ts, write_ts=write_ts)
                self._swap(new)
            finally:
                self._drained = None
                self._gate = None
                gate.set()
            return Handover(self._timeline, _kind(old), _kind(new), read_ts, write_ts, drained)

    def _swap(self, new: TimestampOracle) -> None:
        self._inner = new
        self._history.append(new)

    # --- the rest of the interface

    def statistics(self) -> OracleStatistics:
        """The counters summed over every oracle served from (percentiles:
        the latest one's that ran the operation), named
        `switching(<implementations in order>)` once switched."""
        stats = [o.statistics() for o in self._history]
        if len(stats) == 1:
            return stats[0]
        ops: dict[str, OpStatistics] = {}
        for s in stats:
            for name, op in s.ops.items():
                ops[name] = _plus(ops[name], op) if name in ops else op
        return OracleStatistics(
            f"switching({','.join(s.implementation for s in stats)})", self._timeline, ops,
            batched_op_count=sum(s.batched_op_count for s in stats),
            batches_count=sum(s.batches_count for s in stats),
        )

    async def close(self) -> None:
        self._closed = True


def _plus(a: OpStatistics, b: OpStatistics) -> OpStatistics:
    return replace(
        b,
        start_count=a.start_count + b.start_count,
        succeeded_count=a.succeeded_count + b.succeeded_count,
        failed_count=a.failed_count + b.failed_count,
        retry_count=a.retry_count + b.retry_count,
        retry_determinate_count=a.retry_determinate_count + b.retry_determinate_count,
        retry_indeterminate_count=a.retry_indeterminate_count + b.retry_indeterminate_count,
        max_ms=max(a.max_ms, b.max_ms),
    )


def _kind(o: TimestampOracle) -> str:
    return o.statistics().implementation


async def _write_ts(o: TimestampOracle) -> WriteTimestamp:
    return await o.write_ts()


async def _peek_write_ts(o: TimestampOracle) -> int:
    return await o.peek_write_ts()


async def _read_ts(o: TimestampOracle) -> int:
    return await o.read_ts()
