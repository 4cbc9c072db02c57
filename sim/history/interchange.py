"""Histories to and from Jepsen-style EDN, and to Porcupine-style JSON, so
established checkers (Elle, Knossos, Porcupine) can read coordsim's histories
and ours can read theirs. The dialect is documented in docs/histories.md.

EDN is event-per-line: an `:invoke` and its completion (`:ok`, `:fail`,
`:info`) are separate maps paired by process, as in Jepsen. Reading checks the
pairing (every completion matches an invoke of its process; a process does
nothing after `:info`) and reports the offending event's `:index`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sim.history.edn import Keyword, dumps, kw, loads_all
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
    validate,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DEFAULT_TABLE", "ERROR_NAMES", "history_from_edn", "history_to_edn", "history_to_porcupine", "read_edn"]

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
_TS_KEYS: Final = (("read-ts", 0), ("write-ts", 1), ("catalog-ts", 2))
_K = kw


def _get(m: dict[Any, Any], key: str) -> Any:
    return m.get(Keyword(key))


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
    if isinstance(v, Keyword):
        return v.name
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


def history_from_edn(forms: Sequence[Any], *, source: str = "EDN") -> tuple[History, list[Event]]:
    """Pairs Jepsen events into operations; nemesis events become `fault`
    events. Raises `HistoryError` naming the event on malformed input, and on
    no events at all (an empty or truncated file, not an empty history)."""
    if not forms:
        raise HistoryError(f"{source}: no events (an empty file is not a history)")
    b = HistoryBuilder()
    open_: dict[Any, tuple[int, dict[Any, Any], int, int]] = {}  # process -> (index, invoke, time)
    dead: dict[Any, int] = {}
    rows: list[list[Any]] = []
    events: list[Event] = []
    pids: dict[Any, int] = {}
    for pos, m in enumerate(forms):
        if not isinstance(m, dict):
            raise HistoryError(f"{source}: form {pos} is not a map: {dumps(m)[:60]}")
        index = _get(m, "index")
        index = pos if index is None else _int(index, f"{source}: form {pos}: :index")
        where = f"{source}: event :index {index}"
        t = _get(m, "time")
        t = index if t is None else _int(t, f"{where}: :time")
        typ = _get(m, "type")
        proc = _get(m, "process")
        if not isinstance(typ, Keyword) or typ.name not in ("invoke", "ok", "fail", "info"):
            raise HistoryError(f"{where}: :type must be :invoke, :ok, :fail or :info")
        if isinstance(proc, Keyword):
            events.append(Event(seq=len(events), kind="fault", component=proc.name, start_ns=t,
                                end_ns=t, detail=json.dumps(_to_json(m), sort_keys=True)))  # fmt: skip
            continue
        if isinstance(proc, bool) or not isinstance(proc, int):
            raise HistoryError(f"{where}: :process must be an integer (or :nemesis)")
        _int(proc, f"{where}: :process")
        f = _get(m, "f")
        if not isinstance(f, Keyword):
            raise HistoryError(f"{where}: :f must be a keyword")
        try:
            kind = Kind(f.name)
        except ValueError as exc:
            raise HistoryError(f"{where}: unknown :f :{f.name}") from exc
        if typ.name == "invoke":
            if proc in dead:
                raise HistoryError(
                    f"{where}: process {proc} invokes after its op at :index {dead[proc]} "
                    "ended :info (use a fresh process)"
                )
            if proc in open_:
                raise HistoryError(
                    f"{where}: process {proc} invokes while its op at :index {open_[proc][0]} is pending"
                )
            open_[proc] = (index, m, t, len(pids))
            pids[len(pids)] = index  # op ids follow invoke order, as a live recorder's do
            continue
        pending = open_.pop(proc, None)
        if pending is None:
            raise HistoryError(f"{where}: :{typ.name} for process {proc}, which has no pending invoke")
        inv_index, inv, inv_t, pid = pending
        if _get(inv, "f") != f:
            raise HistoryError(f"{where}: completes :{f.name} but process {proc} invoked {dumps(_get(inv, 'f'))}")
        if t < inv_t:
            raise HistoryError(f"{where}: :time {t} is before its invoke's {inv_t}")
        obj, els, args = _split_value(kind, _get(inv, "value"), where)
        status = {"ok": 0, "fail": 1, "info": 2}[typ.name]
        if status == INFO:
            dead[proc] = index
        result: tuple[int, ...] | None = None
        if kind == Kind.READ and status == OK:
            v = _get(m, "value")
            res = v if isinstance(v, frozenset) else v[1] if isinstance(v, tuple) and len(v) > 1 else None
            if not isinstance(res, frozenset | tuple):
                raise HistoryError(f"{where}: an :ok :read needs :value [table #{{elements}}]")
            result = tuple(sorted(_int(x, f"{where}: read element") for x in res))
        code = msg = None
        err = _get(m, "error")
        if status != OK and err is not None:
            if isinstance(err, tuple) and err:
                head = err[0]
                if head == Keyword("sqlstate") and len(err) > 1:
                    code = str(err[1])
                    msg = str(err[2]) if len(err) > 2 else None
                else:
                    hn = head.name if isinstance(head, Keyword) else str(head)
                    code = _ERROR_CODES.get(hn, hn)
                    msg = " ".join(str(x) for x in err[1:]) or None
            elif isinstance(err, Keyword):
                code = _ERROR_CODES.get(err.name, err.name)
            else:
                msg = str(err)
        ts = [NONE, NONE, NONE]
        for key, k in _TS_KEYS:
            v = _get(m, key)
            if v is not None:
                ts[k] = _int(v, f"{where}: :{key}")
        count = _get(m, "count")
        client = _get(inv, "client")
        rows.append([pid, proc, KIND_CODE[kind], obj, inv_t, t, status, els, result,
                     NONE if count is None else _int(count, f"{where}: :count"),
                     None if args is None else json.dumps(args, sort_keys=True),
                     code, msg, ts[0], ts[1], ts[2], None if client is None else str(client)])  # fmt: skip
    for proc, (inv_index, inv, inv_t, pid) in sorted(open_.items(), key=lambda x: x[1][3]):
        f = _get(inv, "f")
        assert isinstance(f, Keyword)
        kind = Kind(f.name)
        obj, els, args = _split_value(kind, _get(inv, "value"), f"{source}: event :index {inv_index}")
        rows.append([pid, proc, KIND_CODE[kind], obj, inv_t, NONE, INFO, els, None, NONE,
                     None if args is None else json.dumps(args, sort_keys=True),
                     None, None, NONE, NONE, NONE, None])  # fmt: skip
    rows.sort(key=lambda r: r[0])
    for r in rows:
        b.add_row(*r)
    h = b.build()
    validate(h)
    return h, events


def read_edn(path: Path | str) -> tuple[History, list[Event]]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{p}: unreadable: {exc}") from exc
    try:
        return history_from_edn(loads_all(text), source=str(p))
    except HistoryError as exc:
        if str(exc).startswith(str(p)):
            raise
        raise HistoryError(f"{p}: {exc}") from exc


def _invoke_value(h: History, i: int) -> Any:
    k = h.kind[i]
    name = h.name(i)
    if k == ADD:
        els = list(h.elements(i))
        return (name, els[0] if len(els) == 1 else tuple(els))
    a = h.args[i]
    if a is not None:
        return (name, _from_json(json.loads(a)))
    if k == READ:
        return (name, None)
    return name


def history_to_edn(h: History) -> str:
    """One event map per line, ordered by time (an invoke before a completion
    at the same instant, so equal times never read as real-time order)."""
    evs: list[tuple[int, int, int, str]] = []
    for i in range(h.n):
        k = KINDS[h.kind[i]]
        base: dict[Any, Any] = {_K("process"): h.process[i], _K("f"): _K(k.value)}
        inv = {_K("type"): _K("invoke"), **base, _K("value"): _invoke_value(h, i)}
        if h.client[i] is not None:
            inv[_K("client")] = h.client[i]
        evs.append((h.invoke[i], 0, i, _line(inv)))
        if h.complete[i] == NONE:
            continue
        st = STATUSES[h.status[i]]
        done: dict[Any, Any] = {_K("type"): _K(st.value), **base}
        if h.kind[i] == READ and h.status[i] == OK:
            done[_K("value")] = (h.name(i), frozenset(h.result(i) or ()))
        else:
            done[_K("value")] = _invoke_value(h, i)
        if h.error_code[i] is not None:
            code = h.error_code[i] or ""
            nm = ERROR_NAMES.get(code)
            msg = h.error[i] or ""
            done[_K("error")] = (_K(nm), msg) if nm else (_K("sqlstate"), code, msg)
        elif h.error[i]:
            done[_K("error")] = h.error[i]
        if h.count[i] != NONE:
            done[_K("count")] = h.count[i]
        for key, col in (("read-ts", h.read_ts), ("write-ts", h.write_ts), ("catalog-ts", h.catalog_ts)):
            if col[i] != NONE:
                done[_K(key)] = col[i]
        evs.append((h.complete[i], 1, i, _line(done)))
    evs.sort(key=lambda x: (x[0], x[1], x[2]))
    out = []
    for index, (t, _, _, body) in enumerate(evs):
        out.append(f"{{:index {index}, :time {t}, {body}}}")
    return "\n".join(out) + ("\n" if out else "")


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
