"""Histories to and from Jepsen-style EDN, and to Porcupine-style JSON, so
established checkers (Elle, Knossos, Porcupine) can read coordsim's histories
and ours can read theirs. The dialect is documented in docs/histories.md.

EDN is event-per-line: an `:invoke` and its completion (`:ok`, `:fail`,
`:info`) are separate maps paired by process, as in Jepsen. Reading checks the
pairing (every completion matches an invoke of its process; a process does
nothing after `:info`) and reports the offending event's `:index`. A read's
rows come as a set or, when a row repeats (a table is a multiset), a vector;
`:f :count` is SELECT count(*); `:f :txn` (transactions) is refused. It streams
(`read_edn`): memory grows with the operations, not with the text. Jepsen's
`#jepsen.history.Op{...}` records read as events; a trace's internal events
travel as `:coordsim` `:event`s, so an exported trace checks as the trace does.
"""

from __future__ import annotations

import itertools
import json
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from sim.history.edn import CHUNK_CHARS, Keyword, Symbol, Tagged, dumps, iter_forms, kw
from sim.history.model import (
    ADD,
    INFO,
    KIND_CODE,
    KINDS,
    NONE,
    OK,
    READ,
    STATUSES,
    Event,
    History,
    HistoryBuilder,
    HistoryError,
    Kind,
    Status,
    validate,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

__all__ = [
    "DEFAULT_TABLE",
    "ERROR_NAMES",
    "OP_RECORD_TAG",
    "history_from_edn",
    "history_to_edn",
    "history_to_porcupine",
    "iter_edn_lines",
    "read_edn",
    "write_edn",
]

#: SQLSTATE <-> the keyword Jepsen-style histories use for it.
ERROR_NAMES: Final = {
    "42P01": "unknown-table",
    "42P07": "duplicate-table",
    "40001": "serialization-failure",
    "42601": "syntax-error",
    "42703": "unknown-column",
    "57P01": "shutdown",
    "08007": "indeterminate",
    "XX000": "internal",
}
_ERROR_CODES: Final = {v: k for k, v in ERROR_NAMES.items()}
#: The table of a Jepsen history whose ops name none (the plain set workload).
DEFAULT_TABLE: Final = "set"
_K = kw


def _name(v: Any, where: str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, Keyword):
        return v.name
    raise HistoryError(f"{where}: expected a table name, got {dumps(v)}")


def _int(v: Any, where: str) -> int:
    """A value stored in a 64-bit column: `NONE` (-2**63) means "absent" there,
    so the range is one short of int64's at the bottom."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise HistoryError(f"{where}: expected an integer, got {dumps(v)[:60]}")
    if not NONE < v < 2**63:
        raise HistoryError(f"{where}: {v} is outside the 64-bit range a history stores (|n| < 2**63)")
    return v


def _to_json(v: Any) -> Any:
    if isinstance(v, Keyword | Symbol):
        return v.name
    if isinstance(v, Tagged):
        return dumps(v)  # JSON has no tags: kept as its EDN text
    if isinstance(v, dict):
        return {str(_to_json(k)): _to_json(x) for k, x in v.items()}
    if isinstance(v, tuple | list):
        return [_to_json(x) for x in v]
    if isinstance(v, frozenset):
        return sorted(_to_json(x) for x in v)
    return v


def _from_json(v: Any, *, key: bool = False) -> Any:
    if isinstance(v, dict):
        return {Keyword(k): _from_json(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return tuple(_from_json(x) for x in v)
    if isinstance(v, str) and v in ("=", "<>", "<", "<=", ">", ">="):
        return Keyword(v)
    return v


def _split_value(kind: Kind, v: Any, where: str) -> tuple[str | None, tuple[int, ...], Any]:
    """(object, elements, args) of an invoke's `:value`."""
    if kind in (Kind.CREATE_CLUSTER, Kind.DROP_CLUSTER) and v is None:
        return None, (), None
    # Jepsen's single-set workload names no table: `:add 5`, `:read nil`.
    if kind == Kind.ADD and isinstance(v, int) and not isinstance(v, bool):
        return DEFAULT_TABLE, (_int(v, f"{where}: element"),), None
    if kind == Kind.READ and v is None:
        return DEFAULT_TABLE, (), None
    if not isinstance(v, tuple):
        return _name(v, where), (), None
    if not v:
        raise HistoryError(f"{where}: empty :value")
    obj = _name(v[0], where)
    rest = v[1] if len(v) > 1 else None
    if kind == Kind.ADD:
        if isinstance(rest, tuple | frozenset):
            return obj, tuple(_int(x, f"{where}: element") for x in rest), None
        return obj, (_int(rest, f"{where}: element"),), None
    if isinstance(rest, dict):
        return obj, (), _to_json(rest)
    return obj, (), None


def _split_fast(kind: Kind, v: Any) -> tuple[str | None, tuple[int, ...], Any] | None:
    """`_split_value` for the common shapes (`["t" 5]`, `["t" nil]`, `"t"`),
    or None to take the general path (which also words the errors)."""
    if type(v) is tuple and len(v) == 2:
        obj, rest = v
        if type(obj) is str:
            if kind is Kind.ADD:
                if type(rest) is int and NONE < rest < _I64:
                    return obj, (rest,), None
            elif rest is None:
                return obj, (), None
    elif type(v) is str and kind is not Kind.ADD:
        return v, (), None
    return None


def _where(source: str, index: int) -> str:
    return f"{source}: event :index {index}"


def _ts(v: Any, source: str, index: int, key: Keyword) -> int:
    return v if type(v) is int and NONE < v < _I64 else _int(v, f"{_where(source, index)}: {key}")


def _read_result(v: Any, where: str) -> tuple[int, ...]:
    """The sorted elements of an `:ok` read's `:value`."""
    res = v if isinstance(v, frozenset) else v[1] if isinstance(v, tuple) and len(v) > 1 else None
    if not isinstance(res, frozenset | tuple):
        raise HistoryError(f"{where}: an :ok :read needs :value [table #{{elements}}]")
    if not res:
        return ()
    if set(map(type, res)) == _JUST_INT and min(res) > NONE and max(res) < _I64:
        return tuple(sorted(res))  # checked at C speed; the element only on failure
    return tuple(sorted(_int(x, f"{where}: read element") for x in res))


def _count_args(args: Any) -> dict[str, Any]:
    """A `:count`'s args: its `:value`'s map (a WHERE) with `count` set."""
    return {**(args if isinstance(args, dict) else {}), "count": True}


def _count_result(v: Any, where: str) -> int | None:
    """The count of an `:ok :count`'s `:value` (`[table n]`, or `n`)."""
    n = v[1] if isinstance(v, tuple) and len(v) == 2 else v
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int):
        raise HistoryError(f"{where}: an :ok :count needs :value [table n], got {dumps(v)[:60]}")
    return n


def _error(err: Any) -> tuple[str | None, str | None]:
    """(code, message) of a completion's `:error`."""
    if isinstance(err, tuple) and err:
        head = err[0]
        if head == _K_SQLSTATE and len(err) > 1:
            return str(err[1]), str(err[2]) if len(err) > 2 else None
        hn = head.name if isinstance(head, Keyword) else str(head)
        return _ERROR_CODES.get(hn, hn), " ".join(str(x) for x in err[1:]) or None
    if isinstance(err, Keyword):
        return _ERROR_CODES.get(err.name, err.name), None
    return None, str(err)


_I64: Final = 2**63
_JUST_INT: Final = {int}
_K_INDEX, _K_TIME, _K_TYPE, _K_PROCESS, _K_F, _K_VALUE = map(kw, ("index", "time", "type", "process", "f", "value"))
_K_ERROR, _K_COUNT, _K_CLIENT, _K_SQLSTATE = map(kw, ("error", "count", "client", "sqlstate"))
_K_READ_TS, _K_WRITE_TS, _K_CATALOG_TS = map(kw, ("read-ts", "write-ts", "catalog-ts"))
_INVOKE: Final = -1
#: `:type` -> the status of a completion (`_INVOKE` for an invoke).
_TYPE_CODE: Final = {kw("invoke"): _INVOKE, kw("ok"): OK, kw("fail"): 1, kw("info"): INFO}
_KIND_OF: Final = {kw(k.value): k for k in Kind}
#: `:f :txn` (Elle's transactional histories): refused, one statement per op here.
_K_TXN: Final = kw("txn")
#: Jepsen's own history.edn prints each operation as this record.
OP_RECORD_TAG: Final = "jepsen.history.Op"


def history_from_edn(forms: Iterable[Any], *, source: str = "EDN") -> tuple[History, list[Event]]:
    """Pairs Jepsen events into operations; nemesis events become `fault`
    events. `forms` may be a stream (`iter_forms`): only the invokes still
    pending are held, and rows are built as completions arrive. Raises
    `HistoryError` naming the event on malformed input, and on no events at
    all (an empty or truncated file, not an empty history)."""
    b = HistoryBuilder()
    add_row = b.add_row
    # process -> (index, invoke, time, op id, kind)
    open_: dict[int, tuple[int, dict[Any, Any], int, int, Kind]] = {}
    dead: dict[int, int] = {}
    # Op ids follow invoke order, as a live recorder's do; rows are added in
    # that order, so a completed op waits here while an earlier one is open.
    waiting: dict[int, tuple[Any, ...]] = {}
    next_row = 0
    n_ops = 0
    events: list[Event] = []
    pos = -1
    for pos, form in enumerate(forms):
        m = form
        if type(m) is not dict:
            if isinstance(m, Tagged) and m.tag == OP_RECORD_TAG and isinstance(m.value, dict):
                m = m.value
            elif not isinstance(m, dict):
                raise HistoryError(f"{source}: form {pos} is not a map: {dumps(m)[:60]}")
        get = m.get
        index = get(_K_INDEX)
        if index is None:
            index = pos
        elif type(index) is not int or not NONE < index < _I64:
            index = _int(index, f"{source}: form {pos}: :index")
        t = get(_K_TIME)
        if t is None:
            t = index
        elif type(t) is not int or not NONE < t < _I64:
            t = _int(t, f"{_where(source, index)}: :time")
        typ = get(_K_TYPE)
        status = _TYPE_CODE.get(typ) if type(typ) is Keyword else None
        if status is None:
            raise HistoryError(f"{_where(source, index)}: :type must be :invoke, :ok, :fail or :info")
        proc = get(_K_PROCESS)
        if type(proc) is not int:
            if proc is _K_INTERNAL and get(_K_F) is _K_EVENT:
                events.append(_event_from_edn(get(_K_VALUE), t, len(events), _where(source, index)))
                continue
            if isinstance(proc, Keyword):
                events.append(Event(seq=len(events), kind="fault", component=proc.name, start_ns=t,
                                    end_ns=t, detail=json.dumps(_to_json(m), sort_keys=True)))  # fmt: skip
                continue
            if isinstance(proc, bool) or not isinstance(proc, int):
                raise HistoryError(f"{_where(source, index)}: :process must be an integer (or :nemesis)")
        if not NONE < proc < _I64:
            _int(proc, f"{_where(source, index)}: :process")
        f = get(_K_F)
        if type(f) is not Keyword:
            raise HistoryError(f"{_where(source, index)}: :f must be a keyword")
        kind = _KIND_OF.get(f)
        if kind is None:
            if f is _K_COUNT:
                kind = Kind.READ  # SELECT count(*): a read with args.count
            elif f is _K_TXN:
                raise HistoryError(
                    f"{_where(source, index)}: transactional operations (:f :txn) are not supported: "
                    "coordsim checks histories of single statements until multi-statement transactions exist"
                )
            else:
                raise HistoryError(f"{_where(source, index)}: unknown :f :{f.name}")
        if status == _INVOKE:
            if proc in dead:
                raise HistoryError(
                    f"{_where(source, index)}: process {proc} invokes after its op at :index {dead[proc]} "
                    "ended :info (use a fresh process)"
                )
            if proc in open_:
                raise HistoryError(
                    f"{_where(source, index)}: process {proc} invokes while its op at :index "
                    f"{open_[proc][0]} is pending"
                )
            open_[proc] = (index, m, t, n_ops, kind)
            n_ops += 1
            continue
        pending = open_.pop(proc, None)
        if pending is None:
            raise HistoryError(
                f"{_where(source, index)}: {dumps(typ)} for process {proc}, which has no pending invoke"
            )
        _, inv, inv_t, pid, inv_kind = pending
        is_count = f is _K_COUNT
        if inv_kind is not kind or (inv.get(_K_F) is _K_COUNT) is not is_count:
            raise HistoryError(
                f"{_where(source, index)}: completes :{f.name} but process {proc} invoked "
                f"{dumps(inv.get(_K_F))}"
            )
        if t < inv_t:
            raise HistoryError(f"{_where(source, index)}: :time {t} is before its invoke's {inv_t}")
        inv_value = inv.get(_K_VALUE)
        split = _split_fast(kind, inv_value) or _split_value(kind, inv_value, _where(source, index))
        obj, els, args = split
        if status == INFO:
            dead[proc] = index
        result: tuple[int, ...] | None = None
        count = get(_K_COUNT)
        if is_count:
            args = _count_args(args)
            if status == OK:
                result = ()
                if count is None:
                    count = _count_result(get(_K_VALUE), _where(source, index))
        elif status == OK and kind is Kind.READ:
            result = _read_result(get(_K_VALUE), _where(source, index))
        code = msg = None
        if status != OK:
            err = get(_K_ERROR)
            if err is not None:
                code, msg = _error(err)
        read_ts, write_ts, catalog_ts = get(_K_READ_TS), get(_K_WRITE_TS), get(_K_CATALOG_TS)
        read_ts = NONE if read_ts is None else _ts(read_ts, source, index, _K_READ_TS)
        write_ts = NONE if write_ts is None else _ts(write_ts, source, index, _K_WRITE_TS)
        catalog_ts = NONE if catalog_ts is None else _ts(catalog_ts, source, index, _K_CATALOG_TS)
        if count is not None:
            count = _int(count, f"{_where(source, index)}: :count")
        client = inv.get(_K_CLIENT)
        row: tuple[Any, ...] = (pid, proc, KIND_CODE[kind], obj, inv_t, t, status, els, result,
               NONE if count is None else count,
               None if args is None else json.dumps(args, sort_keys=True),
               code, msg, read_ts, write_ts, catalog_ts, None if client is None else str(client))  # fmt: skip
        if pid != next_row:
            waiting[pid] = row
            continue
        add_row(*row)
        next_row += 1
        while waiting:
            later = waiting.pop(next_row, None)
            if later is None:
                break
            add_row(*later)
            next_row += 1
    if pos < 0:
        raise HistoryError(f"{source}: no events (an empty file is not a history)")
    for proc, (inv_index, inv, inv_t, pid, kind) in open_.items():
        obj, els, args = _split_value(kind, inv.get(_K_VALUE), _where(source, inv_index))
        if inv.get(_K_F) is _K_COUNT:
            args = _count_args(args)
        waiting[pid] = (pid, proc, KIND_CODE[kind], obj, inv_t, NONE, INFO, els, None, NONE,
                        None if args is None else json.dumps(args, sort_keys=True),
                        None, None, NONE, NONE, NONE, None)  # fmt: skip
    for pid in sorted(waiting):
        add_row(*waiting[pid])
    events.sort(key=lambda e: e.seq)  # stable: a history without :seq keeps file order
    h = b.build()
    validate(h)
    return h, events


def read_edn(path: Path | str, *, chunk_chars: int = CHUNK_CHARS) -> tuple[History, list[Event]]:
    """The history in the EDN file at `path`, read `chunk_chars` characters
    at a time (memory grows with the operations, not with the text)."""
    p = Path(path)

    def chunks() -> Iterator[str]:
        with p.open(encoding="utf-8") as f:
            while chunk := f.read(chunk_chars):
                yield chunk

    try:
        return history_from_edn(iter_forms(chunks()), source=str(p))
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{p}: unreadable: {exc}") from exc
    except HistoryError as exc:
        if str(exc).startswith(str(p)):
            raise
        raise HistoryError(f"{p}: {exc}") from exc


def _is_count(h: History, i: int) -> bool:
    """Whether op i is a COUNT (a read with `args.count`), written `:f :count`."""
    a = h.args[i]
    return h.kind[i] == READ and a is not None and '"count"' in a and bool(json.loads(a).get("count"))


def _invoke_value(h: History, i: int, *, count: bool = False) -> Any:
    k = h.kind[i]
    name = h.name(i)
    if k == ADD:
        els = list(h.elements(i))
        return (name, els[0] if len(els) == 1 else tuple(els))
    a = h.args[i]
    if count:
        rest = {key: v for key, v in json.loads(a or "{}").items() if key != "count"}
        return (name, _from_json(rest) if rest else None)
    if a is not None:
        return (name, _from_json(json.loads(a)))
    if k == READ:
        return (name, None)
    return name


#: Internal events (`Event`: oracle calls, group commits, faults) travel in
#: EDN as `:info` events of this non-client process, as a nemesis's do in
#: Jepsen, so checkers that read only integer processes skip them.
_K_INTERNAL: Final = kw("coordsim")
_K_EVENT: Final = kw("event")
_EVENT_INTS: Final = ("seq", "end-ns", "ts", "batch-size")
_EVENT_STRS: Final = ("kind", "component", "timeline", "actor", "detail")


def _event_to_edn(e: Event) -> str:
    v: dict[Any, Any] = {_K("seq"): e.seq, _K("kind"): e.kind, _K("component"): e.component}
    for key, x in (("end-ns", e.end_ns), ("ts", e.ts), ("batch-size", e.batch_size), ("timeline", e.timeline),
                   ("actor", e.actor), ("detail", e.detail)):  # fmt: skip
        if x is not None:
            v[_K(key)] = x
    if e.status != Status.OK:
        v[_K("status")] = _K(Status(e.status).value)
    if e.ops:
        v[_K("ops")] = tuple(e.ops)
    return _line({_K("type"): _K("info"), _K("process"): _K_INTERNAL, _K("f"): _K_EVENT, _K("value"): v})


def _event_from_edn(v: Any, t: int, seq: int, where: str) -> Event:
    """The `Event` an internal event's `:value` describes (see `_event_to_edn`)."""
    if not isinstance(v, dict):
        raise HistoryError(f"{where}: a :coordsim :event needs a map :value")
    got: dict[str, Any] = {}
    for key in _EVENT_INTS:
        x = v.get(Keyword(key))
        if x is not None:
            got[key] = _int(x, f"{where}: :{key}")
    for key in _EVENT_STRS:
        x = v.get(Keyword(key))
        if x is not None and not isinstance(x, str):
            raise HistoryError(f"{where}: :{key} must be a string, got {dumps(x)[:40]}")
        got[key] = x
    if got["kind"] is None or got["component"] is None:
        raise HistoryError(f"{where}: a :coordsim :event needs :kind and :component")
    st = v.get(Keyword("status"), Keyword("ok"))
    if not isinstance(st, Keyword) or st.name not in {s.value for s in Status}:
        raise HistoryError(f"{where}: :status must be :ok, :fail or :info")
    ops = v.get(Keyword("ops"), ())
    if not isinstance(ops, tuple):
        raise HistoryError(f"{where}: :ops must be a vector of op ids")
    return Event(
        seq=got.get("seq", seq), kind=got["kind"], component=got["component"], start_ns=t,
        end_ns=got.get("end-ns"), status=Status(st.name), timeline=got["timeline"], ts=got.get("ts"),
        batch_size=got.get("batch-size"), actor=got["actor"],
        ops=tuple(_int(x, f"{where}: :ops") for x in ops), detail=got["detail"],
    )  # fmt: skip


def history_to_edn(h: History, events: Sequence[Event] = ()) -> str:
    """One event map per line, ordered by time: at one instant, invokes come
    before completions, so equal times never read as real-time order — except
    that a process's next invoke comes right after its own completion (a
    process has one operation at a time, and a reader pairs by process).
    `events` (a trace's internal-event table) follow their instant's client
    events, as `:coordsim` `:event`s, so `history_from_edn` gives them back.
    The text of `iter_edn_lines`, joined; `write_edn` writes it in bounded memory."""
    return "".join(iter_edn_lines(h, events))


def write_edn(h: History, f: TextIO, events: Sequence[Event] = (), *, batch_lines: int = 8192) -> None:
    """Writes `history_to_edn(h, events)` to `f`, `batch_lines` lines at a
    time: memory beyond `h` is the event order (`iter_edn_lines`), never the text."""
    lines = iter_edn_lines(h, events)
    while batch := list(itertools.islice(lines, batch_lines)):
        f.write("".join(batch))


def _argsort(*cols: array[int]) -> Sequence[int]:
    """The stable ascending order of rows by `cols` (int64 arrays, compared
    first to last), by Arrow's sort over the arrays' own buffers, returned as
    a view of Arrow's result: 8 bytes a row, where `sorted` over Python keys
    cost ~45 (issue 34's bounded export)."""
    import pyarrow as pa  # only exports sort; `check` of EDN never loads Arrow
    import pyarrow.compute as pc

    n = len(cols[0])
    if n == 0:
        return array("q")
    table = pa.table({f"c{k}": pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(c)])
                      for k, c in enumerate(cols)})  # fmt: skip
    idx = pc.sort_indices(table, sort_keys=[(f"c{k}", "ascending") for k in range(len(cols))])
    return memoryview(idx.buffers()[1]).cast("B")[idx.offset * 8 : (idx.offset + n) * 8].cast("q")


class _Order:
    """The order of `history_to_edn`'s lines without a Python object per line
    (a 1M-operation history's order costs ~35 MB). Each line has a time and
    a code `phase << (bits + 1) | rank << 1 | sub`: phase 0 is an invoke, 1 a
    completion (or, with sub 1, the invoke that follows its own process's
    completion at the same instant), 2 an internal event. When the times'
    span leaves room, time and code are packed into one int64 key per line
    (`(time - t0) << shift | code`); otherwise they are two columns."""

    def __init__(self, bits: int, t0: int, t_max: int) -> None:
        self.bits = bits
        self.shift = bits + 3
        self.t0 = t0
        self.packed = (t_max - t0) < 1 << (62 - self.shift)
        self.keys = array("q")  # packed keys, or the codes beside `times`
        self.times = array("q")
        self.order: Sequence[int] = ()

    def add(self, t: int, code: int) -> None:
        if self.packed:
            self.keys.append((t - self.t0) << self.shift | code)
        else:
            self.times.append(t)
            self.keys.append(code)

    def sort(self) -> None:
        self.order = _argsort(self.keys) if self.packed else _argsort(self.times, self.keys)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """(time, code) of each line, in line order."""
        keys, times, t0, shift = self.keys, self.times, self.t0, self.shift
        if self.packed:
            mask = (1 << shift) - 1
            for j in self.order:
                k = keys[j]
                yield (k >> shift) + t0, k & mask
        else:
            for j in self.order:
                yield times[j], keys[j]


def _edn_order(h: History, events: Sequence[Event]) -> tuple[_Order, dict[int, int], Sequence[int], list[int]]:
    """The order of `history_to_edn`'s lines (`_Order`), {rank of a completed
    op: the op its process invoked right after it}, the op of each rank, and
    the event of each event rank."""
    n = h.n
    inv, comp, process = h.invoke, h.complete, h.process
    ids = h.op_id
    if all(ids[i] < ids[i + 1] for i in range(n - 1)):  # rows in op-id order: the row breaks ties
        by_invoke = _argsort(inv)  # stable: ties keep row order
    else:
        by_invoke = _argsort(inv, ids)
    rank = array("q", bytes(8 * n))
    after: dict[int, int] = {}  # rank of an op -> the op its process invoked as it completed
    last: dict[int, int] = {}  # process -> its latest op so far, in invoke order
    for r, i in enumerate(by_invoke):
        rank[i] = r
        p = process[i]
        prev = last.get(p)
        if prev is not None and comp[prev] == inv[i]:
            after[rank[prev]] = i
        last[p] = i
    del last
    stamps = [min(inv, default=0), max(inv, default=0)]
    if max(comp, default=NONE) != NONE:  # NONE is the least int64: it never is the greatest
        stamps += [min(filter(NONE.__ne__, comp)), max(comp)]
    if events:
        stamps += [min(e.start_ns for e in events), max(e.start_ns for e in events)]
    bits = max(n, len(events), 1).bit_length()
    lines = _Order(bits, min(stamps), max(stamps))
    followers = set(after.values())
    ph1 = 1 << (bits + 1)
    add = lines.add
    for i in range(n):
        r = rank[i]
        if i not in followers:
            add(inv[i], r << 1)
        c = comp[i]
        if c != NONE:
            add(c, ph1 | r << 1)
    del rank, followers
    for r, i in after.items():
        add(inv[i], ph1 | r << 1 | 1)
    # Events tie on (time, seq) only when a table repeats a seq; their text
    # breaks such a tie, as sorting (time, 2, seq, 0, text) tuples did.
    ev_order = sorted(range(len(events)), key=lambda j: (events[j].start_ns, events[j].seq, _event_to_edn(events[j])))
    ph2 = 2 << (bits + 1)
    for pos, j in enumerate(ev_order):
        add(events[j].start_ns, ph2 | pos << 1)
    lines.sort()
    return lines, after, by_invoke, ev_order


def iter_edn_lines(h: History, events: Sequence[Event] = ()) -> Iterator[str]:
    """The lines of `history_to_edn(h, events)`, each with its newline,
    made one at a time from `h`'s columns."""
    lines, after, by_invoke, ev_order = _edn_order(h, events)
    bits = lines.bits
    rmask = (1 << bits) - 1
    for index, (t, code) in enumerate(lines):
        phase = code >> (bits + 1)
        r = (code >> 1) & rmask
        if phase == 0:
            body = _invoke_line(h, by_invoke[r])
        elif phase == 1:
            body = _invoke_line(h, after[r]) if code & 1 else _complete_line(h, by_invoke[r])
        else:
            body = _event_to_edn(events[ev_order[r]])
        yield f"{{:index {index}, :time {t}, {body}}}\n"


def _invoke_line(h: History, i: int) -> str:
    is_count = _is_count(h, i)
    k = KINDS[h.kind[i]]
    inv: dict[Any, Any] = {_K_TYPE: _K_INVOKE_T, _K_PROCESS: h.process[i], _K_F: _K_COUNT if is_count else _K(k.value),
                           _K_VALUE: _invoke_value(h, i, count=is_count)}  # fmt: skip
    if h.client[i] is not None:
        inv[_K_CLIENT] = h.client[i]
    return _line(inv)


def _complete_line(h: History, i: int) -> str:
    is_count = _is_count(h, i)
    k = KINDS[h.kind[i]]
    st = STATUSES[h.status[i]]
    done: dict[Any, Any] = {_K_TYPE: _K(st.value), _K_PROCESS: h.process[i], _K_F: _K_COUNT if is_count else _K(k.value)}
    if is_count and h.status[i] == OK:
        done[_K_VALUE] = (h.name(i), None if h.count[i] == NONE else h.count[i])
    elif h.kind[i] == READ and h.status[i] == OK:
        res = tuple(h.result(i) or ())
        # A set when it is one (what Elle and Knossos read); a vector
        # keeps a row returned twice (a table is a multiset).
        done[_K_VALUE] = (h.name(i), frozenset(res) if len(set(res)) == len(res) else res)
    else:
        done[_K_VALUE] = _invoke_value(h, i, count=is_count)
    if h.error_code[i] is not None:
        code = h.error_code[i] or ""
        nm = ERROR_NAMES.get(code)
        msg = h.error[i] or ""
        done[_K_ERROR] = (_K(nm), msg) if nm else (_K_SQLSTATE, code, msg)
    elif h.error[i]:
        done[_K_ERROR] = h.error[i]
    if h.count[i] != NONE and not is_count:
        done[_K_COUNT] = h.count[i]
    for key, col in ((_K_READ_TS, h.read_ts), (_K_WRITE_TS, h.write_ts), (_K_CATALOG_TS, h.catalog_ts)):
        if col[i] != NONE:
            done[key] = col[i]
    return _line(done)


_K_INVOKE_T: Final = kw("invoke")


def _line(m: dict[Any, Any]) -> str:
    return dumps(m)[1:-1]


def history_to_porcupine(h: History) -> str:
    """Porcupine-style JSON: one `{clientId, input, call, output, return}` per
    operation, times in ns. An indeterminate op has `"return"` = 2**63-1 and
    `"output": null`, which Porcupine reads as "may linearize any time after
    its call"; failed ops are left out (they did not happen)."""
    ops = []
    for i in range(h.n):
        st = h.status[i]
        if st == 1 and h.error_code[i] != "42P01":
            continue
        inp: dict[str, Any] = {"f": KINDS[h.kind[i]].value, "key": h.name(i)}
        if h.kind[i] == ADD:
            inp["elements"] = list(h.elements(i))
        if h.args[i] is not None:
            inp["args"] = json.loads(h.args[i] or "null")
        out: dict[str, Any] | None
        if st == INFO:
            out = None
        elif st == OK:
            out = {"ok": True}
            if h.kind[i] == READ:
                out["value"] = list(h.result(i) or ())
            if h.count[i] != NONE:
                out["count"] = h.count[i]
        else:
            out = {"ok": False, "error": h.error_code[i]}
        ret = 2**63 - 1 if st == INFO or h.complete[i] == NONE else h.complete[i]
        ops.append({"clientId": h.process[i], "input": inp, "call": h.invoke[i], "output": out, "return": ret})
    return json.dumps(ops, indent=None, separators=(",", ":")) + "\n"
