"""Runs the checkers over a history, combines their verdicts, and says what
they covered (DESIGN.md §7, fail closed): `valid` only when every operation
to judge is in some checker's `Coverage.judged`, else `unknown` with, per
table, what was not judged and why; `invalid` on any anomaly.

A `subscribe` is an operation on its table, judged by checker `subscribe`
alone; the others run on the history without them.

The operations to judge are the operations on a table (not a view, index or
cluster: what a view returns depends on its query, which a history does not
carry) that are evidence about it:

- every `ok` create-table, drop-table, add, read, update and delete: its
  result is an observation to explain;
- every `info` one except a read or subscribe: an indeterminate write may
  have taken effect, which changes what later reads may see, so a checker
  that cannot model it has not judged its table (an indeterminate read
  observed nothing);
- every failure that observed the catalog: 42P01 (unknown table) of an add,
  read, update, delete or drop-table, and 42P07 (duplicate table) of a
  create-table.

Other failures definitely did not take effect and observed nothing the
checkers model; they, and indeterminate reads, are counted per table as
"not required" and do not hold a verdict back.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, final

from sim.history.checker.blackbox import check_blackbox
from sim.history.checker.linear import check_linear
from sim.history.checker.multiset import check_multiset
from sim.history.checker.named import check_named
from sim.history.checker.oracle_events import check_oracle_events
from sim.history.checker.subscribe import check_subscribe, remap, without_subscriptions
from sim.history.checker.tables import pauses_gc
from sim.history.checker.verdict import (
    MAX_REPORTED,
    Collector,
    Outcome,
    Verdict,
    combine,
    nothing_judged,
)
from sim.history.checker.whitebox import check_whitebox
from sim.history.model import (
    ADD,
    CREATE_TABLE,
    DELETE,
    DROP_TABLE,
    FAIL,
    INFO,
    KINDS,
    OK,
    READ,
    STATUSES,
    SUBSCRIBE,
    UNKNOWN_TABLE,
    UPDATE,
    Status,
    validate,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sim.history.model import Event, History

__all__ = ["CHECKERS", "LINEAR_MAX_OPS", "RENAMED_CHECKERS", "Report", "TableCoverage", "check_history", "coverage_of", "rows_to_judge"]

#: "table" is the timestamp-free linearizability checker of tables as
#: multisets of rows (`sim.history.checker.multiset`, issue 34); "subscribe"
#: judges SUBSCRIBE streams (`sim.history.checker.subscribe`, issue 36), the
#: one kind of operation the others do not see.
CHECKERS: Final = ("named", "blackbox", "whitebox", "oracle", "linear", "table", "subscribe")
#: Former checker names, still accepted where a user names checkers
#: (`coordsim check --checker`), with a note on stderr: "replay" now names only
#: the Spark job (`coordsim spark replay`); the checker that replays the
#: system's timestamps is "whitebox", the sibling of "blackbox" (issue 37).
RENAMED_CHECKERS: Final = {"replay": "whitebox"}
#: Checker 5 is exponential; above this many ops it is skipped unless forced
#: (its operations then count as not judged by it).
LINEAR_MAX_OPS: Final = 2_000
#: Tables whose coverage gap `Report.coverage_lines` spells out.
SHOWN_TABLES: Final = 20


@final
@dataclass(frozen=True)
class TableCoverage:
    """One table's coverage. `ops` operations to judge (module docstring),
    `judged` of them by at least one checker; `by_checker` how many each
    checker judged (a row may count for several); `why`, per checker and
    reason, how many of the rows *no* checker judged that checker gave that
    reason for (a row counts once per checker that gave one; rows for which
    no checker gave one are under "-"); `unjudged_ops` the first op ids of
    those rows; `not_required` the table's other operations: failures that
    observed nothing and indeterminate reads."""

    table: str
    ops: int
    judged: int
    by_checker: Mapping[str, int]
    why: Mapping[str, Mapping[str, int]]
    unjudged_ops: tuple[int, ...] = ()
    not_required: int = 0

    @property
    def complete(self) -> bool:
        return self.judged == self.ops

    def reasons(self) -> list[str]:
        """`checker: reason (n)` for each reason given, in checker order (the
        reasons under "-" without the prefix)."""
        return [f"{c}: {r} ({n})" if c != "-" else f"{r} ({n})" for c, rs in self.why.items() for r, n in rs.items()]

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "ops": self.ops,
            "judged": self.judged,
            "not_judged": self.ops - self.judged,
            "by_checker": dict(self.by_checker),
            "why_not_judged": {c: dict(rs) for c, rs in self.why.items()},
            "not_judged_op_ids": list(self.unjudged_ops),
            "not_required": self.not_required,
        }


@final
@dataclass(frozen=True)
class Report:
    """The checkers' verdicts on one history, their combined `outcome`, and
    `coverage`: per table (in the order tables first appear), what was to
    judge and what was judged. `not_tables` counts operations on views,
    indexes and clusters, which are neither judged nor required."""

    outcome: Outcome
    verdicts: tuple[Verdict, ...]
    coverage: tuple[TableCoverage, ...]
    not_tables: int = 0

    @property
    def names(self) -> list[str]:
        return sorted({n for v in self.verdicts for n in v.counts})

    @property
    def ops_to_judge(self) -> int:
        return sum(t.ops for t in self.coverage)

    @property
    def ops_judged(self) -> int:
        return sum(t.judged for t in self.coverage)

    @property
    def complete(self) -> bool:
        """Every operation to judge was judged by some checker."""
        return all(t.complete for t in self.coverage)

    def coverage_summary(self) -> str:
        """One line: operations judged, and the tables not fully judged with
        a reason (for a verdict column, a progress line, a list of runs)."""
        head = f"{self.ops_judged:,} of {self.ops_to_judge:,} operations judged"
        gaps = [t for t in self.coverage if not t.complete]
        if not gaps:
            return head
        parts = []
        for t in gaps[:3]:
            reasons = t.reasons()
            more = f"; {len(reasons) - 1} more reasons" if len(reasons) > 1 else ""
            parts.append(f"{t.table} {t.ops - t.judged:,} ({reasons[0]}{more})" if reasons else t.table)
        rest = f", and {len(gaps) - 3} more tables" if len(gaps) > 3 else ""
        return f"{head}; not judged: " + ", ".join(parts) + rest

    def gap_lines(self) -> list[str]:
        """Each table not fully judged (the first `SHOWN_TABLES`): what was
        not judged, by whom the rest was, and every reason given."""
        gaps = [t for t in self.coverage if not t.complete]
        lines = []
        for t in gaps[:SHOWN_TABLES]:
            by = ", ".join(f"{c} {n:,}" for c, n in t.by_checker.items() if n) or "no checker"
            eg = ", ".join(map(str, t.unjudged_ops[:8]))
            lines.append(f"{t.table}: {t.ops - t.judged:,} of {t.ops:,} operations not judged "
                         f"(e.g. ops {eg}); judged by {by}")
            lines += [f"  {r}" for r in t.reasons()]
        if len(gaps) > SHOWN_TABLES:
            lines.append(f"… and {len(gaps) - SHOWN_TABLES} more tables not fully judged")
        return lines

    def coverage_lines(self) -> list[str]:
        """The coverage in a few lines: the total, then `gap_lines` indented,
        and the operations on objects that are not tables."""
        full = sum(1 for t in self.coverage if t.complete)
        lines = [f"coverage: {self.ops_judged:,} of {self.ops_to_judge:,} operations judged; "
                 f"{full:,} of {len(self.coverage):,} tables fully"]
        lines += [f"  {line}" for line in self.gap_lines()]
        if self.not_tables:
            lines.append(f"  not tables (views, indexes, clusters; not judged): {self.not_tables:,} operations")
        return lines

    def coverage_json(self) -> dict[str, Any]:
        """The coverage as `--json` and verdict.json carry it."""
        return {
            "complete": self.complete,
            "ops": self.ops_to_judge,
            "judged": self.ops_judged,
            "not_tables": self.not_tables,
            "tables": [t.to_json() for t in self.coverage],
        }


def check_history(
    h: History,
    events: Sequence[Event] = (),
    *,
    checkers: Sequence[str] = CHECKERS,
    linear_time_limit_s: float = 10.0,
    linear_max_ops: int = LINEAR_MAX_OPS,
) -> Report:
    """Validates `h` (raising `HistoryError` on malformed input), runs the
    chosen checkers in a fixed order, and combines their verdicts with the
    coverage (`combine`): invalid on any anomaly, valid only if every row of
    `rows_to_judge` is in some checker's `coverage.judged`, else unknown. A
    checker left out judges nothing."""
    unknown = sorted(set(checkers) - set(CHECKERS))
    if unknown:
        raise ValueError(f"unknown checkers {unknown}; choose from {list(CHECKERS)}")
    validate(h)
    out: list[Verdict] = []
    # The other checkers do not see SUBSCRIBE rows (nothing they model);
    # their coverage is mapped back to `h`'s rows.
    rest, rows = without_subscriptions(h)
    for name in CHECKERS:
        if name not in checkers:
            continue
        if name == "subscribe":
            out.append(check_subscribe(h))
        elif rows is None:
            out.append(_run_one(name, h, events, linear_time_limit_s, linear_max_ops))
        else:
            out.append(remap(_run_one(name, rest, events, linear_time_limit_s, linear_max_ops), rows))
    tables, not_tables = coverage_of(h, out)
    outcome = combine(out, complete=all(t.complete for t in tables))
    return Report(outcome, tuple(out), tables, not_tables)


def _run_one(
    name: str, h: History, events: Sequence[Event], linear_time_limit_s: float, linear_max_ops: int
) -> Verdict:
    """Checker `name` (any but "subscribe") on `h`."""
    if name == "named":
        return check_named(h)
    if name == "blackbox":
        return check_blackbox(h)
    if name == "whitebox":
        return check_whitebox(h)
    if name == "oracle":
        return check_oracle_events(events)
    if name == "table":
        # The same time limit as checker 5's, and its own search bound.
        return check_multiset(h, time_limit_s=linear_time_limit_s)
    if h.n <= linear_max_ops:
        return check_linear(h, time_limit_s=linear_time_limit_s)
    t0 = time.perf_counter()
    v = Collector("linear").verdict(
        unknown=f"{h.n} operations exceed checker 5's limit of {linear_max_ops}",
        skipped=True, seconds=time.perf_counter() - t0)
    cov = nothing_judged(f"over the limit of {linear_max_ops} operations", range(h.n))
    return replace(v, coverage=cov)


@pauses_gc
def coverage_of(h: History, verdicts: Sequence[Verdict]) -> tuple[tuple[TableCoverage, ...], int]:
    """Per table, the operations to judge and what the verdicts' coverage
    says of them; and the number of operations on objects that are not
    tables. Set operations and `Counter` keep the work in C: this runs over
    every row of a million-operation history."""
    want, tables, table_ops, not_tables = rows_to_judge(h)
    obj = h.obj
    per_table = Counter(map(obj.__getitem__, want))
    judged_all: set[int] = set()
    by_checker: dict[str, Counter[int]] = {}
    for v in verdicts:
        if v.coverage is None:
            continue
        mine = want.intersection(v.coverage.judged)
        judged_all |= mine
        by_checker[v.checker] = Counter(map(obj.__getitem__, mine))
    unjudged = want - judged_all
    why: dict[int, dict[str, dict[str, int]]] = {}
    explained: set[int] = set()
    for v in verdicts:
        if v.coverage is None:
            continue
        for reason, rows in v.coverage.unjudged.items():
            hit = unjudged.intersection(rows)
            explained |= hit
            for o, n in sorted(Counter(map(obj.__getitem__, hit)).items()):
                why.setdefault(o, {}).setdefault(v.checker, {})[reason] = n
    # Rows no checker gave a reason for (none that ran looks at their kind):
    # say which kind, e.g. "a failed drop-table (42P01)".
    kind, status, codes = h.kind, h.status, h.error_code
    for i in sorted(unjudged - explained):
        st = STATUSES[status[i]]
        what = f"{_STATUS_WORDS[st]} {KINDS[kind[i]].value}" + (f" ({codes[i]})" if st is Status.FAIL else "")
        reasons = why.setdefault(obj[i], {}).setdefault("-", {})
        key = f"no checker that ran models {what}"
        reasons[key] = reasons.get(key, 0) + 1
    examples: dict[int, list[int]] = {}
    for i in sorted(unjudged):
        ex = examples.setdefault(obj[i], [])
        if len(ex) < MAX_REPORTED:
            ex.append(h.op_id[i])
    missing = Counter(map(obj.__getitem__, unjudged))
    out = []
    for o in tables:
        n = per_table.get(o, 0)
        out.append(TableCoverage(
            h.names[o], n, n - missing.get(o, 0),
            {c: cnt.get(o, 0) for c, cnt in by_checker.items()},
            why.get(o, {}), tuple(examples.get(o, ())), table_ops[o] - n,
        ))
    return tuple(out), not_tables


_STATUS_WORDS: Final = {Status.OK: "an ok", Status.FAIL: "a failed", Status.INFO: "an indeterminate"}
#: SQLSTATE of CREATE TABLE on a name that exists.
DUPLICATE_TABLE: Final = "42P07"
#: The kinds of operation on a table (the others name views, indexes, clusters).
_TABLE_KINDS: Final = frozenset({ADD, READ, UPDATE, DELETE, CREATE_TABLE, DROP_TABLE, SUBSCRIBE})
#: Failures that observed the catalog: (kind, SQLSTATE).
_OBSERVED: Final = frozenset(
    {(k, UNKNOWN_TABLE) for k in (ADD, READ, UPDATE, DELETE, DROP_TABLE)} | {(CREATE_TABLE, DUPLICATE_TABLE)}
)


def rows_to_judge(h: History) -> tuple[set[int], list[int], Counter[int], int]:
    """The rows to judge (module docstring); the tables (object indices, in
    first-appearance order) with their operations in all; and the number of
    operations on objects that are not tables. A name some operation uses as
    a view, index or cluster is not a table (as `index_tables` has it)."""
    obj, kind, status, codes = h.obj, h.kind, h.status, h.error_code
    derived = {o for o, k in zip(obj, kind, strict=True) if k not in _TABLE_KINDS}
    want = {
        i for i, (o, k, st) in enumerate(zip(obj, kind, status, strict=True))
        if o >= 0 and o not in derived and (
            st == OK or (st == INFO and k not in (READ, SUBSCRIBE)) or (st == FAIL and (k, codes[i]) in _OBSERVED)
        )
    }
    named = Counter(o for o in obj if o >= 0)
    table_ops = Counter({o: n for o, n in named.items() if o not in derived})
    not_tables = sum(n for o, n in named.items() if o in derived)
    return want, sorted(table_ops), table_ops, not_tables
