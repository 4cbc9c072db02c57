"""Recording a run: every client statement and every internal event a coordinator
reports go into a `HistoryRecorder`, so workloads, anomaly scenarios and the
Spark sweep all produce the same trace format (DESIGN.md §7).

A statement's outcome maps onto a history status as DESIGN.md §9 says: ok;
`fail` with its SQLSTATE when it certainly did not take effect; `info` when it
may have (SQLSTATE 08007, or the coordinator went away mid-statement), after
which the client continues as a fresh process (Jepsen's convention).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from coordinator.statements import Select, SqlState
from sim.history.model import HistoryError, Kind, Status, statement_op

if TYPE_CHECKING:
    from collections.abc import Callable

    from coordinator.events import CoordinatorEvent
    from coordinator.session import Result, Session
    from coordinator.statements import Statement
    from sim.history.model import HistoryRecorder

__all__ = ["RecordingSession", "event_sink"]

#: Failures that may have taken effect, recorded as `info`.
_INDETERMINATE = frozenset({SqlState.INDETERMINATE.value, SqlState.ADMIN_SHUTDOWN.value})


def event_sink(recorder: HistoryRecorder) -> Callable[[CoordinatorEvent], None]:
    """A coordinator event sink that records into `recorder`'s event table."""

    def sink(e: CoordinatorEvent) -> None:
        recorder.event(
            e.kind,
            e.component,
            start_ns=round(e.start_s * 1e9),
            end_ns=round(e.end_s * 1e9),
            status=Status.OK if e.ok else Status.FAIL,
            timeline=e.timeline,
            ts=e.ts,
            batch_size=e.batch_size,
            actor=e.actor,
            detail=e.detail,
        )

    return sink


@final
class RecordingSession:
    """A `Session` whose statements are recorded as history operations.

    Args:
        client: a label for the history's `client` column (e.g. "c1").
    """

    def __init__(self, session: Session, recorder: HistoryRecorder, *, client: str) -> None:
        self.session = session
        self.recorder = recorder
        self.client = client
        self.process = recorder.fresh_process()

    def rebind(self, session: Session) -> None:
        """Continues on another coordinator's session (after a restart), as a
        fresh process."""
        self.session = session
        self.process = self.recorder.fresh_process()

    async def execute(self, statement: Statement | str) -> Result:
        from coordinator.sql import parse

        stmt = parse(statement) if isinstance(statement, str) else statement
        try:
            op = statement_op(stmt)
        except HistoryError:
            op = None  # not part of the set workload (e.g. a text first column)
        if op is None:
            return await self.session.execute(stmt)
        oid = self.recorder.invoke(
            self.process, op.kind, op.obj, elements=op.elements, args=op.args, client=self.client
        )
        try:
            result = await self.session.execute(stmt)
        except BaseException:
            self.recorder.info(oid, "the client was cancelled mid-statement")
            self.process = self.recorder.fresh_process()
            raise
        rts, wts, cts = result.read_ts, result.write_ts, result.catalog_ts
        if result.error is None:
            elements = _elements(stmt, result) if op.kind is Kind.READ else None
            count = _count(result) if op.kind is Kind.READ else None
            self.recorder.ok(oid, result=elements, count=count, read_ts=rts, write_ts=wts, catalog_ts=cts)
        elif result.error.code.value in _INDETERMINATE:
            message = f"{result.error.code.value}: {result.error.message}"
            self.recorder.info(oid, message, read_ts=rts, write_ts=wts, catalog_ts=cts)
            self.process = self.recorder.fresh_process()
        else:
            self.recorder.fail(
                oid, result.error.code.value, result.error.message, read_ts=rts, write_ts=wts, catalog_ts=cts
            )
        return result


def _elements(stmt: Statement, result: Result) -> list[int]:
    """A read's elements: the first column of every row (the set workload);
    a count(*) or non-integer read records none."""
    if isinstance(stmt, Select) and stmt.count:
        return []
    out: list[int] = []
    for row in result.rows:
        v = row[0] if row else None
        if isinstance(v, int) and not isinstance(v, bool):
            out.append(v)
    return out


def _count(result: Result) -> int | None:
    if len(result.rows) == 1 and len(result.rows[0]) == 1 and result.columns == ("count",):
        v = result.rows[0][0]
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    return None

