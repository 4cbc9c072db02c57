"""Checker 5: linearizability per table, Porcupine-style (Wing & Gong's search
with Lowe's memoization), with a time limit.

Each table is an object whose state is (exists, elements); operations are
create, drop, add, full read and "found the table unknown". Single-object
operations make linearizability local (Herlihy & Wing), so per-table results
compose into a verdict on the whole history — which must agree with checker 2,
and the tests cross-validate the two on small random histories. The search is
exponential in the worst case: use it on small histories only.

Coverage: every operation of a table it searched to the end (creates, drops,
adds, full reads, unknown-table failures, `info` ones as "maybe"), except
reads that returned a row twice (a set has each row once). Tables with
UPDATE/DELETE, filtered or count reads, or a value added twice are not
modeled, and the tables it had no time left for are not judged.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Final, final

from sim.history.checker.tables import INF, ends, index_tables, pauses_gc
from sim.history.checker.verdict import (
    Collector,
    CoverageBuilder,
    Verdict,
    describe,
    elements_text,
)
from sim.history.model import ADD, CREATE_TABLE, DELETE, DROP_TABLE, INFO, OK, READ, UPDATE

if TYPE_CHECKING:
    from collections.abc import Callable

    from sim.history.checker.tables import TableIndex
    from sim.history.model import History

__all__ = ["check_linear"]

State = tuple[bool, frozenset[int]]
_CREATE: Final = 0
_DROP: Final = 1
_ADD: Final = 2
_READ: Final = 3
_UNKNOWN: Final = 4
#: Why operations go unjudged (`Verdict.coverage`).
MUTATION: Final = "update/delete: not modeled"
FILTERED: Final = "filtered, count or column read: not modeled"
NOT_MODELED: Final = "table has UPDATE/DELETE or filtered reads: not modeled"
REPEATED: Final = "a value added more than once: not a set, not modeled"
DUPLICATE_READ: Final = "read returned a row more than once: not modeled"


def out_of_time(limit_s: float) -> str:
    return f"out of time (time limit {limit_s:g} s)"


@final
class _Timeout(Exception):
    pass


def _step(typ: int, arg: frozenset[int], info: bool, s: State) -> list[State]:
    exists, els = s
    nxt: State | None = None
    if typ == _CREATE:
        nxt = None if exists else (True, frozenset())
    elif typ == _DROP:
        nxt = (False, frozenset()) if exists else None
    elif typ == _ADD:
        nxt = (True, els | arg) if exists else None
    elif typ == _READ:
        nxt = s if exists and els == arg else None
    else:
        nxt = None if exists else s
    out = [] if nxt is None else [nxt]
    if info and nxt != s:
        out.append(s)  # an indeterminate op may not have happened at all
    return out


@pauses_gc
def check_linear(
    h: History,
    *,
    time_limit_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> Verdict:
    """Checks each table's sub-history; `unknown` when the tables need more than
    `time_limit_s` in all. Tables with UPDATE/DELETE, filtered reads or a
    value added twice are not modeled here: they are counted in
    `stats["tables-not-modeled"]` and left out of `coverage.judged`, and a
    history with no modeled table is `skipped`.

    Args:
        clock: the deadline's clock; a checker is tooling outside the
            simulation, so it may read the host's monotonic clock.
    """
    t0 = time.perf_counter()
    col = Collector("linear", h.op_id)
    cov = CoverageBuilder()
    deadline = clock() + time_limit_s
    e = ends(h)
    unknown: list[str] = []
    stats = {"tables": 0, "tables-checked": 0, "tables-not-modeled": 0}
    tables = list(index_tables(h).values())
    off = h.el_off
    for n, t in enumerate(tables):
        stats["tables"] += 1
        repeated = sum(off[a + 1] - off[a] for a in t.adds) != len(t.writer)
        rows = sorted(t.creates + t.drops + t.adds + t.reads + t.unknown)
        if t.mutated or t.other_ok or repeated:
            stats["tables-not-modeled"] += 1
            _not_modeled(h, t, rows, repeated, cov)
            continue
        ops: list[tuple[int, int, int, frozenset[int], bool]] = []  # (call, ret, typ, arg, info)
        dup: list[int] = []
        for i in rows:
            k = h.kind[i]
            info = h.status[i] == INFO
            if h.status[i] not in (OK, INFO):
                typ, arg = _UNKNOWN, frozenset[int]()
            elif k == CREATE_TABLE:
                typ, arg = _CREATE, frozenset()
            elif k == DROP_TABLE:
                typ, arg = _DROP, frozenset()
            elif k == ADD:
                typ, arg = _ADD, frozenset(h.elements(i))
            else:
                assert k == READ
                res = h.result(i) or ()
                typ, arg = _READ, frozenset(res)
                if len(arg) != len(res):
                    dup.append(i)
            ops.append((h.invoke[i], e[i], typ, arg, info))
        pre = not t.creates and (
            any(h.status[i] == OK for i in t.adds + t.reads)
            or any(h.status[d] == OK for d in t.drops)
        )
        if clock() >= deadline:
            unknown.append(f"time limit of {time_limit_s}s reached before checking {t.name!r}")
            _out_of_time(tables[n:], time_limit_s, cov)
            break
        try:
            ok, stuck, (exists, els) = _wgl(ops, (pre, frozenset()), deadline, clock)
        except _Timeout:
            unknown.append(f"time limit of {time_limit_s}s reached checking {t.name!r}")
            _out_of_time(tables[n:], time_limit_s, cov)
            break
        stats["tables-checked"] += 1
        # A read with a row twice was searched as the set it holds: a looser
        # constraint, so the search vouches for the others but not for it.
        cov.skip(DUPLICATE_READ, dup)
        cov.judge(set(rows).difference(dup))
        if not ok:
            shown = [rows[j] for j in stuck[:6]]
            col.add(
                "not-linearizable",
                shown,
                f"The {len(rows)} operations on {t.name!r} have no linearization: the longest "
                f"consistent prefix leaves the table "
                f"{'holding ' + elements_text(sorted(els)) if exists else 'nonexistent'}, and none "
                f"of the operations that must come next "
                f"({'; '.join(describe(h, r) for r in shown)}) is possible in that state.",
            )
    v = col.verdict(stats=stats, unknown="; ".join(unknown) or None,
                    seconds=time.perf_counter() - t0,
                    skipped=not unknown and stats["tables-checked"] == 0)
    return replace(v, coverage=cov.build())


def _table_rows(t: TableIndex) -> list[int]:
    return t.creates + t.drops + t.adds + t.reads + t.other_ok + t.unknown + t.info_other


def _not_modeled(h: History, t: TableIndex, rows: list[int], repeated: bool, cov: CoverageBuilder) -> None:
    kind = h.kind
    if repeated and not t.mutated and not t.other_ok:
        cov.skip(REPEATED, rows)
        return
    writes = [i for i in t.other_ok + t.info_other if kind[i] in (UPDATE, DELETE)]
    cov.skip(MUTATION, writes)
    cov.skip(FILTERED, [i for i in t.other_ok if kind[i] == READ])
    cov.skip(REPEATED if repeated else NOT_MODELED, rows)


def _out_of_time(tables: list[TableIndex], limit_s: float, cov: CoverageBuilder) -> None:
    why = out_of_time(limit_s)
    for t in tables:
        cov.skip(why, _table_rows(t))


def _wgl(
    ops: list[tuple[int, int, int, frozenset[int], bool]],
    init: State,
    deadline: float,
    clock: Callable[[], float],
) -> tuple[bool, list[int], State]:
    """(linearizable, the ops that could come next at the deepest point the
    search reached, and the table's state there)."""
    m = len(ops)
    if m == 0:
        return True, [], init
    evs = sorted(
        [(c, 0, j) for j, (c, _, _, _, _) in enumerate(ops)]
        + [(min(r, INF), 1, j) for j, (_, r, _, _, _) in enumerate(ops)]
    )
    n = 2 * m + 1
    nxt = [-1] * n
    prv = [-1] * n
    op_of = [0] * n
    is_call = [False] * n
    match = [0] * n
    call_node = [0] * m
    for idx, (_, r, j) in enumerate(evs, start=1):
        op_of[idx] = j
        is_call[idx] = r == 0
        if r == 0:
            call_node[j] = idx
        else:
            match[call_node[j]] = idx
    for idx in range(n):
        nxt[idx] = idx + 1 if idx + 1 < n else -1
        prv[idx] = idx - 1

    def lift(c: int) -> None:
        for x in (c, match[c]):
            nxt[prv[x]] = nxt[x]
            if nxt[x] != -1:
                prv[nxt[x]] = prv[x]

    def unlift(c: int) -> None:
        for x in (match[c], c):
            nxt[prv[x]] = x
            if nxt[x] != -1:
                prv[nxt[x]] = x

    state = init
    bits = 0
    cache: set[tuple[int, State]] = set()
    stack: list[tuple[int, State, int]] = []
    deepest = -1
    stuck: list[int] = []
    deep_state = init
    entry = nxt[0]
    spins = 0

    def try_from(entry: int, start: int) -> bool:
        nonlocal state, bits
        j = op_of[entry]
        _, _, typ, arg, info = ops[j]
        alts = _step(typ, arg, info, state)
        nb = bits | (1 << j)
        for k in range(start, len(alts)):
            ns = alts[k]
            if (nb, ns) not in cache:
                cache.add((nb, ns))
                stack.append((entry, state, k))
                state, bits = ns, nb
                lift(entry)
                return True
        return False

    while nxt[0] != -1:
        spins += 1
        if spins & 1023 == 0 and clock() > deadline:
            raise _Timeout
        if is_call[entry]:
            entry = nxt[0] if try_from(entry, 0) else nxt[entry]
            continue
        if len(stack) > deepest:
            deepest = len(stack)
            deep_state = state
            stuck = []
            # The ops that could come next: calls up to the first return.
            x = nxt[0]
            while x != -1 and is_call[x]:
                stuck.append(op_of[x])
                x = nxt[x]
            if x != -1 and op_of[x] not in stuck:
                stuck.append(op_of[x])
        if not stack:
            return False, stuck, deep_state
        entry, state, k = stack.pop()
        bits &= ~(1 << op_of[entry])
        unlift(entry)
        entry = nxt[0] if try_from(entry, k + 1) else nxt[entry]
    return True, [], init
