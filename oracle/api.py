"""The timestamp oracle of seed 000: one linearizable source of timestamps per timeline.

The contract lives in the `TimestampOracle` docstrings; its guarantees over
histories are the table in `oracle.spec`, which both the conformance suite every
implementation passes (`oracle.testing`: in memory with a store,
Postgres/CockroachDB, batching) and the trace checker judge by.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self, final

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from oracle.metrics import OracleStatistics

__all__ = [
    "CATALOG_TIMELINE",
    "MAX_TIMESTAMP",
    "REALTIME_TIMELINE",
    "TimestampOracle",
    "WriteTimestamp",
    "check_timeline",
    "check_timestamp",
]

#: The timeline of user tables: its timestamps track the wall clock.
REALTIME_TIMELINE: Final = "realtime"
#: The timeline of the durable catalog (seed 001: a separate oracle, `catalog_ts`).
CATALOG_TIMELINE: Final = "catalog"

#: The largest timestamp `apply_write` accepts: one below the bigint maximum, so
#: the next `write_ts` (one above) still fits the seed's `bigint` columns.
MAX_TIMESTAMP: Final = 2**63 - 2


def check_timeline(timeline: str) -> None:
    """Raises `InvalidUsage` unless `timeline` is a non-empty str of <= 256 chars."""
    if not isinstance(timeline, str) or not timeline or len(timeline) > 256:
        raise InvalidUsage(f"invalid timeline {timeline!r}: must be a non-empty str of <= 256 chars")


def check_timestamp(ts: int, what: str = "timestamp") -> None:
    """Raises `InvalidUsage` unless `ts` is an int in `[0, MAX_TIMESTAMP]` (not a bool)."""
    if not isinstance(ts, int) or isinstance(ts, bool) or not 0 <= ts <= MAX_TIMESTAMP:
        raise InvalidUsage(f"{what} must be an int in [0, {MAX_TIMESTAMP}], got {ts!r}")


@final
@dataclass(frozen=True, slots=True)
class WriteTimestamp:
    """A timestamp allocated for a write, and the upper to advance tables to after it.

    `advance_to` is `ts + 1`: once the write at `ts` is appended, every table of
    the timeline is advanced to `advance_to`, so `ts` is complete everywhere.
    """

    ts: int
    advance_to: int

    def __post_init__(self) -> None:
        check_timestamp(self.ts, "WriteTimestamp.ts")
        if self.advance_to != self.ts + 1:
            raise InvalidUsage(
                f"WriteTimestamp.advance_to must be ts + 1 = {self.ts + 1}, got {self.advance_to}"
            )

    @classmethod
    def at(cls, ts: int) -> WriteTimestamp:
        return cls(ts, ts + 1)


class TimestampOracle(ABC):
    """A linearizable timestamp oracle for one timeline (seed 000).

    Logical state: `read_ts`, the timestamp at which linearized reads happen,
    and `write_ts`, the most recently allocated write timestamp; always
    `read_ts <= write_ts`. Timestamps are int milliseconds (on the real-time
    timeline, since the Unix epoch).

    Guarantees across every handle on the timeline (from any task or process
    sharing the backing store). "Earlier" means "returned before the later call
    was invoked"; a call that raised may or may not have taken effect, so only 3
    counts it. `oracle.spec.BOUNDS` states 1-4 as data, and `oracle.spec.check`
    judges histories by them:

    1. `write_ts()` returns a timestamp strictly greater than every timestamp
       returned by an earlier `write_ts()`, `read_ts()` or `peek_write_ts()`,
       and than every `ts` of an earlier completed `apply_write(ts)`. Calls that
       overlap still take effect one at a time: no two return the same `ts`.
    2. `read_ts()` returns a timestamp >= every `ts` of an earlier completed
       `apply_write(ts)` and >= every earlier `read_ts()` (and, by 1, < the
       result of every later `write_ts()`).
    3. `write_ts()` alone never advances `read_ts`: `read_ts()` returns at most
       the larger of the timeline's starting point (its `read_ts` when the
       oracle was opened) and every `ts` of an `apply_write(ts)` invoked before
       it returned.
    4. `peek_write_ts()` returns a timestamp >= every earlier `write_ts()`,
       `peek_write_ts()` and `read_ts()` result and every `ts` of an earlier
       completed `apply_write(ts)` (and, by 1, < every later `write_ts()`).
    5. Allocations track the wall clock of the `Runtime` (`rt.wall_ms()`):
       `write_ts()` returns `max(write_ts + 1, wall_ms)`, with `write_ts` the
       state at the instant it takes effect and `wall_ms` read during the call.

    Operations may be called concurrently; each takes effect atomically at some
    instant between its invocation and its return. All four are safe to retry
    after an `Indeterminate` failure (a retried allocation at most skips a
    timestamp; applying a write twice is applying it once).

    Errors: misuse (a bad timestamp, a closed oracle) is `InvalidUsage`; a
    failing backing store is `ExternalError` after the implementation's own
    retries, one line naming the operation and timeline; an oracle whose
    process lost leadership may raise `sim.runtime.errors.Fenced`.
    """

    @property
    @abstractmethod
    def timeline(self) -> str:
        """The timeline this oracle hands out timestamps for."""

    @abstractmethod
    async def write_ts(self) -> WriteTimestamp:
        """Allocates a new write timestamp (guarantees 1 and 5).

        Returns `WriteTimestamp(ts, advance_to=ts + 1)`; afterwards
        `peek_write_ts() >= ts`. Does not advance `read_ts`.
        """

    @abstractmethod
    async def peek_write_ts(self) -> int:
        """Returns the current `write_ts` without allocating one (guarantee 4).

        It is >= every earlier `write_ts()`, `peek_write_ts()` and `read_ts()`
        result and every earlier completed `apply_write(ts)`, and < every later
        `write_ts()` result.
        """

    @abstractmethod
    async def read_ts(self) -> int:
        """Returns the timestamp for a linearized read now (guarantees 2 and 3)."""

    @abstractmethod
    async def apply_write(self, ts: int) -> None:
        """Marks the write at `ts` complete: afterwards `read_ts() >= ts` and
        `write_ts() > ts`.

        With `read_ts` and `write_ts` the state before the call:
        `ts <= read_ts` changes nothing; `read_ts < ts <= write_ts` raises
        `read_ts` to `ts`; `ts > write_ts` raises both to `ts`. Idempotent.

        Raises:
            InvalidUsage: `ts` is not an int in `[0, MAX_TIMESTAMP]`.
        """

    @abstractmethod
    def statistics(self) -> OracleStatistics:
        """Counters and latencies per operation (the `ts_oracle_*` metrics)."""

    async def close(self) -> None:  # noqa: B027 - optional hook, most impls hold nothing
        """Releases what the oracle holds; afterwards every call raises `InvalidUsage`."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
