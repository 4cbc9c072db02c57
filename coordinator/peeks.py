"""Peek timestamps and answers, for both architectures.

Timestamp selection (Materialize's rule for strict-serializable reads, from its
timestamp-selection and linearize-reads code): a peek reads at the *later* of
the oracle's `read_ts` and its collection's since, with a read hold taken at
that time in the same step — no `await` between reading the since and holding
it, so compaction cannot overtake the choice — and released once answered.
The since comes from whoever owns the collection's compaction: the storage
controller for a table (read through persist), the compute controller for an
index or view. The since can be above `read_ts`: a group commit advances
uppers (and so sinces, `upper - window`) before its `apply_write` moves
`read_ts`, and a slow oracle lags by more than the window. The answer is then
*linearized*: held back until the oracle's `read_ts` reaches the chosen time,
so no later read can be given an earlier timestamp (`linearize`).

A replica that hydrated after a crash starts at its shard's since, which may
be above the controller's: it answers "below its since" (`below_since`), and
the peek is chosen again at that since (`MAX_PEEK_ATTEMPTS` at most).

Answers: a replica's answer becomes rows with the plan's columns; a controller
error keeps its SQLSTATE (`42P01` for a collection dropped under an in-flight
peek, as Materialize does); the timestamps the peek used travel with the result
so histories can record them.

Known-bad variants (issue 21's matrix): `choose_timestamp(hold=False)` chooses
the same timestamp but holds nothing (`peeks_skip_read_holds`), and
`shared_read_ts(join=True)` hands a caller the answer of a `read_ts` already in
flight — the rule `BatchingOracle` keeps, broken above the oracle, where its
calls are observed (`coordinator_joins_read_ts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeAlias, final

import anyio

from controllers.commands import PeekError, PeekResponse, PeekRows
from coordinator.session import Result
from coordinator.statements import SelectConstant, SqlError, SqlState
from sim.runtime.errors import ExternalError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from controllers.compute import ComputeController
    from controllers.frontier import ReadHold
    from controllers.storage import StorageController
    from coordinator.planner import PeekPlan
    from oracle.api import TimestampOracle
    from sim.runtime.core import Runtime

__all__ = [
    "MAX_PEEK_ATTEMPTS",
    "below_since",
    "choose_timestamp",
    "constant_result",
    "linearize",
    "peek_result",
    "shared_read_ts",
]

#: Peeks of one statement at ever later times before giving up: each retry
#: follows a rehydrated replica's since (`below_since`).
MAX_PEEK_ATTEMPTS: Final = 10

#: How long an answer waits for the oracle to reach its timestamp. A group
#: commit (or the periodic one, every second) gets it there; longer is a bug.
_LINEARIZE_S: Final = 10.0
_POLL_S: Final = 0.001


def choose_timestamp(
    storage: StorageController, compute: ComputeController, plan: PeekPlan, read_ts: int, *,
    at_least: int = 0, hold: bool = True,
) -> tuple[int, ReadHold | None]:
    """The peek's timestamp — the latest of `read_ts`, `at_least` and the
    collection's since — and a read hold at it; or `(that, None)` for a
    collection neither controller knows yet (the peek then answers 42P01 or
    waits for the catalog frontier in the compute controller). `hold=False`
    is the known-bad `peeks_skip_read_holds`: the same time, no hold."""
    ts = max(read_ts, at_least)
    floor = storage.read_floor(plan.collection_id)
    if floor is not None:
        ts = max(ts, floor)
        return ts, storage.read_hold(plan.collection_id, ts) if hold else None
    floor = compute.read_floor(plan.collection_id)
    if floor is not None:
        ts = max(ts, floor)
        return ts, compute.read_hold(plan.collection_id, ts) if hold else None
    return ts, None


#: How a coordinator asks an oracle for its read timestamp.
ReadTs: TypeAlias = "Callable[[TimestampOracle], Awaitable[int]]"


def shared_read_ts(join: bool) -> ReadTs:
    """`oracle.read_ts()` as is, or (`join`, known-bad) through a `_Joiner`."""
    return _Joiner() if join else _own_read_ts


def _own_read_ts(oracle: TimestampOracle) -> Awaitable[int]:
    return oracle.read_ts()


@final
@dataclass(eq=False)
class _Call:
    done: anyio.Event = field(default_factory=anyio.Event)
    ts: int | None = None
    error: Exception | None = None


@final
class _Joiner:
    """Known-bad: a caller that finds a `read_ts` of the same oracle in flight
    waits for it and takes its answer — which may predate a write the caller
    saw acknowledged before it asked (a stale read)."""

    def __init__(self) -> None:
        self._inflight: dict[int, _Call] = {}

    async def __call__(self, oracle: TimestampOracle) -> int:
        call = self._inflight.get(id(oracle))
        if call is not None:
            await call.done.wait()
            if call.ts is not None:
                return call.ts
            if call.error is not None:
                raise call.error
            # The owner was cancelled: ask ourselves.
        call = self._inflight[id(oracle)] = _Call()
        try:
            call.ts = await oracle.read_ts()
            return call.ts
        except Exception as exc:
            call.error = exc
            raise
        finally:
            del self._inflight[id(oracle)]
            call.done.set()


async def linearize(oracle: TimestampOracle, rt: Runtime, chosen: int, read_ts: int) -> None:
    """Returns once the oracle's `read_ts` is at least `chosen` (at once when
    the peek read at the oracle's own `read_ts`); polled, as Materialize's
    pending linearized reads are. A fenced oracle's error propagates. A peek
    held back is a `peek.linearize` event once it is released (with the
    Runtime's event log on): its timestamp, the read_ts it started from, the
    polls and the time it waited."""
    if chosen <= read_ts:
        return
    waited = 0.0
    polls = 0
    while True:
        try:
            ts = await oracle.read_ts()
        except ExternalError as exc:  # nothing was answered yet: a plain retry
            raise SqlError(SqlState.SERIALIZATION_FAILURE, f"read_ts: {exc}") from exc
        polls += 1
        if ts >= chosen:
            if rt.events.on:
                rt.events.emit("peek.linearize", chosen=chosen, read_ts=read_ts, polls=polls,
                               waited_ms=round(waited * 1e6) / 1000)
            return
        if waited >= _LINEARIZE_S:
            raise SqlError(
                SqlState.SERIALIZATION_FAILURE,
                f"read_ts {ts} did not reach the peek's timestamp {chosen} in {_LINEARIZE_S:.0f} s",
            )
        await rt.sleep(_POLL_S)
        waited += _POLL_S


def constant_result(stmt: SelectConstant) -> Result:
    """The fast path's answer to a constant query (`SELECT 1`): one row and no
    timestamps — it reads no collection, so it is linearizable at any moment
    and needs neither the oracle nor a replica."""
    return Result(rows=(stmt.values,), columns=stmt.names)


def below_since(response: PeekResponse) -> int | None:
    """The since a replica reported if it found the peek's `as_of` below it
    (a replica rehydrated above the controller's since); else None."""
    r = response.result
    return r.since if isinstance(r, PeekError) and r.since is not None else None


def peek_result(
    plan: PeekPlan, response: PeekResponse, *, read_ts: int | None, catalog_ts: int | None
) -> Result:
    r = response.result
    if isinstance(r, PeekRows):
        return Result(rows=r.rows, columns=plan.columns, read_ts=read_ts, catalog_ts=catalog_ts)
    if isinstance(r, PeekError):
        try:
            code = SqlState(r.code)
        except ValueError:
            code = SqlState.INTERNAL
        error = SqlError(code, r.message)
    else:
        error = SqlError(SqlState.INTERNAL, "peek canceled")
    return Result.failed(error, read_ts=read_ts, catalog_ts=catalog_ts)
