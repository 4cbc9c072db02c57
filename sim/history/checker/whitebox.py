"""Checker 3, `whitebox`: white-box replay against the system's own timestamps
(the sibling of `blackbox`, which trusts none of them).

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

This module checks the timestamps against real time and runs the other two
parts: `sim.history.checker.whitebox_catalog` and `sim.history.checker.whitebox_data`.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import replace
from itertools import accumulate, compress, repeat
from operator import lt, sub
from typing import TYPE_CHECKING

from sim.history.checker.tables import ends, pauses_gc
from sim.history.checker.verdict import (
    Collector,
    CoverageBuilder,
    Verdict,
    describe,
    fmt_t,
    nothing_judged,
)
from sim.history.checker.whitebox_catalog import catalog_incarnations
from sim.history.checker.whitebox_data import check_data
from sim.history.checker.whitebox_terms import NAME, NO_TIMESTAMPS
from sim.history.model import DDL_KINDS, INFO, NONE, OK, READ

if TYPE_CHECKING:
    from array import array

    from sim.history.model import History

__all__ = ["check_whitebox"]


@pauses_gc
def check_whitebox(h: History) -> Verdict:
    t0 = time.perf_counter()
    col = Collector("whitebox", h.op_id)
    cov = CoverageBuilder()
    e = ends(h)
    stats = {"reads-checked": 0, "reads-unchecked": 0, "timestamped": 0, "unannotated": 0}
    _realtime(h, e, col, stats)
    inc, floating = catalog_incarnations(h, col, stats, cov)
    check_data(h, inc, floating, col, stats, cov)
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
