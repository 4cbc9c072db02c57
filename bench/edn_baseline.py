"""The EDN history reader `bench/edn.py` measures the streaming one against:
`sim/history/edn.py`'s tokenizer-then-recursive-parser and `interchange.py`'s
`history_from_edn` as they were at commit 8999f77, verbatim, with their own
dataclass `Keyword`, so they run as they did. Not used by coordsim; only
measured.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

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
    validate,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["old_loads_all", "old_read_edn"]


@final
@dataclass(frozen=True, slots=True)
class Keyword:
    name: str

    def __str__(self) -> str:
        return ":" + self.name


@final
@dataclass(frozen=True, slots=True)
class Symbol:
    name: str


@final
@dataclass(frozen=True, slots=True)
class Tagged:
    tag: str
    value: Any


def kw(name: str) -> Keyword:
    return Keyword(name)


_TOKEN: Final = re.compile(
    r"""
    (?P<ws>[\s,]+|;[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<open>\#\{|[\[({])
  | (?P<close>[\])}])
  | (?P<discard>\#_)
  | (?P<tag>\#[A-Za-z][^\s,\[\](){}"]*)
  | (?P<atom>[^\s,\[\](){}"]+)
    """,
    re.VERBOSE,
)
_INT: Final = re.compile(r"[+-]?\d+N?")
_FLOAT: Final = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?")
_ESC: Final = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "b": "\b", "f": "\f"}
_CLOSE: Final = {"[": "]", "(": ")", "{": "}", "#{": "}"}
_HEX4: Final = re.compile(r"[0-9A-Fa-f]{4}")
#: Integers longer than this are refused: no history value needs more than a
#: 64-bit integer's 19 digits, and Python's int-from-text limit is 4,300.
MAX_INT_DIGITS: Final = 100


def _unescape(s: str, line: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u":
                digits = s[i + 2 : i + 6]
                if not _HEX4.fullmatch(digits):
                    raise HistoryError(f"EDN line {line}: bad unicode escape \\u{digits}")
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            out.append(_ESC.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _atom(tok: str, line: int) -> Any:
    if tok == "nil":
        return None
    if tok == "true":
        return True
    if tok == "false":
        return False
    if tok.startswith(":"):
        if len(tok) == 1:
            raise HistoryError(f"EDN line {line}: empty keyword")
        return Keyword(tok[1:])
    if _INT.fullmatch(tok):
        digits = tok.rstrip("N").lstrip("+-")
        if len(digits) > MAX_INT_DIGITS:
            # Python refuses to convert such strings anyway (its int-str limit).
            raise HistoryError(f"EDN line {line}: an integer of {len(digits)} digits (at most {MAX_INT_DIGITS})")
        return int(tok.rstrip("N"))
    if _FLOAT.fullmatch(tok):
        return float(tok.rstrip("M"))
    if tok.startswith("\\"):
        raise HistoryError(f"EDN line {line}: character literals are not supported ({tok})")
    return Symbol(tok)


def old_loads_all(text: str) -> list[Any]:
    """Every top-level form of `text`; `HistoryError` with the line on bad input."""
    tokens: list[tuple[str, str, int]] = []
    line = 1
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise HistoryError(f"EDN line {line}: cannot read {text[pos : pos + 20]!r}")
        kind = m.lastgroup or ""
        tok = m.group()
        if kind != "ws":
            tokens.append((kind, tok, line))
        line += tok.count("\n")
        pos = m.end()
    forms: list[Any] = []
    i = 0

    def parse(i: int) -> tuple[Any, int]:
        kind, tok, ln = tokens[i]
        if kind == "str":
            return _unescape(tok[1:-1], ln), i + 1
        if kind == "atom":
            return _atom(tok, ln), i + 1
        if kind == "close":
            raise HistoryError(f"EDN line {ln}: unexpected {tok!r}")
        if kind == "discard":
            _, j = parse_required(i + 1, ln)
            return _DISCARDED, j
        if kind == "tag":
            v, j = parse_required(i + 1, ln)
            return Tagged(tok[1:], v), j
        close = _CLOSE[tok]
        items: list[Any] = []
        j = i + 1
        while True:
            if j >= len(tokens):
                raise HistoryError(f"EDN line {ln}: {tok!r} is never closed")
            if tokens[j][0] == "close":
                if tokens[j][1] != close:
                    raise HistoryError(f"EDN line {tokens[j][2]}: {tokens[j][1]!r} closes {tok!r}")
                j += 1
                break
            v, j = parse(j)
            if v is not _DISCARDED:
                items.append(v)
        if tok == "{":
            if len(items) % 2:
                raise HistoryError(f"EDN line {ln}: a map needs an even number of forms")
            try:
                m = dict(zip(items[::2], items[1::2], strict=True))
            except TypeError as exc:
                raise HistoryError(f"EDN line {ln}: unhashable map key") from exc
            if len(m) != len(items) // 2:
                # Invalid EDN (the spec: "no duplicate keys"); a reader that
                # kept the last would silently drop part of an event.
                raise HistoryError(f"EDN line {ln}: a map with a duplicate key: {_first_duplicate(items[::2])}")
            return m, j
        if tok == "#{":
            try:
                fs = frozenset(items)
            except TypeError as exc:
                raise HistoryError(f"EDN line {ln}: unhashable set element") from exc
            if len(fs) != len(items):
                raise HistoryError(f"EDN line {ln}: a set with a duplicate element: {_first_duplicate(items)}")
            return fs, j
        return tuple(items), j

    def parse_required(i: int, ln: int) -> tuple[Any, int]:
        if i >= len(tokens):
            raise HistoryError(f"EDN line {ln}: a tag or #_ at the end of input")
        return parse(i)

    try:
        while i < len(tokens):
            v, i = parse(i)
            if v is not _DISCARDED:
                forms.append(v)
    except RecursionError as exc:
        raise HistoryError(f"EDN line {tokens[i][2]}: nested too deeply") from exc
    return forms


_DISCARDED: Final = object()


def _first_duplicate(items: list[Any]) -> str:
    """The first element equal to an earlier one, printed; Python equates
    `1`, `1.0` and `true`, which EDN does not, so such a pair is named as one
    this reader cannot hold apart (not a history's values anyway)."""
    seen: dict[Any, Any] = {}
    for x in items:
        if x in seen:
            y = seen[x]
            if type(x) is type(y):
                return dumps(x)[:40]
            return f"{dumps(y)[:20]} and {dumps(x)[:20]} are equal to this reader"
        seen[x] = x
    return "?"
_BARE: Final = re.compile(r"[A-Za-z*+!\-_?<>=/.][A-Za-z0-9*+!\-_?<>=/.:#]*")


def dumps(v: Any) -> str:
    """EDN text of `v`. Sets and maps print in a sorted order (by their
    printed form), so equal values always print the same."""
    if v is None:
        return "nil"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, Keyword):
        return ":" + v.name
    if isinstance(v, Symbol):
        return v.name
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        body = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{body}"'
    if isinstance(v, dict):
        return "{" + ", ".join(f"{dumps(k)} {dumps(x)}" for k, x in v.items()) + "}"
    if isinstance(v, frozenset | set):
        items = sorted(v, key=lambda x: (not isinstance(x, int), x if isinstance(x, int) else 0, dumps(x)))
        return "#{" + " ".join(dumps(x) for x in items) + "}"
    if isinstance(v, tuple | list):
        return "[" + " ".join(dumps(x) for x in v) + "]"
    if isinstance(v, Tagged):
        return f"#{v.tag} {dumps(v.value)}"
    raise TypeError(f"cannot print {type(v).__name__} as EDN")


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
                                end_ns=t, detail=json.dumps(_to_json(m), sort_keys=True)))
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
                     code, msg, ts[0], ts[1], ts[2], None if client is None else str(client)])
    for proc, (inv_index, inv, inv_t, pid) in sorted(open_.items(), key=lambda x: x[1][3]):
        f = _get(inv, "f")
        assert isinstance(f, Keyword)
        kind = Kind(f.name)
        obj, els, args = _split_value(kind, _get(inv, "value"), f"{source}: event :index {inv_index}")
        rows.append([pid, proc, KIND_CODE[kind], obj, inv_t, NONE, INFO, els, None, NONE,
                     None if args is None else json.dumps(args, sort_keys=True),
                     None, None, NONE, NONE, NONE, None])
    rows.sort(key=lambda r: r[0])
    for r in rows:
        b.add_row(*r)
    h = b.build()
    validate(h)
    return h, events


def old_read_edn(path: Path | str) -> tuple[History, list[Event]]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{p}: unreadable: {exc}") from exc
    try:
        return history_from_edn(old_loads_all(text), source=str(p))
    except HistoryError as exc:
        if str(exc).startswith(str(p)):
            raise
        raise HistoryError(f"{p}: {exc}") from exc
