"""Checker 1: the named anomalies of seed 001 and DDL/set-workload staleness,
judged from real time alone (no system timestamp is trusted).

Each rule fires only when real-time order forces the conclusion: an `info`
operation may have happened at any time after its invoke, so whenever one could
explain an observation (a drop that may have landed in between), the rule stays
silent. Tables touched by UPDATE/DELETE are left to the whitebox checker for the
element-level rules, because elements may legitimately disappear there.

Coverage: none. Each rule names an anomaly when real time forces it, but no
rule decides that an operation is consistent, so this checker's silence
vouches for nothing (`coverage.judged` is empty) and it gives no reasons.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import replace
from typing import TYPE_CHECKING

from sim.history.checker.tables import INF, TableIndex, ends, index_tables, pauses_gc
from sim.history.checker.verdict import (
    Collector,
    Coverage,
    Verdict,
    describe,
    elements_text,
    fmt_t,
)
from sim.history.model import OK, READ, multiset_tables

if TYPE_CHECKING:
    from array import array

    from sim.history.model import History

__all__ = ["check_named"]


@pauses_gc
def check_named(h: History) -> Verdict:
    """Runs every named-anomaly rule over `h` (validated beforehand)."""
    t0 = time.perf_counter()
    col = Collector("named", h.op_id)
    e = ends(h)
    stats = {"tables": 0, "tables-with-mutations": 0, "multiset-tables": 0, "reads": 0}
    # A value inserted twice, or read twice, no longer names its one write:
    # the element rules below would mistake a second copy for an anomaly.
    multiset = multiset_tables(h)
    for o, t in index_tables(h).items():
        stats["tables"] += 1
        stats["reads"] += len(t.reads)
        _unknown_table(h, t, e, col)
        _dropped_visible(h, t, e, col)
        if t.mutated:
            stats["tables-with-mutations"] += 1
            continue
        if o in multiset:
            stats["multiset-tables"] += 1
            continue
        _from_future(h, t, e, col)
        _missing(h, t, e, col)
    return replace(col.verdict(stats=stats, seconds=time.perf_counter() - t0), coverage=Coverage())


def _unknown_table(h: History, t: TableIndex, e: array[int], col: Collector) -> None:
    """insert-/select-unknown-table: the op failed 42P01 although the table was
    known to exist (a create or a successful op on it completed before the op
    began) and no drop can have come in between."""
    if not t.unknown:
        return
    inv = h.invoke
    wit = [i for i in t.creates if h.status[i] == OK]
    wit += [i for i in t.adds if h.status[i] == OK] + t.reads + t.other_ok
    if not wit:
        return
    wit.sort(key=lambda i: (e[i], i))
    wends = [e[i] for i in wit]
    best: list[int] = []  # prefix: the witness that began last
    for i in wit:
        best.append(i if not best or inv[i] > inv[best[-1]] else best[-1])
    for f in t.unknown:
        k = bisect_left(wends, inv[f])
        if k == 0:
            continue
        w = best[k - 1]
        if any(e[d] > inv[w] and inv[d] < e[f] for d in t.drops):
            continue
        name = "select-unknown-table" if h.kind[f] == READ else "insert-unknown-table"
        col.add(
            name,
            (w, f),
            f"{describe(h, f)} failed with {h.error_code[f]} (unknown table) although "
            f"{t.name!r} existed: {describe(h, w)} completed at {fmt_t(e[w])}, before the "
            f"failing op began at {fmt_t(inv[f])}, and no drop of {t.name!r} was attempted "
            "that could have taken effect in between.",
        )


def _dropped_visible(h: History, t: TableIndex, e: array[int], col: Collector) -> None:
    """dropped-object-visible: an op on the table succeeded although its drop was
    acknowledged before the op began and no create can have come in between;
    or a read returned an element added before an acknowledged drop."""
    okdrops = [d for d in t.drops if h.status[d] == OK]
    if not okdrops:
        return
    inv = h.invoke
    succ = sorted([i for i in t.adds if h.status[i] == OK] + t.reads + t.other_ok)
    for s in succ:
        before = [d for d in okdrops if e[d] < inv[s]]
        if not before:
            continue
        d = max(before, key=lambda x: (inv[x], x))
        if not any(e[c] > inv[d] and inv[c] < e[s] for c in t.creates):
            col.add(
                "dropped-object-visible",
                (d, s),
                f"{describe(h, s)} succeeded at {fmt_t(e[s])}, but {describe(h, d)} was "
                f"acknowledged at {fmt_t(e[d])}, before it began at {fmt_t(inv[s])}, and no "
                f"create of {t.name!r} was attempted that could have taken effect in between.",
            )
            continue
        if h.kind[s] != READ:
            continue
        horizon = max(inv[x] for x in before)
        res = h.result(s) or ()
        old = [x for x in res if (a := t.writer.get(x)) is not None and e[a] < horizon]
        if old:
            a = t.writer[old[0]]
            col.add(
                "dropped-object-visible",
                (a, d, s),
                f"{describe(h, s)} returned {elements_text(old)} although they were added to an "
                f"earlier {t.name!r} (e.g. {describe(h, a)}, acknowledged at {fmt_t(e[a])}) that "
                f"{describe(h, d)} dropped (acknowledged at {fmt_t(e[d])}) before the read began "
                f"at {fmt_t(inv[s])}.",
            )


def _from_future(h: History, t: TableIndex, e: array[int], col: Collector) -> None:
    """read-from-future: a read returned an element whose add had not been
    invoked when the read completed, failed, or never existed."""
    inv = h.invoke
    writer, failed = t.writer, t.failed_writer
    ainv = {x: inv[a] for x, a in writer.items()}
    get = ainv.__getitem__
    rs, ro = h.res, h.res_off
    for r in t.reads + [i for i in t.other_ok if h.kind[i] == READ]:
        res = rs[ro[r] : ro[r + 1]]
        try:
            if max(map(get, res), default=-1) <= e[r]:
                continue  # the common case, checked without a Python-level loop
        except KeyError:
            pass
        bad = [x for x in res if (a := writer.get(x)) is None or inv[a] > e[r]]
        x = bad[0]
        a = writer.get(x)
        if a is not None:
            why = (f"{describe(h, a)} was invoked only at {fmt_t(inv[a])}, after the read "
                   f"completed at {fmt_t(e[r])}")
            ops: tuple[int, ...] = (r, a)
        elif x in failed:
            a = failed[x]
            why = f"{describe(h, a)}, the only add of {x}, failed (so it never happened)"
            ops = (r, a)
        else:
            why = f"no operation ever added {x} to {t.name!r}"
            ops = (r,)
        col.add(
            "read-from-future",
            ops,
            f"{describe(h, r)} returned {elements_text(bad)}, values no write could have "
            f"produced yet: {why}.",
        )


def _missing(h: History, t: TableIndex, e: array[int], col: Collector) -> None:
    """stale-read, non-monotonic-read and lost-write: a read misses an element
    known present before it began — acknowledged (stale), or seen by a read
    that completed before it began (non-monotonic); an acknowledged element
    missing from *every* read that began after its acknowledgement is also a
    lost write (so a lone stale read is reported under both names: with no
    later read, the two cannot be told apart)."""
    if not t.reads or not t.writer:
        return
    inv, status = h.invoke, h.status
    rs, ro = h.res, h.res_off
    # The first completed read containing each element; the dict.fromkeys /
    # update idiom keeps the per-element work of a million-op history in C.
    first_read: dict[int, int] = {}
    for r in reversed(sorted(t.reads, key=e.__getitem__)):
        first_read.update(dict.fromkeys(rs[ro[r] : ro[r + 1]], r))
    known: list[tuple[int, int]] = []
    get = first_read.get
    for x, a in t.writer.items():
        k = e[a] if status[a] == OK else INF
        f = get(x)
        if f is not None and e[f] < k:
            k = e[f]
        if k < INF:
            known.append((k, x))
    known.sort()
    kts = [k for k, _ in known]
    kel = [x for _, x in known]
    # A drop separates an add from a later read only if a create can have
    # re-created the table before the read (which succeeded).
    cr = [(inv[c], e[c]) for c in t.creates]
    drops = [(inv[d], e[d]) for d in t.drops]
    stale: dict[int, list[int]] = {}  # read -> elements missing although acknowledged
    missed_by: dict[int, list[int]] = {}  # element -> reads missing it after its ack
    first_drop = min((di for di, _ in drops), default=INF)
    for r in t.reads:
        horizon, before = -1, -1
        if e[r] > first_drop:
            er = e[r]
            separating = [(di, de) for di, de in drops if di < er and any(ce > di and ci < er for ci, ce in cr)]
            horizon = max((de for _, de in separating), default=-1)
            if horizon >= INF:
                continue  # an indeterminate drop may have emptied the table
            before = min((di for di, _ in separating), default=-1)
        p = bisect_left(kts, inv[r])
        if p == 0:
            continue
        resset = set(rs[ro[r] : ro[r + 1]])
        if horizon < 0:
            if resset.issuperset(kel[:p]):
                continue
            miss = [x for x in kel[:p] if x not in resset]
        else:
            # A drop and a re-create may separate the read from what was
            # written before it: then only writes after the horizon count.
            # Unless the read returned an element y acknowledged before any
            # separating drop began. Elements are unique, so the read saw y's
            # incarnation; an add acknowledged before the read began took
            # effect before the read did, so in y's incarnation too (a drop
            # and a re-create between it and y's add would have begun before
            # y's acknowledgement: a separating drop earlier than the first).
            def acked_before(x: int, when: int) -> bool:
                w = t.writer.get(x)
                return w is not None and status[w] == OK and e[w] < when

            saw_old = any(acked_before(y, before) for y in resset)
            miss = [x for x in kel[:p] if x not in resset
                    and (inv[t.writer[x]] > horizon or (saw_old and acked_before(x, inv[r])))]
        nonmono: list[int] = []
        for x in miss:
            a = t.writer[x]
            if status[a] == OK and e[a] < inv[r]:
                stale.setdefault(r, []).append(x)
                missed_by.setdefault(x, []).append(r)
            else:
                nonmono.append(x)
        if nonmono:
            x = nonmono[0]
            r0 = first_read[x]
            col.add(
                "non-monotonic-read",
                (r0, r),
                f"{describe(h, r)} began at {fmt_t(inv[r])} and misses {elements_text(nonmono)}, "
                f"although {describe(h, r0)} had already returned {x} when it completed at "
                f"{fmt_t(e[r0])}; a later read may not see less.",
            )
    lost: set[int] = set()
    last_inv: dict[int, int] = {}  # element -> the last-begun read containing it
    if missed_by:
        for r in sorted(t.reads, key=inv.__getitem__):
            last_inv.update(dict.fromkeys(rs[ro[r] : ro[r + 1]], inv[r]))
    for x, missing_in in missed_by.items():
        a = t.writer[x]
        if last_inv.get(x, -1) <= e[a]:
            lost.add(x)
            last = missing_in[-1]
            col.add(
                "lost-write",
                (a, last),
                f"{describe(h, a)} was acknowledged at {fmt_t(e[a])}, yet none of the "
                f"{len(missing_in)} reads of {t.name!r} that began afterwards contains {x} (the last, "
                f"{describe(h, last)}, began at {fmt_t(inv[last])}): the write was lost.",
            )
    # Every read that misses an acknowledged element is stale, whether or not
    # a later read shows the element again (if none does, it is also lost).
    for r, xs in stale.items():
        x = xs[0]
        a = t.writer[x]
        if x in lost:
            later = "no later read shows it either (a lost write)"
        elif last_inv.get(x, -1) > inv[r]:
            later = "a later read shows it, so it was not lost"
        else:  # only reads that began before this one show it
            later = "a read that began after the acknowledgement shows it, so it was not lost"
        col.add(
            "stale-read",
            (a, r),
            f"{describe(h, r)} began at {fmt_t(inv[r])} and misses {elements_text(xs)}; "
            f"e.g. {x}, whose add {describe(h, a)} was acknowledged at {fmt_t(e[a])}, "
            f"before the read began ({later}).",
        )
