"""Checker 3: white-box replay against the system's own timestamps.

DDL is applied in `catalog_ts` order and writes (INSERT, UPDATE, DELETE) in
`write_ts` order; every read must equal the replayed state at its `read_ts`
(of the table incarnation its `catalog_ts` names), every op that found a table
unknown must have looked at a catalog where it was, and the timestamps must
respect real time: an op that completed before another began never has a larger
timestamp, and a write's is strictly larger. An UPDATE/DELETE reads at its
`read_ts` and writes at its `write_ts`: every row it matched at `read_ts` must
still be there when its write applies, else another write retracted the same
row in between and one of the two updates is lost (both read-then-writes
cannot be serialized). This checks the *mechanism*
(oracle, group commit, catalog_ts plumbing) where checker 2 checks only the
outcome, and it covers UPDATE and DELETE, which checker 2 does not model.

Coverage: the operations whose timestamps it needs are there — a read with
its `read_ts`, a write with its `write_ts`, an unknown-table failure with its
`catalog_ts` (and every operation of a table with DDL with one) — and whose
table's state is knowable at that timestamp: a read or UPDATE/DELETE after an
indeterminate UPDATE/DELETE, or after a write without `write_ts`, is not
judged. `info` writes count as judged when their table is checked: the replay
takes both outcomes into account (or gives up on the reads after them).
"""

from __future__ import annotations

import json
import time
from bisect import bisect_left, bisect_right
from dataclasses import replace
from itertools import accumulate, compress, repeat
from operator import lt, sub
from typing import TYPE_CHECKING, Any, Final

from sim.history.checker.tables import INF, ends, index_tables, pauses_gc
from sim.history.checker.verdict import (
    Collector,
    CoverageBuilder,
    Verdict,
    describe,
    elements_text,
    fmt_t,
    nothing_judged,
)
from sim.history.model import (
    ADD,
    DDL_KINDS,
    FAIL,
    INFO,
    NONE,
    OK,
    READ,
    UNKNOWN_TABLE,
    UPDATE,
)

if TYPE_CHECKING:
    from array import array
    from collections.abc import Callable

    from sim.history.checker.tables import TableIndex
    from sim.history.model import History

__all__ = ["check_replay", "predicate"]

NAME: Final = "not-strict-serializable"
#: Why operations go unjudged (`Verdict.coverage`).
NO_TIMESTAMPS: Final = "no system timestamps (read_ts/write_ts/catalog_ts)"
NO_TS: Final = "no system timestamp (read_ts/write_ts)"
NO_CATALOG_TS: Final = "no catalog_ts"
DDL_UNPLACED: Final = "a create/drop without catalog_ts: the table's existence cannot be placed"
UNKNOWABLE: Final = ("after an indeterminate UPDATE/DELETE or a write without write_ts: the "
                     "table's state is unknowable")  # fmt: skip
COUNTLESS: Final = "count read without its count"
REPEATED: Final = "a value added more than once: not a set, contents not replayed"
_OPS: Final = {"=": int.__eq__, "<>": int.__ne__, "<": int.__lt__, "<=": int.__le__,
               ">": int.__gt__, ">=": int.__ge__}  # fmt: skip


def predicate(args: dict[str, Any] | None) -> Callable[[int], bool] | None:
    """The `where` of an op's args (`[[op, value], …]`, a conjunction over the
    element) as a test, or None for "every row"."""
    if not args or not args.get("where"):
        return None
    terms = [(_OPS[op], v) for op, v in args["where"]]
    return lambda x: all(f(x, v) for f, v in terms)


@pauses_gc
def check_replay(h: History) -> Verdict:
    t0 = time.perf_counter()
    col = Collector("replay", h.op_id)
    cov = CoverageBuilder()
    e = ends(h)
    stats = {"reads-checked": 0, "reads-unchecked": 0, "timestamped": 0, "unannotated": 0}
    _realtime(h, e, col, stats)
    inc, floating = _catalog(h, col, stats, cov)
    _data(h, inc, floating, col, stats, cov)
    unknown = None
    coverage = cov.build()
    if stats["timestamped"] == 0 and h.n:
        unknown = "no operation carries system timestamps (read_ts/write_ts/catalog_ts)"
        coverage = nothing_judged(NO_TIMESTAMPS, range(h.n))
    v = col.verdict(
        stats=stats, unknown=unknown, seconds=time.perf_counter() - t0, skipped=unknown is not None
    )
    return replace(v, coverage=coverage)


# --- timestamps vs real time -----------------------------------------------------------------


def _realtime(h: History, e: array[int], col: Collector, stats: dict[str, int]) -> None:
    kind, status = h.kind, h.status
    rts, wts, cts = h.read_ts, h.write_ts, h.catalog_ts
    n = h.n
    # Data timeline: an ok op's read_ts (reads) or write_ts (writes), whichever it has.
    # An UPDATE/DELETE that matched no row wrote nothing: it has only its
    # read_ts, and is a read there (not held to a write's strictly greater).
    dts = list(map(max, rts, wts))
    d_rows = [i for i in range(n) if dts[i] != NONE and status[i] == OK]
    d_write = [kind[i] != READ and wts[i] != NONE for i in d_rows]
    # Catalog timeline: DDL writes at its catalog_ts; other ops read the catalog at theirs.
    c_rows = [i for i in range(n) if cts[i] != NONE and status[i] != INFO]
    c_write = [kind[i] in DDL_KINDS for i in c_rows]
    c_rows_ok = [(i, w) for i, w in zip(c_rows, c_write, strict=True) if not w or status[i] == OK]
    annotated = sum(1 for i in range(n) if dts[i] != NONE or cts[i] != NONE)
    stats["timestamped"] = annotated
    stats["unannotated"] = n - annotated
    _sweep(h, e, d_rows, [dts[i] for i in d_rows], d_write, col, None, "data")
    rows = [i for i, _ in c_rows_ok]
    _sweep(
        h, e, rows, [cts[i] for i in rows], [w for _, w in c_rows_ok], col, "catalog_ts", "catalog"
    )


def _tsname(h: History, i: int) -> str:
    return "read_ts" if h.kind[i] == READ or h.write_ts[i] == NONE else "write_ts"


def _sweep(
    h: History,
    e: array[int],
    rows: list[int],
    ts: list[int],
    is_write: list[bool],
    col: Collector,
    tsname: str | None,
    timeline: str,
) -> None:
    """Flags each op whose timestamp is below (a write: not above) the largest
    timestamp of any op that completed before it began. Prefix maxima over
    completion order and one bisection per op keep the loops in C."""
    if not rows:
        return
    inv = h.invoke
    row_end = [e[i] for i in rows]
    order = sorted(range(len(rows)), key=row_end.__getitem__)
    ends_sorted = [row_end[k] for k in order]
    prefix = list(accumulate((ts[k] for k in order), max))
    pos = list(map(bisect_left, repeat(ends_sorted), (inv[i] for i in rows)))
    need = [-1 if p == 0 else prefix[p - 1] for p in pos]
    adj = list(map(sub, ts, is_write))  # a write must be strictly above: compare ts-1
    bad = list(compress(range(len(rows)), map(lt, adj, need)))
    if not bad:
        return
    # Name the earliest-completing op that carries the bound, for the explanation.
    first_at: dict[int, int] = {}
    for k in order:
        first_at.setdefault(ts[k], rows[k])
    for k in bad:
        i = rows[k]
        best_ts = need[k]
        a = first_at[best_ts]
        an = tsname or _tsname(h, a)
        bn = tsname or _tsname(h, i)
        w = is_write[k]
        rel = "greater than" if w else "at least"
        col.add(
            NAME,
            (a, i),
            f"{describe(h, i)} began at {fmt_t(inv[i])}, after {describe(h, a)} completed at "
            f"{fmt_t(e[a])}, yet its {bn} {ts[k]} is not {rel} the other's {an} {best_ts} "
            f"({timeline} timeline): timestamps must respect real time"
            + (", and a write's strictly." if w else "."),
        )


# --- catalog ------------------------------------------------------------------------------------


def _catalog(
    h: History, col: Collector, stats: dict[str, int], cov: CoverageBuilder
) -> tuple[list[int], list[tuple[int, tuple[int, ...]]]]:
    """Incarnation per row (-1: none or unchecked), checking each table op's
    view of the catalog at its `catalog_ts`; and the `info` writes without a
    catalog_ts (cut off before planning finished, e.g. by a crash) with the
    incarnations of their table they may have landed in."""
    inc = [-1] * h.n
    floating: list[tuple[int, tuple[int, ...]]] = []
    next_inc = 0
    ct = h.catalog_ts
    e: list[array[int]] = []  # completion times, computed if some DDL needs them
    for t in index_tables(h).values():
        table_ops = t.adds + t.reads + t.other_ok + t.unknown + t.info_other
        ok_cts = [
            ct[x] for x in t.adds + t.reads + t.other_ok if h.status[x] == OK and ct[x] != NONE
        ]
        unk_cts = [ct[x] for x in t.unknown if ct[x] != NONE]
        # What shows that a create (drop) at some catalog_ts happened: an op
        # that found the table there (not there) at or after it, or an ok
        # drop (create) of it after it — at ts - 1 in these lists, as that
        # DDL is evidence only for DDL strictly before it.
        saw_table = ok_cts + [ct[x] - 1 for x in t.drops if h.status[x] == OK and ct[x] != NONE]
        saw_none = unk_cts + [ct[x] - 1 for x in t.creates if h.status[x] == OK and ct[x] != NONE]
        ddl: list[tuple[int, int, int]] = []  # (catalog_ts, row, is create)
        for c in t.creates:
            if ct[c] == NONE:
                continue
            if h.status[c] == INFO and not any(x >= ct[c] for x in saw_table):
                continue  # an indeterminate create nobody used: assume it did not happen
            ddl.append((ct[c], c, 1))
        for d in t.drops:
            if ct[d] == NONE:
                continue
            if h.status[d] == INFO and not any(x >= ct[d] for x in saw_none):
                continue
            ddl.append((ct[d], d, 0))
        ddl.sort()
        if _unplaceable(h, t, saw_table, saw_none, e) or (not ddl and (t.creates or t.drops)):
            # DDL we cannot place on the catalog timeline: existence is unknowable.
            stats["tables-unchecked"] = stats.get("tables-unchecked", 0) + 1
            cov.skip(DDL_UNPLACED, table_ops + t.creates + t.drops)
            continue
        # Every create and drop is placed, or (`info`, unused) taken not to
        # have happened; `info` writes are placed or accounted for in `_data`.
        cov.judge(t.creates + t.drops)
        repeated = sum(h.el_off[a + 1] - h.el_off[a] for a in t.adds) != len(t.writer)
        if not repeated:
            cov.judge(x for x in table_ops if h.status[x] == INFO and h.kind[x] != READ)
        n_floating = len(floating)
        # Without DDL in the history, the table existed all along iff some op
        # on it succeeded (a name nobody ever created only ever fails).
        exists = (ddl[0][2] == 0) if ddl else bool(ok_cts or t.reads or t.other_ok or t.adds)
        cur = next_inc if exists else -1
        next_inc += 1
        keys: list[int] = []
        states: list[int] = []  # incarnation or -1
        causes: list[int] = []  # the DDL row
        initial = cur
        incarnations = [cur] if cur >= 0 else []
        for ts, row, is_create in ddl:
            if is_create and cur >= 0:
                col.add(NAME, (row,), f"{describe(h, row)} created {t.name!r} at catalog_ts {ts}, "
                        "but replaying DDL in catalog_ts order, it already existed then.")  # fmt: skip
            if not is_create and cur < 0:
                col.add(NAME, (row,), f"{describe(h, row)} dropped {t.name!r} at catalog_ts {ts}, "
                        "but replaying DDL in catalog_ts order, it did not exist then.")  # fmt: skip
            if is_create:
                cur = next_inc
                next_inc += 1
                incarnations.append(cur)
            else:
                cur = -1
            keys.append(ts)
            states.append(cur)
            causes.append(row)
        for x in sorted(table_ops):
            c = ct[x]
            if c == NONE:
                if not ddl:
                    inc[x] = initial
                    if h.status[x] == FAIL:
                        cov.skip(NO_CATALOG_TS, (x,))  # which catalog it looked at is unknown
                elif h.status[x] == INFO:
                    if incarnations and h.kind[x] not in DDL_KINDS and h.kind[x] != READ:
                        floating.append((x, tuple(incarnations)))
                else:
                    stats["unannotated-table-ops"] = stats.get("unannotated-table-ops", 0) + 1
                    cov.skip(NO_CATALOG_TS, (x,))
                continue
            k = bisect_right(keys, c) - 1
            state = initial if k < 0 else states[k]
            if h.status[x] == INFO:
                inc[x] = state  # may or may not have happened: nothing to check here
                continue
            if h.status[x] == FAIL:
                cov.judge((x,))
                if h.error_code[x] == UNKNOWN_TABLE and state >= 0:
                    why = (f"created by {describe(h, causes[k])} at catalog_ts {keys[k]}"
                           if k >= 0 else "it existed from the start")  # fmt: skip
                    col.add(
                        NAME,
                        (x,) if k < 0 else (causes[k], x),
                        f"{describe(h, x)} found {t.name!r} unknown, but in the catalog as of its "
                        f"catalog_ts {c} the table exists ({why}).",
                    )
                continue
            if state < 0:
                cov.judge((x,))  # an anomaly
                why = (f"{describe(h, causes[k])} dropped it at catalog_ts {keys[k]}" if k >= 0
                       else f"it is first created at catalog_ts {keys[0]}")  # fmt: skip
                col.add(
                    NAME,
                    (x,) if k < 0 else (causes[k], x),
                    f"{describe(h, x)} succeeded on {t.name!r} as of catalog_ts {c}, but the table "
                    f"does not exist in the catalog then: {why}.",
                )
                continue
            inc[x] = state
        if repeated:
            # A value added more than once: the rows are a multiset, which a
            # replay of sets cannot follow. The catalog checks above stand;
            # the data is left to the multiset checker.
            data = [x for x in table_ops if h.kind[x] not in DDL_KINDS and h.status[x] != FAIL]
            for x in data:
                inc[x] = -1
            del floating[n_floating:]
            cov.skip(REPEATED, data)
    return inc, floating


def _unplaceable(
    h: History, t: TableIndex, saw_table: list[int], saw_none: list[int], ends_: list[array[int]]
) -> bool:
    """Whether some create/drop of `t` that may have happened has no
    catalog_ts: an ok one, or an `info` one (a crash cut it off before it got
    one) whose effect an op may have seen. Such an `info` DDL took effect, if
    at all, at a catalog_ts at least that of every ok op of the table that
    completed before it began (`low`). A create nothing at or after `low`
    shows (`saw_table`), or a drop nothing there shows (`saw_none`), is taken
    not to have happened, as an unused `info` DDL with a catalog_ts is."""
    ct, status = h.catalog_ts, h.status
    for x in t.creates + t.drops:
        if ct[x] != NONE or status[x] == FAIL:
            continue
        if status[x] == OK:
            return True
        if not ends_:
            ends_.append(ends(h))
        e, inv = ends_[0], h.invoke[x]
        ok_ops = t.adds + t.reads + t.other_ok + t.creates + t.drops
        low = max((ct[y] for y in ok_ops if status[y] == OK and ct[y] != NONE and e[y] < inv), default=NONE)
        if any(c >= low for c in (saw_table if x in t.creates else saw_none)):
            return True
    return False


# --- data -------------------------------------------------------------------------------------


def _data(
    h: History,
    inc: list[int],
    floating: list[tuple[int, tuple[int, ...]]],
    col: Collector,
    stats: dict[str, int],
    cov: CoverageBuilder,
) -> None:
    """Applies writes in write_ts order and compares each read with the state
    at its read_ts (writes at a timestamp come before reads at it)."""
    kind, status = h.kind, h.status
    wts, rts = h.write_ts, h.read_ts
    rs, ro = h.res, h.res_off
    keys: list[int] = []  # 2*ts for a write, 2*ts+1 for a read: writes first
    rows: list[int] = []
    uncertain_from: dict[int, int] = {}  # incarnation -> reads from here are unknowable
    info_adds: list[int] = []
    mutated: set[int] = set()
    unchecked = 0
    judged: list[int] = []
    no_ts: list[int] = []
    unknowable: list[int] = []
    countless: list[int] = []
    for i, c in enumerate(inc):
        if c < 0:
            if kind[i] == READ and status[i] == OK:
                unchecked += 1
            continue
        k, st = kind[i], status[i]
        if k == READ:
            if st == OK:
                r = rts[i]
                if r == NONE:
                    unchecked += 1
                    no_ts.append(i)
                else:
                    keys.append(2 * r + 1)
                    rows.append(i)
            continue
        if st == FAIL:
            continue
        if k != ADD:
            mutated.add(c)
        w = wts[i]
        if st == INFO:
            if k == ADD:
                info_adds.append(i)
            else:
                uncertain_from[c] = min(uncertain_from.get(c, INF), -1 if w == NONE else w)
            continue
        if w == NONE:
            # A write we cannot place: the incarnation is unknowable from the start.
            uncertain_from[c] = -1
            no_ts.append(i)
            continue
        keys.append(2 * w)
        rows.append(i)
        if k == ADD:
            judged.append(i)
        r = rts[i]
        if k != ADD and r != NONE and r < w:
            # The read half of a read-then-write (`~i`): what it matched at read_ts.
            keys.append(2 * r + 1)
            rows.append(~i)
    for i, cands in floating:
        # An indeterminate UPDATE/DELETE of unknown incarnation: each candidate
        # is unknowable from its write_ts on.
        if kind[i] != ADD:
            w = wts[i]
            for c in cands:
                mutated.add(c)
                uncertain_from[c] = min(uncertain_from.get(c, INF), -1 if w == NONE else w)
    float_adds = [(i, cands) for i, cands in floating if kind[i] == ADD]
    if info_adds or float_adds:
        # An indeterminate add happened iff some read returned its element —
        # unless an UPDATE/DELETE may have removed it unseen: then unknowable.
        # One without a catalog_ts landed in the incarnation whose read saw it.
        seen: dict[int, set[int]] = {inc[i]: set() for i in info_adds}
        for _, cands in float_adds:
            seen.update((c, set()) for c in cands if c not in seen)
        for i, c in enumerate(inc):
            if c in seen and kind[i] == READ and status[i] == OK:
                seen[c].update(rs[ro[i] : ro[i + 1]])
        placed = [(i, (inc[i],)) for i in info_adds] + float_adds
        for i, cands in placed:
            w = wts[i]
            hit = [c for c in cands if any(x in seen[c] for x in h.elements(i))]
            for c in hit[:1]:
                if w == NONE:
                    uncertain_from[c] = -1
                else:
                    inc[i] = c
                    keys.append(2 * w)
                    rows.append(i)
            if not hit:
                for c in cands:
                    if c in mutated:
                        uncertain_from[c] = min(uncertain_from.get(c, INF), -1 if w == NONE else w)
    order = sorted(range(len(rows)), key=keys.__getitem__)
    state: dict[int, set[int]] = {}
    checked = 0
    el, eo, argv = h.el, h.el_off, h.args
    horizon = uncertain_from.get
    matched: dict[int, list[int]] = {}  # read-then-write -> rows it matched at read_ts
    removed: dict[tuple[int, int], int] = {}  # (incarnation, element) -> last write removing it
    for j in order:
        i = rows[j]
        key = keys[j]
        if i < 0:
            i = ~i
            c = inc[i]
            if key >> 1 < horizon(c, INF):
                now = state.get(c, set())
                where = predicate(json.loads(argv[i] or "{}"))
                matched[i] = sorted(now if where is None else (x for x in now if where(x)))
            continue
        c = inc[i]
        s = state.get(c)
        if s is None:
            s = state[c] = set()
        if not key & 1:
            if kind[i] == ADD:
                s.update(el[eo[i] : eo[i + 1]])
            else:
                countable = key >> 1 < horizon(c, INF)
                (judged if countable or status[i] == INFO else unknowable).append(i)
                read = matched.pop(i, None)
                if countable and read is not None:
                    _lost_update(h, i, read, s, c, removed, col)
                for x in _mutate(h, i, key >> 1, s, countable, col):
                    removed[(c, x)] = i
            continue
        ts = key >> 1
        if ts >= horizon(c, INF):
            unchecked += 1
            unknowable.append(i)
            continue
        checked += 1
        res = rs[ro[i] : ro[i + 1]]
        a_text = argv[i]
        args = json.loads(a_text) if a_text else {}
        pred = predicate(args)
        want = s if pred is None else {x for x in s if pred(x)}
        if args.get("count"):
            # SELECT count(*): the answer is in `count`, not a set.
            got_n = h.count[i]
            (countless if got_n == NONE else judged).append(i)
            if got_n != NONE and got_n != len(want):
                col.add(
                    NAME,
                    (i,),
                    f"{describe(h, i)} counted {got_n} rows at read_ts {ts}, but replaying the "
                    f"writes in write_ts order gives {len(want)}: {elements_text(sorted(want))}.",
                )
            continue
        judged.append(i)
        if len(res) == len(want) and want == set(res):
            continue
        _mismatch(h, i, ts, c, inc, want, res, col)
    stats["reads-checked"] = checked
    stats["reads-unchecked"] = unchecked
    cov.judge(judged)
    cov.skip(NO_TS, no_ts)
    cov.skip(UNKNOWABLE, unknowable)
    cov.skip(COUNTLESS, countless)


def _lost_update(
    h: History,
    i: int,
    seen: list[int],
    s: set[int],
    c: int,
    removed: dict[tuple[int, int], int],
    col: Collector,
) -> None:
    """Flags read-then-write `i` if a row it matched at its read_ts is gone
    when its write applies: a write in between retracted it too, so `i`
    retracts a row that is no longer there (a double retraction) and one of
    the two updates is lost — no serial order lets both read that row."""
    gone = [x for x in seen if x not in s]
    if not gone:
        return
    other = removed.get((c, gone[0]))
    by = (f" — {describe(h, other)} already changed it at write_ts {h.write_ts[other]}"
          if other is not None else "")  # fmt: skip
    col.add(
        NAME,
        (i,) if other is None else (other, i),
        f"lost update: {describe(h, i)} matched {elements_text(gone)} at its read_ts "
        f"{h.read_ts[i]} and wrote at write_ts {h.write_ts[i]}, but replaying the writes in "
        f"write_ts order, {gone[0]} was no longer there then{by}: both read-then-writes "
        "retracted the same row, so one's effect is lost; no serial order lets both read it.",
    )


def _mutate(
    h: History, i: int, ts: int, s: set[int], countable: bool, col: Collector
) -> list[int]:
    """Applies UPDATE/DELETE `i` to `s` at `ts`; returns the rows it removed."""
    args = json.loads(h.args[i] or "{}")
    pred = predicate(args)
    hit = sorted(s if pred is None else (x for x in s if pred(x)))
    if countable and h.count[i] != NONE and h.count[i] != len(hit):
        col.add(
            NAME,
            (i,),
            f"{describe(h, i)} reports {h.count[i]} rows at write_ts {ts}, but replaying "
            f"writes in write_ts order, {len(hit)} rows {elements_text(hit)} matched then.",
        )
    s.difference_update(hit)
    if h.kind[i] == UPDATE:
        if args.get("add") is not None:
            s.update(x + int(args["add"]) for x in hit)
        elif hit and args.get("set") is not None:
            s.add(int(args["set"]))
    return hit


def _mismatch(
    h: History,
    i: int,
    ts: int,
    c: int,
    inc: list[int],
    want: set[int],
    res: array[int],
    col: Collector,
) -> None:
    """Reports a read that differs from the replayed state, naming the writes."""
    wts = h.write_ts
    writer = {x: a for a in range(h.n) if inc[a] == c and h.kind[a] == ADD for x in h.elements(a)}
    got = set(res)
    missing = sorted(want - got)
    extra = sorted(got - want)
    parts = []
    if missing:
        a = writer.get(missing[0])
        src = (
            f", e.g. {missing[0]} added by {describe(h, a)} at write_ts {wts[a]}"
            if a is not None
            else ""
        )
        parts.append(f"it misses {elements_text(missing)}{src}")
    if extra:
        a = writer.get(extra[0])
        src = (f", e.g. {extra[0]} added by {describe(h, a)} at write_ts "
               f"{wts[a] if wts[a] != NONE else 'unknown'}" if a is not None
               else f", e.g. {extra[0]}, which no write produced")  # fmt: skip
        parts.append(f"it has {elements_text(extra)} extra{src}")
    if len(got) != len(res):
        parts.append("it returned duplicate rows")
    ops = [i] + [a for x in (missing[:1] + extra[:1]) if (a := writer.get(x)) is not None]
    col.add(
        NAME,
        ops,
        f"{describe(h, i)} ran at read_ts {ts}, where replaying the writes in write_ts order "
        f"gives {elements_text(sorted(want))}: " + "; ".join(parts) + ".",
    )
