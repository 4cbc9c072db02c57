"""Recording a run: every client statement and every internal event a coordinator
reports go into a `HistoryRecorder`, so workloads, anomaly scenarios and the
Spark sweep all produce the same trace format (DESIGN.md §7). `statement_op`
says how a coordinator statement appears as a history operation.

A statement's outcome maps onto a history status as DESIGN.md §9 says: ok;
`fail` with its SQLSTATE when it certainly did not take effect; `info` when it
may have (SQLSTATE 08007, or the coordinator went away mid-statement), after
which the client continues as a fresh process (Jepsen's convention).

A SUBSCRIBE (`RecordingSession.subscribe`) is one `subscribe` operation,
invoked when its client enters it and completed when it ends, with what it
received in its `args` (`sim.history.model.Op` says how).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, final

from coordinator.sql import parse
from coordinator.statements import Select, SqlError, SqlState, Subscribe
from sim.history.model import HistoryError, Kind, Status
from sim.history.recorder import encode_args
from sim.runtime.lru import Lru

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import TracebackType

    from coordinator.events import CoordinatorEvent
    from coordinator.session import Result, Session
    from coordinator.statements import Statement
    from coordinator.subscribe import SubscribeBatch, Subscription
    from sim.history.recorder import HistoryRecorder

__all__ = [
    "Prepared",
    "PreparedStatements",
    "RecordedSubscription",
    "RecordingSession",
    "StatementOp",
    "event_sink",
    "prepare",
    "statement_op",
]

#: Failures that may have taken effect, recorded as `info`.
_INDETERMINATE = frozenset({SqlState.INDETERMINATE.value, SqlState.ADMIN_SHUTDOWN.value})


@final
@dataclass(frozen=True, slots=True)
class StatementOp:
    """What `HistoryRecorder.invoke` needs to record a statement."""

    kind: Kind
    obj: str | None
    elements: tuple[int, ...] = ()
    args: Mapping[str, Any] | None = None


def statement_op(stmt: Statement) -> StatementOp | None:
    """How a coordinator statement appears in a history. An INSERT's elements
    are the first column of its rows (the set workload's tables have one
    integer column); a WHERE becomes `args.where` as `[[op, value], …]` over
    that column; `SELECT count(*)` or of some columns is recorded as a `read`
    with those args, which checkers 1 and 2 leave to checker 3. A constant
    query (`SELECT 1`) reads no object and is not recorded (None).

    Raises:
        HistoryError: an INSERT of a non-integer first column (not the set
            workload: record it with explicit `Kind`/`args` instead).
    """
    from coordinator import statements as st

    def where(p: st.Predicate) -> dict[str, Any]:
        return {"where": [[c.op, c.value] for c in p.terms]} if p.terms else {}

    if isinstance(stmt, st.SelectConstant):
        return None  # reads no object: nothing for a checker
    if isinstance(stmt, Subscribe):
        return StatementOp(Kind.SUBSCRIBE, stmt.table, (), _subscribe_options(stmt) or None)
    if isinstance(stmt, st.Insert):
        els = []
        for row in stmt.rows:
            v = row[0] if row else None
            if isinstance(v, bool) or not isinstance(v, int):
                raise HistoryError(f"INSERT INTO {stmt.table}: first column {v!r} is not an integer element")
            els.append(v)
        return StatementOp(Kind.ADD, stmt.table, tuple(els))
    if isinstance(stmt, st.Select):
        args: dict[str, Any] = where(stmt.where)
        if stmt.count:
            args["count"] = True
        if stmt.columns is not None:
            args["columns"] = list(stmt.columns)
        return StatementOp(Kind.READ, stmt.source, (), args or None)
    if isinstance(stmt, st.Update):
        args = where(stmt.where)
        for a in stmt.assignments[:1]:
            if a.add is not None:
                args["add"] = a.add
            else:
                args["set"] = a.value
        return StatementOp(Kind.UPDATE, stmt.table, (), args)
    if isinstance(stmt, st.Delete):
        return StatementOp(Kind.DELETE, stmt.table, (), where(stmt.where) or None)
    if isinstance(stmt, st.CreateTable):
        return StatementOp(Kind.CREATE_TABLE, stmt.name)
    if isinstance(stmt, st.DropTable):
        return StatementOp(Kind.DROP_TABLE, stmt.name)
    if isinstance(stmt, st.CreateIndex):
        return StatementOp(Kind.CREATE_INDEX, stmt.name, (), {"on": stmt.on, "cluster": stmt.cluster})
    if isinstance(stmt, st.DropIndex):
        return StatementOp(Kind.DROP_INDEX, stmt.name)
    if isinstance(stmt, st.CreateMaterializedView):
        return StatementOp(Kind.CREATE_VIEW, stmt.name, (), {"on": stmt.query.source, "cluster": stmt.cluster})
    if isinstance(stmt, st.DropMaterializedView):
        return StatementOp(Kind.DROP_VIEW, stmt.name)
    if isinstance(stmt, st.CreateCluster):
        return StatementOp(Kind.CREATE_CLUSTER, stmt.name, (), {"replicas": stmt.replicas})
    return StatementOp(Kind.DROP_CLUSTER, stmt.name)


@final
class PreparedStatements:
    """Statement texts prepared for recording, each once: parsed, turned into
    its `StatementOp`, its args encoded as the recorder stores them. Shared
    by the sessions of one run (statements are frozen values): a level's
    clients send the same few texts thousands of times (issue 20). A text
    that fails to parse is not kept, and fails again."""

    def __init__(self, capacity: int = 256) -> None:
        self._lru: Lru[str, Prepared] = Lru(capacity)

    def __call__(self, sql: str) -> Prepared:
        return self._lru.get(sql, lambda: prepare(parse(sql)))


@final
@dataclass(frozen=True, slots=True)
class Prepared:
    """A statement with what recording it takes (`op` None: not recorded)."""

    statement: Statement
    op: StatementOp | None
    args_json: str | None


def prepare(stmt: Statement) -> Prepared:
    try:
        op = statement_op(stmt)
    except HistoryError:
        op = None  # not part of the set workload (e.g. a text first column)
    args = None if op is None or op.args is None else encode_args(op.args)
    return Prepared(stmt, op, args)


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
        statements: prepared statement texts, shared by the sessions of one
            run; default: this session's own.
    """

    def __init__(
        self, session: Session, recorder: HistoryRecorder, *, client: str,
        statements: PreparedStatements | None = None,
    ) -> None:
        self.session = session
        self.recorder = recorder
        self.client = client
        self.process = recorder.fresh_process()
        self._prepared = PreparedStatements() if statements is None else statements

    def rebind(self, session: Session) -> None:
        """Continues on another coordinator's session (after a restart), as a
        fresh process."""
        self.session = session
        self.process = self.recorder.fresh_process()

    def prepared(self, statement: Statement | str) -> Prepared:
        """`statement` prepared for recording (texts once per run)."""
        return self._prepared(statement) if isinstance(statement, str) else prepare(statement)

    def subscribe(self, statement: Statement | str) -> RecordedSubscription:
        """A SUBSCRIBE on this session, recorded (`RecordedSubscription`)."""
        return RecordedSubscription(self, statement)

    async def execute(self, statement: Statement | str) -> Result:
        prepared = self._prepared(statement) if isinstance(statement, str) else prepare(statement)
        stmt, op = prepared.statement, prepared.op
        if op is None:
            return await self.session.execute(stmt)
        oid = self.recorder.invoke(
            self.process, op.kind, op.obj, elements=op.elements, args_json=prepared.args_json, client=self.client
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


@final
class RecordedSubscription:
    """A `Subscription` recorded as one `subscribe` operation: invoked when
    entered, completed when its stream ends (`UP TO`: ok; an error: fail
    with its code) or when its client leaves it (ok, whatever the reason,
    cancellation included: a subscription changes nothing, and what it
    received is evidence either way). Used like a `Subscription`."""

    def __init__(self, owner: RecordingSession, statement: Statement | str) -> None:
        prepared = owner.prepared(statement)
        self._owner = owner
        self._op = prepared.op
        self._args_json = prepared.args_json
        stmt = prepared.statement
        self._options = _subscribe_options(stmt) if isinstance(stmt, Subscribe) else {}
        self._sub: Subscription = owner.session.subscribe(stmt)
        self._oid: int | None = None
        self._batches: list[list[Any]] = []

    @property
    def as_of(self) -> int | None:
        return self._sub.as_of

    async def __aenter__(self) -> Self:
        op, owner = self._op, self._owner
        if op is None or op.kind is not Kind.SUBSCRIBE:
            await self._sub.__aenter__()  # refused: not a SUBSCRIBE
            return self
        self._oid = owner.recorder.invoke(
            owner.process, op.kind, op.obj, args_json=self._args_json, client=owner.client
        )
        try:
            await self._sub.__aenter__()
        except SqlError as exc:
            self._end(exc)
            raise
        except BaseException:
            self._end(None)
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._sub.close()
        self._end(None)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SubscribeBatch:
        try:
            batch = await self._sub.__anext__()
        except StopAsyncIteration:
            self._end(None)
            raise
        except SqlError as exc:
            self._end(exc)
            raise
        self._batches.append([batch.upper, [[ts, _first(row), diff] for ts, row, diff in batch.updates]])
        return batch

    def _end(self, error: SqlError | None) -> None:
        """Completes the operation (once): ok, or fail with `error`."""
        oid, self._oid = self._oid, None
        if oid is None:
            return
        args: dict[str, Any] = dict(self._options)
        sub = self._sub
        if sub.as_of is not None:
            args["as_of"] = sub.as_of
            args["batches"] = self._batches
        rec = self._owner.recorder
        if error is None:
            rec.ok(oid, catalog_ts=sub.catalog_ts, args=args)
        else:
            rec.fail(oid, error.code.value, error.message, catalog_ts=sub.catalog_ts, args=args)


def _subscribe_options(stmt: Subscribe) -> dict[str, Any]:
    """A SUBSCRIBE's options as its op's `args` record them (defaults left out)."""
    out: dict[str, Any] = {}
    if not stmt.snapshot:
        out["snapshot"] = False
    if stmt.as_of is not None:
        out["as_of"], out["explicit"] = stmt.as_of, True
    if stmt.up_to is not None:
        out["up_to"] = stmt.up_to
    return out


def _first(row: tuple[Any, ...]) -> int | None:
    """A received row as a history value: its first column, an integer
    (None otherwise: `sim.history.checker.subscribe` cannot judge it)."""
    v = row[0] if row else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


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

