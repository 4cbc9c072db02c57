"""Checker 3's catalog part: DDL replayed in `catalog_ts` order. Every create
and drop must find the table absent (present) there, and every other op of the
table must have seen the catalog its `catalog_ts` names: an op that found the
table unknown must have looked where it was, and an op that succeeded must
have looked where it existed. Each op gets the incarnation of its table it
worked on, which the data part (`sim.history.checker.whitebox_data`) replays.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from sim.history.checker.tables import ends, index_tables
from sim.history.checker.verdict import describe
from sim.history.checker.whitebox_terms import DDL_UNPLACED, NAME, NO_CATALOG_TS, REPEATED
from sim.history.model import DDL_KINDS, FAIL, INFO, NONE, OK, READ, UNKNOWN_TABLE

if TYPE_CHECKING:
    from array import array

    from sim.history.checker.tables import TableIndex
    from sim.history.checker.verdict import Collector, CoverageBuilder
    from sim.history.model import History

__all__ = ["catalog_incarnations"]


def catalog_incarnations(
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
        # have happened; `info` writes are placed or accounted for in `check_data`.
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
                        "but replaying DDL in catalog_ts order, it already existed then.")
            if not is_create and cur < 0:
                col.add(NAME, (row,), f"{describe(h, row)} dropped {t.name!r} at catalog_ts {ts}, "
                        "but replaying DDL in catalog_ts order, it did not exist then.")
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
                           if k >= 0 else "it existed from the start")
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
                       else f"it is first created at catalog_ts {keys[0]}")
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
