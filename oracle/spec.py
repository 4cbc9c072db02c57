"""The timestamp oracle's guarantees (seed 000) as data, and the one check of them.

`BOUNDS` lists every guarantee of `oracle.api.TimestampOracle` that a history of
timed calls can be judged by: whose result is bounded, by which other call's
timestamp, how, and over which pairs of calls. `check` judges one timeline's
calls against the table. The conformance suite (`oracle.testing.check_history`)
and the trace checker (`sim.history.checker.oracle_events`) both call `check`,
so the oracle is held to one specification wherever it is checked.

How disagreements between the two former checkers were settled, by the contract:

- `peek_write_ts >= an earlier read_ts` (the conformance checker had it, the
  trace checker did not): kept. The contract's state invariant is
  `read_ts <= write_ts`, and neither decreases, so a peek after a read that
  returned r sees a `write_ts >= r`; a lower peek means `write_ts` fell below
  `read_ts`, and the next `write_ts()` could hand out a readable timestamp.
- `read_ts` at most what was applied, or the starting point (only the
  conformance checker had it): kept, it is the contract's "write_ts() alone
  never advances read_ts". It needs the timeline's starting point, which a
  trace does not record (a restarted in-memory oracle resumes at its persisted
  upper, above everything applied), and a failed call's argument, which a trace
  does not keep; so it runs only where the caller knows the starting point, and
  stops at the first call that may have applied an unknown timestamp.
- Overlapping `write_ts` calls returning the same timestamp (neither had it as
  a bound; the conformance suite checked duplicates separately): added. Each
  call takes effect at one instant, so even overlapping allocations are ordered
  and strictly increase — the real-time bounds alone never see this.

Not in the table, because results and call times cannot show them: the wall
clock tracking of `write_ts` (the conformance suite checks it with a manual
clock) and the exact effects of `apply_write` (checked by scenario). The
caller-side rule that `apply_write(ts)` follows the durable append at `ts` is
about the coordinator, not the oracle, and stays in the trace checker.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Generic, Protocol, TypeVar, final

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "BOUNDS",
    "Bound",
    "Compare",
    "Operation",
    "Order",
    "Timed",
    "Violation",
    "check",
]


class Operation(StrEnum):
    """The four oracle operations, named as the `TimestampOracle` methods."""

    WRITE_TS = "write_ts"
    READ_TS = "read_ts"
    PEEK_WRITE_TS = "peek_write_ts"
    APPLY_WRITE = "apply_write"


class Order(StrEnum):
    """Which pairs of calls (cause A, bounded call B) a bound relates."""

    #: A succeeded and returned strictly before B was invoked (a tie in time is
    #: concurrency: the checks never assert what the clock cannot order).
    REAL_TIME = "real-time"
    #: A was invoked no later than B returned, whatever A's outcome: A may have
    #: taken effect before B did.
    MAY_PRECEDE = "may-precede"
    #: Both succeeded and neither returned before the other was invoked.
    CONCURRENT = "concurrent"


class Compare(StrEnum):
    """How B's timestamp must compare with the timestamps of its causes."""

    GREATER = ">"  # than every cause
    AT_LEAST = ">="  # every cause
    DIFFERENT = "!="  # from every cause
    AT_MOST_MAX = "<="  # the largest cause, or the timeline's starting point


_ORDER_OF: Final = {
    Compare.GREATER: Order.REAL_TIME,
    Compare.AT_LEAST: Order.REAL_TIME,
    Compare.DIFFERENT: Order.CONCURRENT,
    Compare.AT_MOST_MAX: Order.MAY_PRECEDE,
}

#: The kinds `oracle.testing` reports violations as (the trace checker reports
#: every one as DESIGN.md §7's `timestamp-regression`).
_REGRESSION: Final = "timestamp-regression"
_STALE: Final = "stale-read-ts"
_BEYOND: Final = "read-beyond-applied"


@final
@dataclass(frozen=True, slots=True)
class Bound:
    """One guarantee: the result of every `op` call compares as `compare` with
    the timestamp of every `by` call related to it by `order` (for
    `apply_write`, its argument)."""

    op: Operation
    compare: Compare
    by: Operation
    order: Order
    kind: str
    reason: str

    def __post_init__(self) -> None:
        # `check` has one sweep per comparison, each over its one order.
        if _ORDER_OF[self.compare] is not self.order:
            raise InvalidUsage(f"{self.compare} is judged over {_ORDER_OF[self.compare]} order")

    @property
    def name(self) -> str:
        """E.g. `write_ts > read_ts`, `read_ts <= max apply_write`."""
        by = f"max {self.by}" if self.compare is Compare.AT_MOST_MAX else str(self.by)
        return f"{self.op} {self.compare} {by}"


_W, _R, _P, _A = (
    Operation.WRITE_TS,
    Operation.READ_TS,
    Operation.PEEK_WRITE_TS,
    Operation.APPLY_WRITE,
)
_RT, _MAY, _CONC = Order.REAL_TIME, Order.MAY_PRECEDE, Order.CONCURRENT

#: Every guarantee of `TimestampOracle` that `check` judges, in report order.
BOUNDS: Final[tuple[Bound, ...]] = (
    Bound(_W, Compare.GREATER, _W, _RT, _REGRESSION, "write timestamps strictly increase"),
    Bound(_W, Compare.GREATER, _R, _RT, _REGRESSION,
          "read_ts is below every later write_ts, so a read never misses a later write"),
    Bound(_W, Compare.GREATER, _P, _RT, _REGRESSION,
          "peek_write_ts is the latest allocation; the next one is above it"),
    Bound(_W, Compare.GREATER, _A, _RT, _REGRESSION,
          "an applied timestamp is readable, so no later write may land at or below it"),
    Bound(_W, Compare.DIFFERENT, _W, _CONC, _REGRESSION,
          "overlapping allocations still take effect one at a time, so they differ"),
    Bound(_R, Compare.AT_LEAST, _A, _RT, _STALE,
          "a completed write is visible to every later linearized read"),
    Bound(_R, Compare.AT_LEAST, _R, _RT, _STALE, "linearized reads never go back in time"),
    Bound(_R, Compare.AT_MOST_MAX, _A, _MAY, _BEYOND,
          "write_ts alone never advances read_ts: only applied writes become readable"),
    Bound(_P, Compare.AT_LEAST, _W, _RT, _REGRESSION, "write_ts is the latest allocation"),
    Bound(_P, Compare.AT_LEAST, _A, _RT, _REGRESSION, "apply_write raises write_ts to its argument"),
    Bound(_P, Compare.AT_LEAST, _P, _RT, _REGRESSION, "write_ts never decreases"),
    Bound(_P, Compare.AT_LEAST, _R, _RT, _REGRESSION,
          "read_ts <= write_ts always, and neither decreases"),
)


class Timed(Protocol):
    """One call as `check` reads it: `ts` is the result (the argument for
    `apply_write`; None if unknown), times are ns on one clock, `complete_ns`
    None for a call that never returned, `ok` False for one that raised (it may
    or may not have taken effect)."""

    @property
    def op(self) -> str: ...
    @property
    def invoke_ns(self) -> int: ...
    @property
    def complete_ns(self) -> int | None: ...
    @property
    def ts(self) -> int | None: ...
    @property
    def ok(self) -> bool: ...


T = TypeVar("T", bound=Timed)


@final
@dataclass(frozen=True, slots=True)
class Violation(Generic[T]):
    """`op` broke `bound`: its timestamp does not compare as required with
    `limit`, the timestamp of `cause` (or, with no cause, the starting point)."""

    bound: Bound
    op: T
    cause: T | None
    limit: int

    @property
    def kind(self) -> str:
        return self.bound.kind

    @property
    def message(self) -> str:
        b, op, ts = self.bound, self.bound.op, self.op.ts
        if b.compare is Compare.DIFFERENT:
            return f"{op} returned {ts}, as did an overlapping {b.by}"
        if b.compare is Compare.AT_MOST_MAX:
            return f"{op} returned {ts}, above every timestamp applied by then ({self.limit})"
        return f"{op} returned {ts}, must be {b.compare} {self.limit} from an earlier {b.by}"

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}\n  op:    {self.op}\n  cause: {self.cause}"


def check(calls: Sequence[T], *, read_floor: int | None) -> list[Violation[T]]:
    """Every violation of `BOUNDS` among one timeline's `calls`.

    A call bounds others from below only if it succeeded with a known result
    and return time; every call may bound `read_ts` from above, and one with an
    unknown timestamp ends that check (it may have applied anything).

    Args:
        calls: the calls, in any order (ties in time are broken by position
            only to name each duplicate pair once).
        read_floor: `read_ts` at the start of the history (the timeline's
            starting point); None if unknown, which skips the
            `read_ts <= max apply_write` bound.

    Returns:
        One violation per bound and bounded call, naming the strongest cause,
        ordered by the bounded call's invoke and complete time, then table order.

    Raises:
        InvalidUsage: a call names no oracle operation.
    """
    of_op: dict[str, list[T]] = {str(o): [] for o in Operation}
    for c in calls:
        group = of_op.get(c.op)
        if group is None:
            raise InvalidUsage(f"unknown oracle operation {c.op!r}")
        group.append(c)
    # Sorted once per operation, shared by the sweeps: traces hold millions of calls.
    answered = {op: sorted(filter(_answered, g), key=_invoke) for op, g in of_op.items()}
    done = {op: sorted(filter(_done, g), key=_end) for op, g in of_op.items()}
    ends = {op: [_end(c) for c in g] for op, g in done.items()}
    found: list[tuple[int, Violation[T]]] = []
    for i, bound in enumerate(BOUNDS):
        targets = answered[bound.op]
        if bound.compare is Compare.DIFFERENT:
            found += ((i, v) for v in _distinct(bound, targets, answered[bound.by]))
        elif bound.compare is Compare.AT_MOST_MAX:
            if read_floor is not None:
                maybe = sorted(of_op[bound.by], key=_invoke)
                found += ((i, v) for v in _ceiling(bound, targets, maybe, read_floor))
        else:
            found += ((i, v) for v in _lower(bound, targets, done[bound.by], ends[bound.by]))
    found.sort(key=lambda iv: (iv[1].op.invoke_ns, _end(iv[1].op), iv[0]))
    return [v for _, v in found]


# --- one sweep per kind of comparison --------------------------------------------------

_NEVER: Final = 2**63  # the return time of a call that never returned


def _invoke(c: Timed) -> int:
    return c.invoke_ns


def _end(c: Timed) -> int:
    return _NEVER if c.complete_ns is None else c.complete_ns


def _answered(c: Timed) -> bool:
    """Succeeded with a known timestamp (so `c.ts or 0` below is `c.ts`)."""
    return c.ok and c.ts is not None


def _done(c: Timed) -> bool:
    """Answered, and returned: it can bound later calls from below."""
    return _answered(c) and c.complete_ns is not None


def _lower(
    bound: Bound, targets: list[T], done: list[T], ends: list[int]
) -> Iterator[Violation[T]]:
    """`>` / `>=` every cause that returned before the call was invoked: a sweep
    over targets by invoke time and causes by return time (`ends`), keeping the
    largest cause so far."""
    strict = bound.compare is Compare.GREATER
    best: T | None = None
    best_ts = 0
    i, n = 0, len(done)
    for b in targets:
        while i < n and ends[i] < b.invoke_ns:
            a_ts = done[i].ts or 0
            if best is None or a_ts > best_ts:
                best, best_ts = done[i], a_ts
            i += 1
        ts = b.ts or 0
        if best is not None and (ts <= best_ts if strict else ts < best_ts):
            yield Violation(bound, b, best, best_ts)


def _distinct(bound: Bound, targets: list[T], causes: list[T]) -> Iterator[Violation[T]]:
    """`!=` every overlapping cause: only equal timestamps can clash, so group by
    timestamp. Both lists are by invoke time, and the earliest overlapping cause
    is named; when they are one list, each pair is named once, by the call that
    comes second."""
    same = targets is causes
    by_ts: dict[int, list[tuple[int, T]]] = {}
    for pos, a in enumerate(causes):
        by_ts.setdefault(a.ts or 0, []).append((pos, a))
    for pos, b in enumerate(targets):
        for apos, a in by_ts.get(b.ts or 0, ()):
            if same and apos >= pos:
                break
            if not (_end(a) < b.invoke_ns or _end(b) < a.invoke_ns):
                yield Violation(bound, b, a, b.ts or 0)
                break


def _ceiling(bound: Bound, targets: list[T], maybe: list[T], floor: int) -> Iterator[Violation[T]]:
    """`<=` the largest cause invoked by the time the call returned, or `floor`:
    a sweep over targets by return time and causes (whatever their outcome) by
    invoke time."""
    top: T | None = None
    top_ts = floor
    i = 0
    for b in sorted(targets, key=_end):
        while i < len(maybe) and maybe[i].invoke_ns <= _end(b):
            a = maybe[i]
            if a.ts is None:
                return  # it may have applied any timestamp: no ceiling from here on
            if a.ts > top_ts:
                top, top_ts = a, a.ts
            i += 1
        if (b.ts or 0) > top_ts:
            yield Violation(bound, b, top, top_ts)
