"""Checker 2: black-box strict serializability of the set/table workload,
trusting no system timestamp (in the style of Elle).

Every operation becomes a node; edges say "must come before": real time (A
completed before B began), write-read (a read returned an element, so its add
came first), read-write (a read lacks an element, so the add came after), and
existence (an op that succeeded on a table follows its create and precedes its
drop; an op that found the table unknown precedes the create or follows the
drop). The history is strictly serializable iff the graph is acyclic; a cycle
is reported, shortest first, as the contradiction in words.

Real-time edges go through a chain of "time" nodes (A → t_k → … → t_j → B), and
the reads of one table through "version" nodes, so the graph stays linear in
the history's size instead of quadratic (`sim.history.checker.graph`: the graph
and its cycle search). `info` operations may or may not have happened: an
indeterminate add counts only if some read saw its element, and indeterminate
ops never precede anything in real time.

Coverage (what a `valid` from here vouches for): the creates, drops and
unknown-table failures of a table created and dropped at most once, and the
adds and full reads of such a table when it is a grow-only set (no
UPDATE/DELETE, each value added once). Filtered and count reads, reads that
return a row twice, and every operation of a table re-created under its name
are left unjudged, with the reason.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from sim.history.checker.graph import OP, TIME, VERSION, Graph, find_cycles
from sim.history.checker.tables import INF, TableIndex, ends, index_tables, pauses_gc
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
    DELETE,
    DROP_TABLE,
    INFO,
    OK,
    READ,
    UNKNOWN_TABLE,
    UPDATE,
)

if TYPE_CHECKING:
    from array import array

    from sim.history.model import History

__all__ = ["check_blackbox"]

NAME: Final = "not-strict-serializable"
#: Why operations go unjudged (`Verdict.coverage`).
RECREATED: Final = "table created or dropped more than once: only write-read order is checked"
MUTATION: Final = "update/delete: not modeled (grow-only sets only)"
MUTATED: Final = "table has UPDATE/DELETE: its contents are not modeled"
REPEATED: Final = "a value added more than once: not a set, contents not modeled"
FILTERED: Final = "filtered, count or column read: not modeled"
DUPLICATE_READ: Final = "read returned a row more than once: not modeled"


@pauses_gc
def check_blackbox(h: History, *, max_ops: int | None = None, max_rounds: int = 8) -> Verdict:
    """Checks `h` (validated) for strict serializability.

    Args:
        max_ops: above this many operations, return `unknown` without checking.
        max_rounds: how often an ambiguous "table was unknown" observation may be
            re-placed (before the create, else after the drop) to escape a cycle.
    """
    t0 = time.perf_counter()
    col = Collector("blackbox", h.op_id)
    if max_ops is not None and h.n > max_ops:
        why = f"{h.n} operations exceed the limit of {max_ops}"
        v = col.verdict(unknown=why)
        return replace(v, coverage=nothing_judged(f"over the limit of {max_ops} operations", range(h.n)))
    e = ends(h)
    g = Graph(h.n)
    stats = {"tables": 0, "tables-partial": 0, "tables-with-mutations": 0}
    choices: dict[int, tuple[int, int]] = {}  # unknown-table op -> (create, drop or -1)
    part = _participants(h)
    tabs = index_tables(h)
    cov = CoverageBuilder()
    for t in tabs.values():
        stats["tables"] += 1
        _table(h, t, e, g, part, col, choices, stats, cov)
    _realtime(h, e, g, part)
    stats["nodes"] = len(g.succ)
    stats["edges"] = sum(len(s) for s in g.succ)
    unknown = None
    for _ in range(max_rounds):
        cycles = find_cycles(g)
        if not cycles:
            break
        flip = [f for c in cycles for f in _chosen_in(c, choices, g)]
        if not flip:
            for c in cycles:
                _report(h, e, g, c, col)
            break
        for f in sorted(set(flip)):
            c_node, d_node = choices.pop(f)
            g.succ[f].remove(c_node)
            del g.label[(f, c_node)]
            g.succ[d_node].append(f)
            g.label[(d_node, f)] = "after-drop"
    else:
        unknown = (f"could not place ambiguous unknown-table observations within {max_rounds} "
                   "rounds")
    coverage = cov.build() if unknown is None else nothing_judged(unknown, range(h.n))
    v = col.verdict(stats=stats, unknown=unknown, seconds=time.perf_counter() - t0)
    return replace(v, coverage=coverage)


def _participants(h: History) -> bytearray:
    """Rows that are nodes: ok ops, indeterminate DDL, and failed table ops that
    observed an unknown table. Indeterminate adds join in `_table` if read."""
    part = bytearray(h.n)
    st, k, codes = h.status, h.kind, h.error_code
    for i in range(h.n):
        if st[i] == OK:
            part[i] = 1
        elif st[i] == INFO:
            if k[i] in DDL_KINDS:
                part[i] = 1  # may have happened; adds join in `_table` if read
        elif codes[i] == UNKNOWN_TABLE and h.obj[i] >= 0:
            part[i] = 1
    return part


def _table(
    h: History,
    t: TableIndex,
    e: array[int],
    g: Graph,
    part: bytearray,
    col: Collector,
    choices: dict[int, tuple[int, int]],
    stats: dict[str, int],
    cov: CoverageBuilder,
) -> None:
    inv, status = h.invoke, h.status
    succ, label = g.succ, g.label
    rs, ro = h.res, h.res_off
    single = len(t.creates) <= 1 and len(t.drops) <= 1
    # The set reasoning below holds only if each value was added once (the
    # history format's rule for the set workload); otherwise the table is
    # judged for existence only, as a mutated one is.
    off = h.el_off
    repeated = sum(off[a + 1] - off[a] for a in t.adds) != len(t.writer)
    as_set = not t.mutated and not repeated
    _cover(h, t, single, repeated, cov)
    versions: list[tuple[list[int], list[int]]] | None = None
    if single and as_set:
        versions, seen, dup = _chain(h, t, col)
        cov.judge(t.adds)
        if dup:
            cov.skip(DUPLICATE_READ, dup)
            cov.judge(set(t.reads).difference(dup))
        else:
            cov.judge(t.reads)
    else:
        seen = set().union(*(rs[ro[r] : ro[r + 1]] for r in t.reads))
    for r in t.other_ok:
        if h.kind[r] == READ:
            seen.update(rs[ro[r] : ro[r + 1]])
    # Which indeterminate adds happened: those whose element some read
    # returned (which proves nothing when a value was added twice).
    for a in t.adds:
        if status[a] == INFO and not repeated and any(x in seen for x in h.elements(a)):
            part[a] = 1
    if as_set:
        garbage = seen - t.writer.keys()
        if garbage:
            _garbage(h, t, col, garbage)
    if not single:
        # Several incarnations of one name: which one a read saw is ambiguous,
        # so only write-read edges are sound.
        stats["tables-partial"] += 1
        if repeated:
            return  # which add a read saw is ambiguous too
        for r in t.reads:
            for x in rs[ro[r] : ro[r + 1]]:
                w = t.writer.get(x)
                if w is not None and part[w]:
                    succ[w].append(r)
                    label[(w, r)] = "wr"
        return
    c = t.creates[0] if t.creates else -1
    d = t.drops[0] if t.drops else -1
    okx = [a for a in t.adds if part[a]] + t.reads + t.other_ok
    okx.sort()
    # Existence edges, except where real time already implies them (the time
    # chain orders an op after every op that completed before it began).
    if c >= 0:
        ec = e[c]
        sc = succ[c]
        for x in okx:
            if ec >= inv[x]:
                sc.append(x)
                label[(c, x)] = "created"
        if d >= 0 and ec >= inv[d]:
            sc.append(d)
            label[(c, d)] = "created"
    if d >= 0:
        idd = inv[d]
        for x in okx:
            if e[x] >= idd:
                succ[x].append(d)
                label[(x, d)] = "dropped"
    _unknown(h, t, e, g, c, d, okx, choices, col)
    if t.mutated:
        stats["tables-with-mutations"] += 1
        return
    if repeated:
        return
    if versions is not None:
        _version_edges(h, t, g, versions, seen)


def _cover(h: History, t: TableIndex, single: bool, repeated: bool, cov: CoverageBuilder) -> None:
    """Records which of `t`'s operations this checker decides (module docstring)."""
    kind = h.kind
    existence = t.creates + t.drops + t.unknown
    data = t.adds + t.reads + t.other_ok + t.info_other
    if not single:
        cov.skip(RECREATED, existence + data)
        return
    cov.judge(existence)
    if t.mutated:
        cov.skip(MUTATION, [i for i in data if kind[i] in (UPDATE, DELETE)])
        cov.skip(MUTATED, [i for i in data if kind[i] not in (UPDATE, DELETE)])
        return
    if repeated:
        cov.skip(REPEATED, data)
        return
    # Not mutated, so the rest are filtered reads (and indeterminate reads,
    # which observe nothing and are not counted).
    cov.skip(FILTERED, [r for r in t.other_ok if kind[r] == READ])
    # The adds and full reads: judged by `_table` once `_chain` has looked
    # at every read.


def _garbage(h: History, t: TableIndex, col: Collector, garbage: set[int]) -> None:
    rs, ro = h.res, h.res_off
    for r in t.reads:
        bad = [x for x in rs[ro[r] : ro[r + 1]] if x in garbage]
        if bad:
            f = t.failed_writer.get(bad[0])
            why = (f"its only add, {describe(h, f)}, failed" if f is not None
                   else "no operation added it")
            col.add(
                NAME,
                (r,) if f is None else (r, f),
                f"{describe(h, r)} returned {elements_text(bad)}, which no serial order can "
                f"produce: e.g. {bad[0]}: {why}.",
            )


def _unknown(
    h: History,
    t: TableIndex,
    e: array[int],
    g: Graph,
    c: int,
    d: int,
    okx: list[int],
    choices: dict[int, tuple[int, int]],
    col: Collector,
) -> None:
    """Places each op that found the table unknown before the create or after
    the drop. It must follow the drop when something known to follow the create
    completed before it began; otherwise it goes before the create, and a cycle
    through that choice later flips it (see `check_blackbox`)."""
    if not t.unknown:
        return
    inv = h.invoke
    succ, label = g.succ, g.label
    known_after = min((e[x] for x in okx), default=INF)
    if c >= 0 and h.status[c] == OK:
        known_after = min(known_after, e[c])
    if d >= 0 and h.status[d] == OK:
        known_after = min(known_after, e[d])
    for f in sorted(t.unknown, key=lambda i: (inv[i], i)):
        if c < 0:
            if not okx and not (d >= 0 and h.status[d] == OK):
                continue  # no evidence the table ever existed: nothing to contradict
            if d >= 0:
                succ[d].append(f)
                label[(d, f)] = "after-drop"
                continue
            w = okx[0] if okx else d
            col.add(
                NAME,
                (w, f),
                f"{describe(h, f)} found {t.name!r} unknown, yet the table existed from the "
                f"start ({describe(h, w)} succeeded on it) and no drop of it was attempted.",
            )
            continue
        if known_after < inv[f]:
            if d >= 0:
                succ[d].append(f)
                label[(d, f)] = "after-drop"
                known_after = min(known_after, e[f])
            else:
                succ[f].append(c)
                label[(f, c)] = "before-create"
        else:
            succ[f].append(c)
            label[(f, c)] = "before-create"
            if d >= 0:
                choices[f] = (c, d)


def _chain(
    h: History, t: TableIndex, col: Collector
) -> tuple[list[tuple[list[int], list[int]]] | None, set[int], list[int]]:
    """Full reads of a grow-only set must form a chain under inclusion; each
    distinct result is a version: (its new elements, its reads). Returns the
    versions (None if two reads are incomparable, reported here), the union
    of everything read, and the reads that returned a row more than once
    (a set has each row once: those reads are not judged here)."""
    rs, ro = h.res, h.res_off
    order = sorted([(ro[r + 1] - ro[r], r) for r in t.reads])
    versions: list[tuple[list[int], list[int]]] = []
    prev: set[int] = set()
    prev_read = -1
    dup: list[int] = []
    for size, r in order:
        s = set(rs[ro[r] : ro[r + 1]])
        if len(s) != size:
            dup.append(r)
        if versions and s == prev:
            versions[-1][1].append(r)
            continue
        if not s.issuperset(prev):
            _incomparable(h, t, prev_read, r, prev, s, col)
            union = set().union(*(rs[ro[x] : ro[x + 1]] for x in t.reads))
            return None, union, dup
        versions.append((sorted(s - prev), [r]))
        prev, prev_read = s, r
    return versions, prev, dup


def _version_edges(
    h: History, t: TableIndex, g: Graph, versions: list[tuple[list[int], list[int]]], seen: set[int]
) -> None:
    """Adds of a version's new elements precede its reads; its reads precede
    the next version's adds (they did not see them) and reads."""
    succ = g.succ
    writer = t.writer
    prev_w = -1
    for new, reads in versions:
        # A version read by one op needs no virtual nodes: the read is both.
        if len(reads) == 1:
            v = w = reads[0]
        else:
            v = g.node(VERSION)
            w = g.node(VERSION)
            sv = succ[v]
            for r in reads:
                sv.append(r)
                succ[r].append(w)
        for x in new:
            a = writer.get(x)
            if a is None:
                continue
            succ[a].append(v)
            if prev_w >= 0:
                succ[prev_w].append(a)
        if prev_w >= 0:
            succ[prev_w].append(w)
        prev_w = w
    if prev_w >= 0:
        status = h.status
        last = succ[prev_w]
        for x in sorted(writer.keys() - seen):
            a = writer[x]
            if status[a] == OK:
                last.append(a)


def _incomparable(
    h: History, t: TableIndex, r1: int, r2: int, s1: set[int], s2: set[int], col: Collector
) -> None:
    x1 = min(s1 - s2)
    x2 = min(s2 - s1)
    a1, a2 = t.writer.get(x1), t.writer.get(x2)
    ops = [r1, r2] + [a for a in (a1, a2) if a is not None]
    col.add(
        NAME,
        ops,
        f"{describe(h, r1)} and {describe(h, r2)} saw incomparable contents of {t.name!r}: "
        f"the first has {x1} but not {x2}, the second {x2} but not {x1}. Elements are only "
        f"ever added, so in any serial order one read must see everything the other saw; "
        f"cycle: read 1 → add {x2} (read 1 lacks it) → read 2 (which has it) → add {x1} "
        f"(read 2 lacks it) → read 1 (which has it).",
    )


def _realtime(h: History, e: array[int], g: Graph, part: bytearray) -> None:
    """A completed before B began ⇔ a path A → t_k → … → t_j → B, through one
    time node per run of completions (an invoke at the same instant as a
    completion is concurrent with it, not after it)."""
    inv = h.invoke
    rows = [i for i, p in enumerate(part) if p]
    by_inv = sorted(rows, key=inv.__getitem__)  # stable: ties stay in row order
    by_end = sorted([i for i in rows if e[i] < INF], key=e.__getitem__)
    succ, typ = g.succ, g.typ
    cur = -1
    last_was_end = False
    pc = 0
    nend = len(by_end)
    nxt_end = e[by_end[0]] if nend else INF
    for i in by_inv:
        ti = inv[i]
        if nxt_end < ti:
            if not last_was_end:
                t = len(succ)
                succ.append([])
                typ.append(TIME)
                if cur >= 0:
                    succ[cur].append(t)
                cur = t
                last_was_end = True
            while nxt_end < ti:
                succ[by_end[pc]].append(cur)
                pc += 1
                nxt_end = e[by_end[pc]] if pc < nend else INF
        if cur >= 0:
            succ[cur].append(i)
        last_was_end = False



def _chosen_in(cyc: list[int], choices: dict[int, tuple[int, int]], g: Graph) -> list[int]:
    out = []
    for a, b in zip(cyc, cyc[1:] + cyc[:1], strict=True):
        ch = choices.get(a)
        if ch is not None and ch[0] == b:
            out.append(a)
    return out


def _report(h: History, e: array[int], g: Graph, cyc: list[int], col: Collector) -> None:
    typ = g.typ
    ops = [u for u in cyc if typ[u] == OP]
    if not ops:
        return
    # Rotate so the cycle starts at an operation, then walk op to op.
    k = cyc.index(ops[0])
    cyc = cyc[k:] + cyc[:k]
    steps: list[str] = []
    n = len(cyc)
    i = 0
    while i < n:
        a = cyc[i]
        j = i + 1
        via: set[int] = set()
        while typ[cyc[j % n]] != OP:
            via.add(typ[cyc[j % n]])
            j += 1
        b = cyc[j % n]
        steps.append(_edge_words(h, e, g, a, b, via))
        i = j
    col.add(
        NAME,
        ops,
        "No serial order agrees with real time and with what the operations observed: "
        + "; ".join(steps)
        + f" — a cycle of {len(ops)} operations, so each would have to precede itself.",
    )


def _edge_words(h: History, e: array[int], g: Graph, a: int, b: int, via: set[int]) -> str:
    inv = h.invoke
    if via == {TIME}:
        return (f"{describe(h, a)} completed at {fmt_t(e[a])} before {describe(h, b)} began at "
                f"{fmt_t(inv[b])}")
    lab = g.label.get((a, b))
    name = h.name(a) or h.name(b)
    if lab is None or lab == "wr":
        if h.kind[a] == ADD and h.kind[b] == READ:
            res = set(h.result(b) or ())
            x = next((x for x in h.elements(a) if x in res), None)
            return f"{describe(h, b)} read {x}, so it follows {describe(h, a)}, which added it"
        if h.kind[a] == READ and h.kind[b] == ADD:
            res = set(h.result(a) or ())
            x = next((x for x in h.elements(b) if x not in res), None)
            return f"{describe(h, a)} did not see {x}, so it precedes {describe(h, b)}, which adds it"
        if h.kind[a] == READ and h.kind[b] == READ:
            return (f"{describe(h, a)} saw less of {name!r} than {describe(h, b)}, and elements are "
                    "only ever added, so it comes first")
    if lab == "created":
        return f"{describe(h, b)} needs {name!r} to exist, so it follows its creation {describe(h, a)}"
    if lab == "dropped":
        what = "exist" if h.kind[a] != DROP_TABLE else "be dropped"
        return f"{describe(h, a)} needs {name!r} to {what}, so it precedes its drop {describe(h, b)}"
    if lab == "after-drop":
        return (f"{describe(h, b)} found {name!r} unknown after it had been created, so it follows "
                f"the drop {describe(h, a)}")
    if lab == "before-create":
        return f"{describe(h, a)} found {name!r} unknown, so it precedes its creation {describe(h, b)}"
    return f"{describe(h, a)} precedes {describe(h, b)}"

