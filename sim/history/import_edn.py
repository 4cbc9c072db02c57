"""Histories read from Jepsen-style EDN, so coordsim's checkers can judge the
histories of established tools (Elle, Knossos, Jepsen) and coordsim's own
exports (`sim.history.export` writes the dialect, docs/histories.md, and
Porcupine JSON).

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

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sim.history.edn import CHUNK_CHARS, Keyword, Symbol, Tagged, dumps, iter_forms, kw
from sim.history.model import (
    INFO,
    KIND_CODE,
    NONE,
    OK,
    Event,
    History,
    HistoryBuilder,
    HistoryError,
    Kind,
    Status,
    validate,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = [
    "DEFAULT_TABLE",
    "ERROR_NAMES",
    "INTERNAL_EVENT",
    "INTERNAL_PROCESS",
    "OP_RECORD_TAG",
    "history_from_edn",
    "read_edn",
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
            if proc is INTERNAL_PROCESS and get(_K_F) is INTERNAL_EVENT:
                events.append(_event_from_edn(get(_K_VALUE), t, len(events), _where(source, index)))
                continue
            if isinstance(proc, Keyword):
                events.append(Event(seq=len(events), kind="fault", component=proc.name, start_ns=t,
                                    end_ns=t, detail=json.dumps(_to_json(m), sort_keys=True)))
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
               code, msg, read_ts, write_ts, catalog_ts, None if client is None else str(client))
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
                        None, None, NONE, NONE, NONE, None)
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


#: Internal events (`Event`: oracle calls, group commits, faults) travel in
#: EDN as `:info` events of this non-client process, as a nemesis's do in
#: Jepsen, so checkers that read only integer processes skip them.
INTERNAL_PROCESS: Final = kw("coordsim")
INTERNAL_EVENT: Final = kw("event")
_EVENT_INTS: Final = ("seq", "end-ns", "ts", "batch-size")
_EVENT_STRS: Final = ("kind", "component", "timeline", "actor", "detail")


def _event_from_edn(v: Any, t: int, seq: int, where: str) -> Event:
    """The `Event` an internal event's `:value` describes (as `sim.history.export` writes it)."""
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
    )
