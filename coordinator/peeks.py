"""What a peek's controller response means to a client, for both architectures.

A replica's answer becomes rows with the plan's columns; a controller error
keeps its SQLSTATE (`42P01` for a collection dropped under an in-flight peek,
as Materialize does); the timestamps the peek used travel with the result so
histories can record them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controllers.commands import PeekError, PeekResponse, PeekRows
from coordinator.session import Result
from coordinator.statements import SqlError, SqlState

if TYPE_CHECKING:
    from coordinator.planner import PeekPlan

__all__ = ["peek_result"]


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
