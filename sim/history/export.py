"""Histories written for established checkers and tools: Jepsen-style EDN
(Elle, Knossos; the dialect of docs/histories.md, which `sim.history.import_edn`
reads back) and Porcupine-style JSON.

The EDN is written line by line from the history's columns, in an order kept
in a few int64 arrays (`_Order`), so exporting a million operations never
holds their text, nor a Python object per line.
"""

from __future__ import annotations

import itertools
import json
from array import array
from typing import TYPE_CHECKING, Any, Final, TextIO

from sim.history.edn import Keyword, dumps, kw
from sim.history.import_edn import ERROR_NAMES, INTERNAL_EVENT, INTERNAL_PROCESS
from sim.history.model import ADD, INFO, KINDS, NONE, OK, READ, STATUSES, Event, History, Status

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["history_to_edn", "history_to_porcupine", "iter_edn_lines", "write_edn"]

_K = kw
_K_TYPE, _K_PROCESS, _K_F, _K_VALUE = map(kw, ("type", "process", "f", "value"))
_K_ERROR, _K_COUNT, _K_CLIENT, _K_SQLSTATE = map(kw, ("error", "count", "client", "sqlstate"))
_K_READ_TS, _K_WRITE_TS, _K_CATALOG_TS = map(kw, ("read-ts", "write-ts", "catalog-ts"))
_K_INVOKE_T: Final = kw("invoke")


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


def _from_json(v: Any, *, key: bool = False) -> Any:
    if isinstance(v, dict):
        return {Keyword(k): _from_json(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return tuple(_from_json(x) for x in v)
    if isinstance(v, str) and v in ("=", "<>", "<", "<=", ">", ">="):
        return Keyword(v)
    return v


def _event_to_edn(e: Event) -> str:
    v: dict[Any, Any] = {_K("seq"): e.seq, _K("kind"): e.kind, _K("component"): e.component}
    for key, x in (("end-ns", e.end_ns), ("ts", e.ts), ("batch-size", e.batch_size), ("timeline", e.timeline),
                   ("actor", e.actor), ("detail", e.detail)):
        if x is not None:
            v[_K(key)] = x
    if e.status != Status.OK:
        v[_K("status")] = _K(Status(e.status).value)
    if e.ops:
        v[_K("ops")] = tuple(e.ops)
    return _line({_K("type"): _K("info"), _K("process"): INTERNAL_PROCESS, _K("f"): INTERNAL_EVENT, _K("value"): v})


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
                      for k, c in enumerate(cols)})
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


def _invoke_line(h: History, i: int) -> str:
    is_count = _is_count(h, i)
    k = KINDS[h.kind[i]]
    inv: dict[Any, Any] = {_K_TYPE: _K_INVOKE_T, _K_PROCESS: h.process[i], _K_F: _K_COUNT if is_count else _K(k.value),
                           _K_VALUE: _invoke_value(h, i, count=is_count)}
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
