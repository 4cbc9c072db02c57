"""Verdicts: what a checker concludes about a history, in words a user can act on.

Every checker returns a `Verdict`: `valid`, `invalid` with named anomalies (each
with the operations involved and a paragraph of explanation), or `unknown` with
the reason (a time or size limit, or evidence the checker cannot use). Anomaly
names are DESIGN.md §7's, so regression tests can assert on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Final, final

from sim.history.model import FAIL, INFO, KINDS, NONE, OK, READ, STATUSES

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from sim.history.model import History

__all__ = [
    "ANOMALY_NAMES",
    "MAX_REPORTED",
    "Anomaly",
    "Coverage",
    "CoverageBuilder",
    "Outcome",
    "Verdict",
    "combine",
    "describe",
    "fmt_t",
    "nothing_judged",
]

ANOMALY_NAMES: Final = (
    "insert-unknown-table",
    "select-unknown-table",
    "stale-read",
    "dropped-object-visible",
    "read-from-future",
    "non-monotonic-read",
    "lost-write",
    "timestamp-regression",
    "not-strict-serializable",
    "not-linearizable",
)

#: Anomalies kept per name and checker; the rest are only counted (a broken
#: history can have millions, and the first few explain the bug).
MAX_REPORTED: Final = 20


class Outcome(StrEnum):
    VALID = "valid"
    INVALID = "invalid"
    UNKNOWN = "unknown"


@final
@dataclass(frozen=True)
class Anomaly:
    """One anomaly: its §7 name, the op ids involved (in the order the
    explanation uses them), the explanation, and which checker found it."""

    name: str
    ops: tuple[int, ...]
    explanation: str
    checker: str
    events: tuple[int, ...] = ()


@final
@dataclass(frozen=True)
class Coverage:
    """What a checker judged of a history's operations (issue 34): the rows
    (operation indices) it decided, and, per reason, the rows it looked at
    but could not decide ("no system timestamps", "over the search bound",
    "out of time", "unsupported operation kind: update", ...). A verdict is
    `valid` only when every completed table operation is in some checker's
    `judged`; rows only in `unjudged` make it `unknown`, with these reasons."""

    judged: frozenset[int] = frozenset()
    unjudged: Mapping[str, frozenset[int]] = field(default_factory=dict)


@final
@dataclass(frozen=True)
class Verdict:
    """A checker's conclusion. `counts` has the number of anomalies per name
    (including those not kept), `stats` what was checked or skipped."""

    checker: str
    outcome: Outcome
    anomalies: tuple[Anomaly, ...] = ()
    reason: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    stats: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    #: The checker found nothing it could judge (no timestamps, no events, too
    #: large). Since issue 34 this only labels the verdict: what decides
    #: valid/unknown is the history's coverage (`combine`).
    skipped: bool = False
    #: Which operations it judged (None: it judges no operations, e.g. the
    #: oracle-events checker, which reads internal events).
    coverage: Coverage | None = None

    @property
    def names(self) -> list[str]:
        """The anomaly names found, sorted."""
        return sorted(self.counts)


@final
class Collector:
    """Accumulates anomalies for one checker, keeping `MAX_REPORTED` per name."""

    def __init__(self, checker: str, op_ids: Sequence[int] | None = None) -> None:
        self.checker = checker
        self._ids = op_ids  # rows -> op ids, when callers pass rows
        self.kept: list[Anomaly] = []
        self.counts: dict[str, int] = {}

    def add(
        self, name: str, ops: Iterable[int], explanation: str, *, events: Iterable[int] = ()
    ) -> None:
        c = self.counts.get(name, 0)
        self.counts[name] = c + 1
        if c < MAX_REPORTED:
            ids = self._ids
            oids = tuple(ops) if ids is None else tuple(ids[i] for i in ops)
            self.kept.append(Anomaly(name, oids, explanation, self.checker, tuple(events)))

    def verdict(
        self,
        *,
        stats: Mapping[str, int] | None = None,
        unknown: str | None = None,
        seconds: float = 0.0,
        skipped: bool = False,
    ) -> Verdict:
        if self.counts:
            outcome = Outcome.INVALID
        elif unknown is not None:
            outcome = Outcome.UNKNOWN
        else:
            outcome = Outcome.VALID
        return Verdict(
            self.checker,
            outcome,
            tuple(self.kept),
            unknown,
            dict(sorted(self.counts.items())),
            dict(sorted((stats or {}).items())),
            seconds,
            skipped and not self.counts,
        )


def combine(verdicts: Sequence[Verdict], *, complete: bool) -> Outcome:
    """The history's outcome (DESIGN.md §7, fail closed): `invalid` if any
    checker found an anomaly; else `unknown` if coverage is incomplete
    (`complete` False: some operation to judge is in no checker's
    `Coverage.judged`) or a checker that judges no operations (`coverage`
    None, e.g. the oracle events) could not decide; else `valid`. A checker's
    own `unknown` or `skipped` is accounted for by its coverage: what it did
    not judge makes the history `unknown` unless another checker judged it."""
    if any(v.outcome is Outcome.INVALID for v in verdicts):
        return Outcome.INVALID
    if not complete:
        return Outcome.UNKNOWN
    if any(v.coverage is None and v.outcome is Outcome.UNKNOWN and not v.skipped for v in verdicts):
        return Outcome.UNKNOWN
    return Outcome.VALID


@final
class CoverageBuilder:
    """Collects a checker's `Coverage` as it goes: `judge` the rows it
    decided, `skip` those it could not, with why. A row judged once is
    judged, whatever reasons were also given for it."""

    def __init__(self) -> None:
        self._judged: set[int] = set()
        self._why: dict[str, set[int]] = {}

    def judge(self, rows: Iterable[int]) -> None:
        self._judged.update(rows)

    def skip(self, reason: str, rows: Iterable[int]) -> None:
        got = self._why.get(reason)
        if got is None:
            self._why[reason] = set(rows)
        else:
            got.update(rows)

    def build(self) -> Coverage:
        judged = frozenset(self._judged)
        why = {r: frozenset(rows - judged) for r, rows in sorted(self._why.items())}
        return Coverage(judged, {r: rows for r, rows in why.items() if rows})


def nothing_judged(reason: str, rows: Iterable[int]) -> Coverage:
    """The coverage of a checker that decided none of `rows`, for `reason`."""
    return Coverage(frozenset(), {reason: frozenset(rows)})


def fmt_t(ns: int) -> str:
    """A history time for explanations: milliseconds with µs precision."""
    if ns == NONE or ns >= 2**62:
        return "never"
    if ns < 1_000_000:
        return f"{ns}ns"
    # Exact to the nanosecond: two events 1 ns apart must not print alike.
    ms, rest = divmod(ns, 1_000_000)
    return f"{ms}.{rest:06d}".rstrip("0").rstrip(".") + "ms"


def _elems(xs: Sequence[int], limit: int = 8) -> str:
    shown = ", ".join(str(x) for x in xs[:limit])
    return "{" + shown + (f", … ({len(xs)} in all)" if len(xs) > limit else "") + "}"


def describe(h: History, i: int) -> str:
    """`op 12 (process 3: read t → {1, 2})`, the way explanations name ops."""
    k = KINDS[h.kind[i]]
    name = h.name(i)
    what = f"{k} {name}" if name is not None else str(k)
    if h.kind[i] == READ and h.status[i] == OK:
        res = h.result(i)
        what += f" → {_elems(list(res or ()))}"
    elif h.el_off[i] != h.el_off[i + 1]:
        els = list(h.elements(i))
        what = f"{k} {els[0] if len(els) == 1 else _elems(els)} to {name}"
    st = h.status[i]
    if st == FAIL:
        code = h.error_code[i]
        what += " failed" if code is None else f" failed {code}"
    elif st == INFO:
        what += " indeterminate"
    return f"op {h.op_id[i]} ({STATUSES[st]}, process {h.process[i]}: {what})"


def elements_text(xs: Sequence[int]) -> str:
    return _elems(xs)
