"""Histories: the client-operation table and the internal-event table of a trace.

A history is the evidence the checkers (`sim.history.checker`) judge, so it is recorded
exactly as clients saw it — invoke and complete times, `ok` / `fail` + code /
`info` (indeterminate) — with the system's own timestamps only as annotations.
Operations are stored column-wise (`array` columns, one row per operation) so a
million-operation history fits in memory and checks fast; `Op` is the row view.
The on-disk trace format (Arrow/Parquet) is `sim.history.traces`; producing a
history as a run goes is `sim.history.recorder`. DESIGN.md §7 is the contract.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, final

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

__all__ = [
    "MAX_TIME",
    "NONE",
    "Event",
    "EventKind",
    "History",
    "HistoryBuilder",
    "HistoryError",
    "Kind",
    "Op",
    "Status",
    "multiset_tables",
    "validate",
]

#: The "absent" value of an integer column (a null in Arrow). Timestamps and
#: times are never negative, so the sentinel cannot collide with data.
NONE: Final = -(2**63)

#: The largest time (ns) or timestamp a history may hold. The checkers use
#: 2**62 as "never" (`sim.history.checker.tables.INF`), so a value there or beyond would
#: be read as an operation that never completed; 2**62 ns is 146 years.
MAX_TIME: Final = 2**62 - 1

@final
class HistoryError(InvalidUsage):
    """A history is malformed (bad input, not an anomaly): the message names the
    offending operation so the producer can be fixed."""


class Kind(StrEnum):
    """What a client operation does. A table is a multiset of integer rows:
    `add` inserts rows, `read` returns them (or, with `args.count`, counts
    them: COUNT), `update`/`delete` change the rows matching `args.where`;
    the rest is DDL. `add`/`read` with each value inserted once is the set
    workload the black-box checker reasons about. `subscribe` is a
    SUBSCRIBE: a read that streams (its `args` hold what it received, see
    `Op`); only `sim.history.checker.subscribe` judges it."""

    CREATE_TABLE = "create-table"
    DROP_TABLE = "drop-table"
    CREATE_INDEX = "create-index"
    DROP_INDEX = "drop-index"
    CREATE_VIEW = "create-view"
    DROP_VIEW = "drop-view"
    CREATE_CLUSTER = "create-cluster"
    DROP_CLUSTER = "drop-cluster"
    ADD = "add"
    READ = "read"
    UPDATE = "update"
    DELETE = "delete"
    SUBSCRIBE = "subscribe"


class Status(StrEnum):
    """`info` = indeterminate: the operation may or may not have taken effect,
    at any time after its invoke; its process does nothing afterwards."""

    OK = "ok"
    FAIL = "fail"
    INFO = "info"


class EventKind(StrEnum):
    """Internal events: what the oracle, group commit, catalog, controllers and
    nemesis did, so explanations and checker 4 can refer to them."""

    ORACLE_WRITE_TS = "oracle.write_ts"
    ORACLE_READ_TS = "oracle.read_ts"
    ORACLE_PEEK_WRITE_TS = "oracle.peek_write_ts"
    ORACLE_APPLY_WRITE = "oracle.apply_write"
    CONFIRM_LEADERSHIP = "confirm-leadership"
    GROUP_COMMIT = "group-commit"
    TABLE_APPEND = "table-append"
    PEEK_BATCH = "peek-batch"
    CATALOG_APPEND = "catalog-append"
    CONTROLLER_COMMAND = "controller-command"
    FAULT = "fault"


KINDS: Final[tuple[Kind, ...]] = tuple(Kind)
STATUSES: Final[tuple[Status, ...]] = tuple(Status)
KIND_CODE: Final[dict[Kind, int]] = {k: i for i, k in enumerate(KINDS)}
ADD: Final = KIND_CODE[Kind.ADD]
READ: Final = KIND_CODE[Kind.READ]
UPDATE: Final = KIND_CODE[Kind.UPDATE]
DELETE: Final = KIND_CODE[Kind.DELETE]
CREATE_TABLE: Final = KIND_CODE[Kind.CREATE_TABLE]
DROP_TABLE: Final = KIND_CODE[Kind.DROP_TABLE]
SUBSCRIBE: Final = KIND_CODE[Kind.SUBSCRIBE]
OK: Final = 0
FAIL: Final = 1
INFO: Final = 2
#: The SQLSTATE of "relation does not exist": the error the named anomalies of
#: seed 001 are about.
UNKNOWN_TABLE: Final = "42P01"
DDL_KINDS: Final = frozenset(
    KIND_CODE[k] for k in KINDS if k not in (Kind.ADD, Kind.READ, Kind.UPDATE, Kind.DELETE, Kind.SUBSCRIBE)
)


def _opt(v: int) -> int | None:
    return None if v == NONE else v


def raw(v: int | None) -> int:
    """An optional integer as an integer column stores it (`NONE` for None)."""
    return NONE if v is None else v


@final
@dataclass(frozen=True, slots=True)
class Op:
    """One client operation (invoke and completion merged), the row view of
    `History`. `complete_ns` is None for an `info` that never completed.

    `elements` are the values an `add` inserts; `result` the set a `read`
    returned (None unless an ok read); `count` the rows an update/delete
    touched; `args` the statement's other arguments (JSON-able: `where`,
    `set`, `add`, `on`, …).

    A `subscribe` records its stream in `args` when it ends: `as_of` (absent
    if it never started), `batches` as received, each `[upper, [[ts, value,
    diff], …]]` (the first is the snapshot; a batch's lower bound is the
    previous batch's upper, the first's is `as_of`; `value` is the row's
    first column), and the statement's options `snapshot: false`, `as_of`
    given by the client (`explicit: true`) and `up_to`. Its status says how
    the stream ended: `ok` when the client closed it or `UP TO` was reached,
    `fail` with the SQLSTATE that ended it (what it received before still
    counts). Its `catalog_ts` is the catalog it planned on; `read_ts` is
    left empty, as a subscription reads at many times."""

    op_id: int
    process: int
    kind: Kind
    obj: str | None
    invoke_ns: int
    complete_ns: int | None
    status: Status
    elements: tuple[int, ...] = ()
    result: tuple[int, ...] | None = None
    count: int | None = None
    args: Mapping[str, Any] | None = None
    error_code: str | None = None
    error: str | None = None
    read_ts: int | None = None
    write_ts: int | None = None
    catalog_ts: int | None = None
    client: str | None = None


@final
class History:
    """Operations column-wise, indexed 0..n-1 in op-id order.

    Integer columns use `NONE` for null; `elements`/`result` are flattened with
    offsets, as Arrow list arrays are, so a million operations cost tens of MB."""

    __slots__ = (
        "args",
        "catalog_ts",
        "client",
        "complete",
        "count",
        "el",
        "el_off",
        "error",
        "error_code",
        "invoke",
        "kind",
        "n",
        "names",
        "obj",
        "op_id",
        "process",
        "read_ts",
        "res",
        "res_off",
        "status",
        "write_ts",
    )

    def __init__(self) -> None:
        self.n = 0
        self.op_id = array("q")
        self.process = array("q")
        self.kind = array("b")
        self.obj = array("q")  # index into names, -1 = none
        self.names: list[str] = []
        self.invoke = array("q")
        self.complete = array("q")
        self.status = array("b")
        self.el_off = array("q", [0])
        self.el = array("q")
        self.res_off = array("q", [0])
        self.res = array("q")
        self.count = array("q")
        self.read_ts = array("q")
        self.write_ts = array("q")
        self.catalog_ts = array("q")
        self.error_code: list[str | None] = []
        self.error: list[str | None] = []
        self.args: list[str | None] = []  # JSON text
        self.client: list[str | None] = []

    def __len__(self) -> int:
        return self.n

    def elements(self, i: int) -> array[int]:
        return self.el[self.el_off[i] : self.el_off[i + 1]]

    def result(self, i: int) -> array[int] | None:
        if self.kind[i] != READ or self.status[i] != OK:
            return None
        return self.res[self.res_off[i] : self.res_off[i + 1]]

    def name(self, i: int) -> str | None:
        o = self.obj[i]
        return None if o < 0 else self.names[o]

    def op(self, i: int) -> Op:
        res = self.result(i)
        a = self.args[i]
        return Op(
            op_id=self.op_id[i],
            process=self.process[i],
            kind=KINDS[self.kind[i]],
            obj=self.name(i),
            invoke_ns=self.invoke[i],
            complete_ns=_opt(self.complete[i]),
            status=STATUSES[self.status[i]],
            elements=tuple(self.elements(i)),
            result=None if res is None else tuple(res),
            count=_opt(self.count[i]),
            args=None if a is None else json.loads(a),
            error_code=self.error_code[i],
            error=self.error[i],
            read_ts=_opt(self.read_ts[i]),
            write_ts=_opt(self.write_ts[i]),
            catalog_ts=_opt(self.catalog_ts[i]),
            client=self.client[i],
        )

    def ops(self) -> Iterator[Op]:
        return (self.op(i) for i in range(self.n))

    def index_of(self) -> dict[int, int]:
        """op id -> row."""
        return {oid: i for i, oid in enumerate(self.op_id)}

    @staticmethod
    def from_ops(ops: Iterable[Op]) -> History:
        b = HistoryBuilder()
        for op in ops:
            b.append(op)
        return b.build()


@final
class HistoryBuilder:
    """Appends rows to a `History`; `build()` sorts by op id if needed."""

    def __init__(self) -> None:
        self._h = History()
        self._name_ix: dict[str, int] = {}

    def _name(self, name: str | None) -> int:
        if name is None:
            return -1
        ix = self._name_ix.get(name)
        if ix is None:
            ix = self._name_ix[name] = len(self._h.names)
            self._h.names.append(name)
        return ix

    def add_row(
        self,
        op_id: int,
        process: int,
        kind: int,
        obj: str | None,
        invoke: int,
        complete: int,
        status: int,
        elements: Sequence[int] = (),
        result: Sequence[int] | None = None,
        count: int = NONE,
        args: str | None = None,
        error_code: str | None = None,
        error: str | None = None,
        read_ts: int = NONE,
        write_ts: int = NONE,
        catalog_ts: int = NONE,
        client: str | None = None,
    ) -> None:
        """The fast path (codes and raw integers); `append` is the typed one."""
        h = self._h
        h.op_id.append(op_id)
        h.process.append(process)
        h.kind.append(kind)
        h.obj.append(self._name(obj))
        h.invoke.append(invoke)
        h.complete.append(complete)
        h.status.append(status)
        h.el.extend(elements)
        h.el_off.append(len(h.el))
        if result is not None:
            h.res.extend(result)
        h.res_off.append(len(h.res))
        h.count.append(count)
        h.args.append(args)
        h.error_code.append(error_code)
        h.error.append(error)
        h.read_ts.append(read_ts)
        h.write_ts.append(write_ts)
        h.catalog_ts.append(catalog_ts)
        h.client.append(client)
        h.n += 1

    def append(self, op: Op) -> None:
        self.add_row(
            op.op_id,
            op.process,
            KIND_CODE[Kind(op.kind)],
            op.obj,
            op.invoke_ns,
            raw(op.complete_ns),
            STATUSES.index(Status(op.status)),
            op.elements,
            op.result,
            raw(op.count),
            None if op.args is None else json.dumps(op.args, sort_keys=True),
            op.error_code,
            op.error,
            raw(op.read_ts),
            raw(op.write_ts),
            raw(op.catalog_ts),
            op.client,
        )

    def build(self) -> History:
        h = self._h
        if any(h.op_id[i] >= h.op_id[i + 1] for i in range(h.n - 1)):
            order = sorted(range(h.n), key=h.op_id.__getitem__)
            b = HistoryBuilder()
            for i in order:
                b.add_row(
                    h.op_id[i], h.process[i], h.kind[i], h.name(i), h.invoke[i],
                    h.complete[i], h.status[i], h.elements(i),
                    h.res[h.res_off[i] : h.res_off[i + 1]] if h.kind[i] == READ and h.status[i] == OK else None,
                    h.count[i], h.args[i], h.error_code[i], h.error[i],
                    h.read_ts[i], h.write_ts[i], h.catalog_ts[i], h.client[i],
                )
            return b._h
        return h


# --- validation ---------------------------------------------------------------------------


def validate(h: History) -> None:
    """Checks that `h` is a well-formed history, raising `HistoryError` naming the
    first offending operation: ids unique; times, timestamps and counts within
    0..`MAX_TIME`; ok/fail completions not before their invoke; a process never overlaps its own operations nor acts after an `info`;
    `add`s carry elements. A table is a multiset of rows: a value may be
    inserted more than once and a read may return it more than once
    (`multiset_tables` finds the tables where that happens)."""
    ids = h.op_id
    if len(set(ids)) != h.n:
        seen: set[int] = set()
        for oid in ids:
            if oid in seen:
                raise HistoryError(f"op {oid}: duplicate op id")
            seen.add(oid)
    no_obj_ok = (KIND_CODE[Kind.CREATE_CLUSTER], KIND_CODE[Kind.DROP_CLUSTER])
    inv_col, end_col, status, kind, obj = h.invoke, h.complete, h.status, h.kind, h.obj
    el_off, process = h.el_off, h.process
    last: dict[int, int] = {}  # process -> its latest row
    # Rows are in op-id order; a stable sort by invoke keeps that order for ties.
    for i in sorted(range(h.n), key=inv_col.__getitem__):
        st, c, inv = status[i], end_col[i], inv_col[i]
        if inv < 0:
            raise HistoryError(f"op {ids[i]}: negative invoke time {inv}")
        if max(inv, c) > MAX_TIME:
            raise HistoryError(
                f"op {ids[i]}: time {max(inv, c)} ns is beyond the largest a history holds ({MAX_TIME})"
            )
        if c == NONE:
            if st != INFO:
                raise HistoryError(f"op {ids[i]}: {STATUSES[st]} without a completion time")
        elif c < inv:
            raise HistoryError(f"op {ids[i]}: completes at {c} ns before its invoke at {inv} ns")
        k = kind[i]
        if obj[i] < 0 and k not in no_obj_ok:
            raise HistoryError(f"op {ids[i]}: {KINDS[k]} names no object")
        if k == ADD and el_off[i] == el_off[i + 1]:
            raise HistoryError(f"op {ids[i]}: add without elements")
        p = process[i]
        pi = last.get(p)
        if pi is not None:
            if status[pi] == INFO:
                raise HistoryError(
                    f"op {ids[i]}: process {p} acts after its op {ids[pi]} ended `info` "
                    "(an indeterminate op's process must not be reused)"
                )
            if inv < end_col[pi]:
                raise HistoryError(
                    f"op {ids[i]}: process {p} invokes it at {inv} ns while its op "
                    f"{ids[pi]} is still running (until {end_col[pi]} ns)"
                )
        last[p] = i
    for name, col in (
        ("read_ts", h.read_ts), ("write_ts", h.write_ts), ("catalog_ts", h.catalog_ts), ("count", h.count)
    ):
        # C-speed scans first (a million-row history); the row only on failure.
        if min(filter(NONE.__ne__, col), default=0) < 0 or max(col, default=0) > MAX_TIME:
            i = next(i for i, v in enumerate(col) if v != NONE and not 0 <= v <= MAX_TIME)
            raise HistoryError(f"op {ids[i]}: {name} {col[i]} is outside 0..{MAX_TIME}")


def multiset_tables(h: History) -> frozenset[int]:
    """Object indices (into `h.names`) of the tables where the set workload's
    premise — each value inserted at most once, so a read reveals which write
    it saw — does not hold: some value may have been inserted twice (by two
    INSERTs that did not fail, or twice by one), or an ok read returned a
    value more than once. Checkers that take a value to name its one write
    (named, blackbox) cannot judge these tables' reads; checker `table`
    (`sim.history.checker.multiset`) models them as multisets."""
    out: set[int] = set()
    seen: dict[int, set[int]] = {}
    kind, status, obj = h.kind, h.status, h.obj
    el, eo, res, ro = h.el, h.el_off, h.res, h.res_off
    for i, k in enumerate(kind):
        o = obj[i]
        if o < 0 or o in out:
            continue
        if k == ADD and status[i] != FAIL:
            vs = seen.get(o)
            if vs is None:
                vs = seen[o] = set()
            els = el[eo[i] : eo[i + 1]]
            before = len(vs)
            vs.update(els)
            if len(vs) - before != len(els):
                out.add(o)
        elif k == READ and status[i] == OK:
            r = res[ro[i] : ro[i + 1]]
            if len(set(r)) != len(r):
                out.add(o)
    return frozenset(out)


# --- internal events -----------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Event:
    """One internal event. `ts` is the timestamp returned (write_ts, read_ts,
    peek) or passed (apply_write, catalog append's new upper, AdvanceCatalogFrontier);
    `ops` the client operations it served (a group commit's inserts, a peek batch)."""

    seq: int
    kind: str
    component: str
    start_ns: int
    end_ns: int | None = None
    status: Status = Status.OK
    timeline: str | None = None
    ts: int | None = None
    batch_size: int | None = None
    actor: str | None = None
    ops: tuple[int, ...] = ()
    detail: str | None = None
