"""Checker "table": linearizability of each table as a multiset of rows, with
no system timestamp (DESIGN.md §7, issue 34).

A table is an object whose state is "does not exist" or a multiset of integer
rows; INSERT, `UPDATE … SET v | SET x = x + k WHERE …` (its affected-row count
is its result, so compare-and-set is the special case `WHERE = a`), `DELETE …
WHERE`, SELECT (returns the multiset, or its rows matching a WHERE), COUNT,
CREATE/DROP TABLE and "found the table unknown" are its operations. Single-object
operations make linearizability local (Herlihy & Wing's P-compositionality), so
each table is searched on its own, smallest first, with Wing & Gong's algorithm
and Lowe's memoization, as Porcupine does (`multiset_search`). It fails closed:
a table whose search hits the bound (`max_states` configurations or the time
limit) is `unknown`, never `valid`, and so is any operation it cannot model.
This module turns tables into searches, and results into coverage, named
anomalies and explanations.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final, final

from sim.history.checker.multiset_model import (
    HI_ANY,
    LO_ANY,
    OP_ADD,
    OP_COUNT,
    OP_CREATE,
    OP_DELETE,
    OP_DROP,
    OP_GONE,
    OP_READ,
    OP_SET,
    OP_SHIFT,
    OP_THERE,
    Spec,
    State,
    Unsupported,
    parse_where,
    spec_of,
)
from sim.history.checker.multiset_search import (
    OUT_OF_TIME,
    OVER_BOUND,
    SearchResult,
    SearchStop,
    search,
)
from sim.history.checker.tables import ends, pauses_gc
from sim.history.checker.verdict import (
    MAX_REPORTED,
    Collector,
    Coverage,
    Verdict,
    describe,
    elements_text,
    fmt_t,
)
from sim.history.model import ADD, FAIL, KIND_CODE, OK, UPDATE, Kind

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from sim.history.model import History

__all__ = ["DEFAULT_MAX_STATES", "NAME", "NOT_A_TABLE", "OUT_OF_TIME", "OVER_BOUND", "check_multiset"]

NAME: Final = "table"

#: Configurations (linearized set, table state) one table's search may cache
#: before it gives up as "over the search bound". The cache is what grows,
#: about 80 bytes a configuration with register-sized states, so the default
#: caps a search near 160 MB; CPython caches about 200,000 a second, so it
#: is reached about when the default 10 s time limit is: the two bounds meet.
#: Measured: a linearizable 10,000-op register from 10 clients needs ~11
#: configurations an operation (111k); a non-linearizable one, every
#: configuration up to the anomaly, ~60 an operation (300k for op 5,000),
#: and ~200 with 20 clients, which no longer fits (unknown, not valid).
DEFAULT_MAX_STATES: Final = 2_000_000

NOT_A_TABLE: Final = "not a table (a view: its contents depend on a query the history does not carry)"

_G1A: Final = "Adya G1a (aborted read)"
_P4: Final = "Adya P4 / Elle lost-update"
_DUP: Final = "Jepsen set-full: duplicated"
_DERIVED: Final = frozenset(
    KIND_CODE[k]
    for k in (Kind.CREATE_INDEX, Kind.DROP_INDEX, Kind.CREATE_VIEW, Kind.DROP_VIEW,
              Kind.CREATE_CLUSTER, Kind.DROP_CLUSTER)
)


# --- the checker ---------------------------------------------------------------------------


@final
@dataclass
class _Table:
    name: str
    rows: list[int] = field(default_factory=list)


def _tables(h: History) -> tuple[list[_Table], list[int]]:
    """The tables (in object order), and the rows that read or write a view,
    index or cluster (their DDL is no table's operation: left out)."""
    by_obj: dict[int, _Table] = {}
    derived: set[int] = set()
    kind = h.kind
    for i, o in enumerate(h.obj):
        if o < 0:
            continue
        t = by_obj.get(o)
        if t is None:
            t = by_obj[o] = _Table(h.names[o])
        t.rows.append(i)
        if kind[i] in _DERIVED:
            derived.add(o)
    tables = [t for o, t in sorted(by_obj.items()) if o not in derived]
    other = sorted(i for o in derived for i in by_obj[o].rows if kind[i] not in _DERIVED)
    return tables, other


@pauses_gc
def check_multiset(
    h: History,
    *,
    time_limit_s: float = 10.0,
    max_states: int = DEFAULT_MAX_STATES,
    clock: Callable[[], float] = time.monotonic,
) -> Verdict:
    """Checks that each table's operations are linearizable, the table being a
    multiset of rows; names `duplicate-row` and `lost-update` where they apply.

    Tables are searched one at a time, fewest operations first, within one
    `time_limit_s` for all. A table is decided (its rows in
    `coverage.judged`) when it is found linearizable or not (or a named
    anomaly shows it is not); a table whose search needs more than
    `max_states` configurations or the remaining time is unknown (its rows
    in `coverage.unjudged` under "over the search bound" / "out of time"), and
    so are operations the model cannot represent and objects that are not
    tables. The verdict is invalid on any anomaly, else unknown if anything
    went unjudged, else valid; `skipped` when the history names no object.

    Args:
        clock: the deadline's clock; a checker is tooling outside the
            simulation, so it may read the host's monotonic clock.
    """
    t0 = time.perf_counter()
    col = Collector(NAME, h.op_id)
    deadline = clock() + time_limit_s
    e = ends(h)
    tables, other = _tables(h)
    judged: set[int] = set()
    unjudged: dict[str, set[int]] = {}
    if other:
        unjudged[NOT_A_TABLE] = set(other)
    stats = {"tables": len(tables), "tables-decided": 0, "tables-over-bound": 0, "tables-out-of-time": 0,
             "configurations": 0, "ops": 0}
    reasons: list[str] = []
    for t in sorted(tables, key=lambda t: (len(t.rows), t.name)):
        specs: list[Spec] = []
        rows: list[int] = []
        done: list[int] = []  # rows with no effect: judged with the table
        for i in t.rows:
            try:
                sp = spec_of(h, i)
            except Unsupported as exc:
                unjudged.setdefault(str(exc), set()).add(i)
                continue
            if sp is None:
                done.append(i)
            else:
                specs.append(sp)
                rows.append(i)
        stats["ops"] += len(rows)
        named = _named(h, t.name, rows, specs, col)
        order = sorted(range(len(rows)), key=lambda j: (h.invoke[rows[j]], rows[j]))
        rows = [rows[j] for j in order]
        specs = [specs[j] for j in order]
        calls = [h.invoke[i] for i in rows]
        rets = [e[i] for i in rows]
        has_ddl = any(sp[0] in (OP_CREATE, OP_DROP) for sp in specs)
        creates = any(sp[0] == OP_CREATE for sp in specs)
        # Without DDL, a table some op used existed from the start (empty);
        # with a CREATE, it did not (a re-create after a drop shows up as a
        # DROP before the first CREATE: then it existed).
        first_ddl = next((sp[0] for sp in specs if sp[0] in (OP_CREATE, OP_DROP)), None)
        if has_ddl:
            init: State = () if first_ddl == OP_DROP or not creates else None
        else:
            init = () if any(sp[0] not in (OP_GONE,) for sp in specs) else None
        try:
            if clock() > deadline:
                raise SearchStop(OUT_OF_TIME)
            res = search(specs, calls, rets, init, max_states=max_states, deadline=deadline, clock=clock)
        except SearchStop as stop:
            if named:
                judged.update(rows, done)
                stats["tables-decided"] += 1
            else:
                unjudged.setdefault(stop.reason, set()).update(rows, done)
                stats["tables-over-bound" if stop.reason == OVER_BOUND else "tables-out-of-time"] += 1
                limit = f"{max_states:,} configurations" if stop.reason == OVER_BOUND else f"{time_limit_s}s"
                reasons.append(f"{t.name!r}: {stop.reason} ({limit}, {len(rows)} operations)")
            continue
        stats["configurations"] += res.configs
        stats["tables-decided"] += 1
        judged.update(rows, done)
        if not res.ok:
            if col.counts.get("not-linearizable", 0) < MAX_REPORTED:
                _explain(h, t.name, rows, specs, t.rows, e, res, col)
            else:
                col.add("not-linearizable", [rows[res.stuck]], "")  # counted only

    v = col.verdict(
        stats=stats,
        unknown=_unknown_reason(reasons, unjudged),
        seconds=time.perf_counter() - t0,
        skipped=not tables and not other,
    )
    cov = Coverage(frozenset(judged), {r: frozenset(s) for r, s in sorted(unjudged.items())})
    return replace(v, coverage=cov)


def _unknown_reason(reasons: list[str], unjudged: dict[str, set[int]]) -> str | None:
    parts = list(reasons)
    for r, s in sorted(unjudged.items()):
        if r not in (OVER_BOUND, OUT_OF_TIME):
            parts.append(f"{len(s)} operations unjudged: {r}")
    return "; ".join(parts) or None


# --- named anomalies -----------------------------------------------------------------------


def _named(h: History, name: str, rows: Sequence[int], specs: Sequence[Spec], col: Collector) -> bool:
    """Flags `duplicate-row` and `lost-update` (rules on counts alone, which
    hold whatever the order); True if it found one."""
    supply: dict[int, float] = {}
    unbounded = False
    for sp in specs:
        code = sp[0]
        if code == OP_ADD:
            for x in sp[4]:
                supply[x] = supply.get(x, 0) + 1
        elif code == OP_SET:
            supply[sp[4]] = supply.get(sp[4], 0) + (sp[5] if sp[5] >= 0 else float("inf"))
        elif code == OP_SHIFT:
            unbounded = True
    if unbounded:
        return False
    found = False
    writers: dict[int, list[int]] = {}

    def writers_of(x: int) -> list[int]:
        got = writers.get(x)
        if got is None:
            got = writers[x] = [i for i, sp in zip(rows, specs, strict=True)
                                if (sp[0] == OP_ADD and x in sp[4]) or (sp[0] == OP_SET and sp[4] == x)]
        return got

    # duplicate-row: a read with more copies of a row than were ever written.
    for i, sp in zip(rows, specs, strict=True):
        if sp[0] != OP_READ or len(sp[4]) < 2 or len(set(sp[4])) == len(sp[4]):
            continue
        res = sp[4]
        for x, c in _runs(res):
            have = supply.get(x, 0)
            if c >= 2 and c > have:
                ws = writers_of(x)
                how = ("no operation that may have taken effect wrote it" if not ws else
                       f"the operations that may have written it ({'; '.join(describe(h, w) for w in ws[:4])}) "
                       f"account for at most {int(have)}")
                col.add(
                    "duplicate-row",
                    [i, *ws[:4]],
                    f"{describe(h, i)} returned {x} {c} times from {name!r}, but {how}: a read cannot "
                    f"see a row more often than it was written, in any order [{_DUP}].",
                )
                found = True
                break
    # lost-update: UPDATEs that matched the same old value (WHERE = a) claim
    # more rows of it than were ever there to match.
    consumers: dict[int, list[tuple[int, int]]] = {}
    for i, sp in zip(rows, specs, strict=True):
        if sp[0] in (OP_SET, OP_SHIFT, OP_DELETE) and sp[1] == sp[2] and sp[5] > 0 and h.status[i] == OK:
            if sp[0] == OP_SET and sp[4] == sp[1]:
                continue  # SET a WHERE = a: puts back what it took
            consumers.setdefault(sp[1], []).append((i, sp[5]))
    for a, cs in sorted(consumers.items()):
        used = sum(c for _, c in cs)
        have = supply.get(a, 0)
        ups = [i for i, _ in cs if h.kind[i] == UPDATE]
        if used > have and len(ups) >= 2:
            ws = writers_of(a)
            src = (f"only {int(have)} row(s) of {a} were ever written ({'; '.join(describe(h, w) for w in ws[:3])})"
                   if ws else f"no operation that may have taken effect wrote {a}")
            col.add(
                "lost-update",
                [*ups[:4], *ws[:3]],
                f"{len(ups)} UPDATEs of {name!r} matched the old value {a} (WHERE = {a}) and all claim "
                f"success: {'; '.join(_detail(h, i) for i in ups[:4])}; together they changed {used} "
                f"row(s) of {a}, but {src}, so in any order one of them read a value another had "
                f"already replaced: an update is lost [{_P4}].",
            )
            found = True
    return found


def _runs(xs: Sequence[int]) -> Iterable[tuple[int, int]]:
    """(value, copies) of a sorted sequence."""
    k = 0
    while k < len(xs):
        x = xs[k]
        j = bisect_right(xs, x, k)
        yield x, j - k
        k = j


# --- explanations --------------------------------------------------------------------------


def _where_text(sp: Spec) -> str:
    lo, hi, ne = sp[1], sp[2], sp[3]
    terms = []
    if lo == hi:
        terms.append(f"= {lo}")
    else:
        if lo != LO_ANY:
            terms.append(f">= {lo}")
        if hi != HI_ANY:
            terms.append(f"<= {hi}")
    terms.extend(f"<> {x}" for x in ne)
    return " WHERE " + " AND ".join(f"x {t}" for t in terms) if terms else ""


def _detail(h: History, i: int) -> str:
    """`describe` with the statement's arguments and affected-row count."""
    base = describe(h, i)
    try:
        sp = spec_of(h, i)
    except Unsupported:
        return base
    if sp is None:
        return base
    code = sp[0]
    n = "" if sp[5] < 0 else f", {sp[5]} row{'s' if sp[5] != 1 else ''}"
    if code == OP_SET:
        return f"{base} [SET {sp[4]}{_where_text(sp)}{n}]"
    if code == OP_SHIFT:
        return f"{base} [SET x = x + {sp[4]}{_where_text(sp)}{n}]"
    if code == OP_DELETE:
        return f"{base} [DELETE{_where_text(sp)}{n}]"
    if code == OP_COUNT:
        return f"{base} [count(*){_where_text(sp)} = {sp[5]}]"
    if code == OP_READ and _where_text(sp):
        return f"{base} [{_where_text(sp).strip()}]"
    return base


def _state_text(s: State) -> str:
    return "does not exist" if s is None else "holds " + elements_text(list(s))


def _needs(sp: Spec) -> str:
    code = sp[0]
    if code == OP_READ:
        return f"returned {elements_text(list(sp[4]))}{' of the rows' + _where_text(sp) if _where_text(sp) else ''}"
    if code == OP_COUNT:
        return f"counted {sp[5]} rows{_where_text(sp)}"
    if code in (OP_SET, OP_SHIFT, OP_DELETE) and sp[5] >= 0:
        return f"reports {sp[5]} row{'s' if sp[5] != 1 else ''} matching{_where_text(sp) or ' (every row)'}"
    if code == OP_CREATE:
        return "created the table, so it did not exist"
    if code == OP_GONE:
        return "found the table unknown (42P01)"
    if code == OP_THERE:
        return "found the table already existing (42P07)"
    return "needs the table to exist"


def _explain(
    h: History,
    name: str,
    rows: Sequence[int],
    specs: Sequence[Spec],
    all_rows: Sequence[int],
    e: Sequence[int],
    res: SearchResult,
    col: Collector,
) -> None:
    """Reports `not-linearizable` at the search's deepest point: the shortest
    failing prefix ends with op X's completion; no order of the ops invoked
    before it lets X happen."""
    x = res.stuck
    i = rows[x]
    inv = h.invoke
    states = " or ".join(_state_text(s) for s in res.states[:3]) + (" (or others)" if len(res.states) > 3 else "")
    # The writes that completed before X began: what real time forces first.
    before = sorted(
        (r for r, sp in zip(rows, specs, strict=True) if sp[0] not in (OP_READ, OP_COUNT) and h.status[r] == OK
         and e[r] < inv[i]),
        key=lambda r: (e[r], r),
    )[-3:]
    concurrent = [rows[j] for j in res.pending if rows[j] != i][:4]
    text = (
        f"The {len(rows)} operations on {name!r} have no linearization. The shortest failing prefix "
        f"is the {res.prefix} operations invoked before {_detail(h, i)} completed at {fmt_t(e[i])}: "
        f"in every order of them that real time and their results allow, {name!r} {states} "
        f"where that op must take effect, and it {_needs(specs[x])}, which is possible in none of these states."
    )
    if before:
        text += " It began at " + fmt_t(inv[i]) + ", after " + "; ".join(
            f"{_detail(h, r)} completed at {fmt_t(e[r])}" for r in reversed(before)
        ) + "."
    if concurrent:
        text += " Ops concurrent with it, in any order: " + "; ".join(_detail(h, r) for r in concurrent) + "."
    g1a = _aborted(h, all_rows, specs, x)
    if g1a:
        text += " " + g1a
    col.add("not-linearizable", [i, *before[::-1], *concurrent], text)


def _aborted(h: History, all_rows: Sequence[int], specs: Sequence[Spec], x: int) -> str | None:
    """Adya's G1a, if op x is a read of a value that only failed writes of
    its table (`all_rows`) wrote."""
    sp = specs[x]
    if sp[0] != OP_READ or any(s[0] == OP_SHIFT for s in specs):
        return None
    made = {v for s in specs if s[0] == OP_ADD for v in s[4]} | {s[4] for s in specs if s[0] == OP_SET}
    for v in sp[4]:
        if v in made:
            continue
        for r in all_rows:
            if h.status[r] != FAIL:
                continue
            try:
                f = _spec_ignoring_status(h, r)
            except Unsupported:
                continue
            if f is not None and ((f[0] == OP_ADD and v in f[4]) or (f[0] == OP_SET and f[4] == v)):
                return (f"[{_G1A}: {v} was written only by {describe(h, r)}, which failed and so "
                        "never took effect.]")
    return None


def _spec_ignoring_status(h: History, i: int) -> Spec | None:
    """What op i would have done had it succeeded (for G1a)."""
    k = h.kind[i]
    if k == ADD:
        return (OP_ADD, 0, 0, (), tuple(sorted(h.elements(i))), -1)
    if k == UPDATE:
        text = h.args[i]
        args = json.loads(text) if text else {}
        v = args.get("set") if isinstance(args, dict) else None
        if isinstance(v, int) and not isinstance(v, bool):
            return (OP_SET, *parse_where(args), v, -1)
    return None
