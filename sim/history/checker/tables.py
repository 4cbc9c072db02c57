"""Per-table indexes of a history, shared by the checkers so each pass over a
million operations happens once.

Times: `ends[i]` is op i's completion, or `INF` for an `info` op, which may
take effect at any time after its invoke (Jepsen's convention).
"""

from __future__ import annotations

import functools
import gc
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, ParamSpec, TypeVar, final

from sim.history.model import (
    ADD,
    CREATE_TABLE,
    DELETE,
    DROP_TABLE,
    FAIL,
    INFO,
    NONE,
    OK,
    READ,
    UNKNOWN_TABLE,
    UPDATE,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from sim.history.model import History

_P = ParamSpec("_P")
_R = TypeVar("_R")

__all__ = ["INF", "TableIndex", "ends", "index_tables", "pauses_gc"]

INF: Final = 2**62


def pauses_gc(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Runs `fn` with Python's cyclic garbage collector paused. A checker builds
    millions of small lists, sets and tuples without reference cycles; the
    collector would rescan them again and again as they accumulate, which made
    a million-operation check about a quarter slower (and superlinear)."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return run


def ends(h: History) -> array[int]:
    """Completion times with `INF` for indeterminate (and never-completed) ops."""
    out = array("q", h.complete)
    for i, st in enumerate(h.status):
        if st == INFO:
            out[i] = INF
    if NONE in out:
        for i, c in enumerate(out):
            if c == NONE:
                out[i] = INF
    return out


@final
@dataclass
class TableIndex:
    """The operations on one table name, each list in op-id order."""

    name: str
    creates: list[int] = field(default_factory=list)  # ok/info create-table
    drops: list[int] = field(default_factory=list)  # ok/info drop-table
    adds: list[int] = field(default_factory=list)  # ok/info adds
    reads: list[int] = field(default_factory=list)  # ok full reads (no WHERE)
    other_ok: list[int] = field(default_factory=list)  # ok update/delete/filtered reads
    unknown: list[int] = field(default_factory=list)  # add/read/update/delete failed 42P01
    info_other: list[int] = field(default_factory=list)  # indeterminate read/update/delete
    mutated: bool = False  # some update/delete may have happened
    writer: dict[int, int] = field(default_factory=dict)  # element -> ok/info add
    failed_writer: dict[int, int] = field(default_factory=dict)  # element -> failed add


def index_tables(h: History) -> dict[int, TableIndex]:
    """Object index -> its `TableIndex`, in object-index order. One tight pass:
    this runs over every row of a million-op history."""
    out: dict[int, TableIndex] = {}
    derived: set[int] = set()
    get = out.get
    kind, status, codes, args = h.kind, h.status, h.error_code, h.args
    el, off, names = h.el, h.el_off, h.names
    for i, o in enumerate(h.obj):
        if o < 0:
            continue
        t = get(o)
        if t is None:
            t = out[o] = TableIndex(names[o])
        k = kind[i]
        st = status[i]
        if k == READ:
            if st == OK:
                if args[i] is None:
                    t.reads.append(i)
                else:
                    t.other_ok.append(i)  # WHERE, count(*) or columns: not the whole set
            elif st == INFO:
                t.info_other.append(i)
            elif codes[i] == UNKNOWN_TABLE:
                t.unknown.append(i)
        elif k == ADD:
            if st == FAIL:
                if codes[i] == UNKNOWN_TABLE:
                    t.unknown.append(i)
                fw = t.failed_writer
                for x in el[off[i] : off[i + 1]]:
                    fw.setdefault(x, i)
            else:
                t.adds.append(i)
                w = t.writer
                lo, hi = off[i], off[i + 1]
                if hi == lo + 1:
                    w[el[lo]] = i
                else:
                    for x in el[lo:hi]:
                        w[x] = i
        elif k == CREATE_TABLE:
            if st != FAIL:
                t.creates.append(i)
        elif k == DROP_TABLE:
            if st != FAIL:
                t.drops.append(i)
        elif k in (UPDATE, DELETE):
            if st == FAIL:
                if codes[i] == UNKNOWN_TABLE:
                    t.unknown.append(i)
                continue
            t.mutated = True
            if st == OK:
                t.other_ok.append(i)
            else:
                t.info_other.append(i)
        else:
            derived.add(o)
    # Indexes, views and clusters are not tables of elements: what a view
    # returns depends on its query, which the history does not model.
    return {o: t for o, t in sorted(out.items()) if o not in derived}
