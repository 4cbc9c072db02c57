"""Checker 3's data part: writes (INSERT, UPDATE, DELETE) replayed in
`write_ts` order, each read compared with the replayed state at its `read_ts`
(of the table incarnation the catalog part, `sim.history.checker.whitebox_catalog`,
gave it). An UPDATE/DELETE reads at its `read_ts` and writes at its
`write_ts`: every row it matched must still be there when its write applies,
else another write retracted it in between and an update is lost.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from sim.history.checker.tables import INF
from sim.history.checker.verdict import describe, elements_text
from sim.history.checker.whitebox_terms import COUNTLESS, NAME, NO_TS, UNKNOWABLE
from sim.history.model import ADD, FAIL, INFO, NONE, OK, READ, UPDATE

if TYPE_CHECKING:
    from array import array
    from collections.abc import Callable

    from sim.history.checker.verdict import Collector, CoverageBuilder
    from sim.history.model import History

__all__ = ["check_data", "predicate"]

_OPS: Final = {"=": int.__eq__, "<>": int.__ne__, "<": int.__lt__, "<=": int.__le__,
               ">": int.__gt__, ">=": int.__ge__}


def predicate(args: dict[str, Any] | None) -> Callable[[int], bool] | None:
    """The `where` of an op's args (`[[op, value], …]`, a conjunction over the
    element) as a test, or None for "every row"."""
    if not args or not args.get("where"):
        return None
    terms = [(_OPS[op], v) for op, v in args["where"]]
    return lambda x: all(f(x, v) for f, v in terms)


def check_data(
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
          if other is not None else "")
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
               else f", e.g. {extra[0]}, which no write produced")
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
