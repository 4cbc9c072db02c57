"""Peek timestamps and answers, for both architectures.

Timestamp selection: a peek reads at the oracle's `read_ts`, which must not be
below the table's since. It can be: the storage controller compacts to
`upper - window`, and a group commit advances the upper before its
`apply_write` moves `read_ts` — after an idle gap longer than the window, a
`read_ts` taken in between is already compacted away. As Materialize's
timestamp selection does, the peek then waits until the oracle's `read_ts`
reaches the since (the read stays linearized: it never reads above what the
oracle has applied), and it holds its table at its timestamp until answered so
compaction cannot overtake it.

Answers: a replica's answer becomes rows with the plan's columns; a controller
error keeps its SQLSTATE (`42P01` for a collection dropped under an in-flight
peek, as Materialize does); the timestamps the peek used travel with the result
so histories can record them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from controllers.commands import PeekError, PeekResponse, PeekRows
from coordinator.session import Result
from coordinator.statements import SqlError, SqlState

if TYPE_CHECKING:
    from controllers.storage import ReadHold, StorageController
    from coordinator.planner import PeekPlan
    from oracle.api import TimestampOracle
    from sim.runtime import Runtime

__all__ = ["MAX_PEEK_ATTEMPTS", "below_since", "hold_table", "peek_result", "read_ts_at_least"]

#: Peeks of one statement at ever later read_ts before giving up: each retry
#: follows a since that moved between choosing the timestamp and reading.
MAX_PEEK_ATTEMPTS: Final = 10

#: How long a peek waits for the oracle to reach its table's since. A group
#: commit (or the periodic one, every second) gets it there; longer is a bug.
_CATCH_UP_S: Final = 10.0
_POLL_S: Final = 0.001


def hold_table(storage: StorageController, plan: PeekPlan, read_ts: int) -> ReadHold | int | None:
    """A read hold on the peek's table at `read_ts` (release it once answered);
    or, if `read_ts` is below the table's since, that since to wait for; or None
    for a collection storage does not know (an index or view, or a table not
    yet known at this point)."""
    floor = storage.read_floor(plan.collection_id)
    if floor is None:
        return None
    if read_ts < floor:
        return floor
    return storage.read_hold(plan.collection_id, read_ts)


async def read_ts_at_least(oracle: TimestampOracle, rt: Runtime, floor: int) -> int:
    """The oracle's `read_ts` once it reaches `floor` (polled)."""
    waited = 0.0
    while True:
        ts = await oracle.read_ts()
        if ts >= floor:
            return ts
        if waited >= _CATCH_UP_S:
            raise SqlError(
                SqlState.SERIALIZATION_FAILURE,
                f"read_ts {ts} did not reach the table's since {floor} in {_CATCH_UP_S:.0f} s",
            )
        await rt.sleep(_POLL_S)
        waited += _POLL_S


def below_since(response: PeekResponse) -> int | None:
    """The since to catch up to if the replica found the peek's `as_of` below
    it (an index's arrangement, which storage holds do not cover, compacted
    between the timestamp's choice and the read); else None."""
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
