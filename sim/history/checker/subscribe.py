"""Checker `subscribe`: every SUBSCRIBE in a history received exactly what the
history's acknowledged writes say it must (issue 36, item 5).

A subscription records its `as_of` and its batches as received
(`sim.history.model.Op`: each batch `[upper, [[ts, value, diff], …]]`, its
lower bound the previous batch's upper, the first's `as_of`). Its table is
replayed white-box as a multiset of values: every acknowledged write applied
at its `write_ts` (an INSERT adds its rows; an UPDATE/DELETE changes the rows
its WHERE matches in the contents just before its `write_ts`, as its read
found them under the write lock), all writes at one timestamp together. Then,
with `F` the subscription's last progress (its final frontier):

- **snapshot** (`subscribe-wrong-snapshot`): the updates at `as_of` are the
  replayed contents at `as_of` (nothing, with `SNAPSHOT = false`);
- **every change exactly once**: for each time `t` in `(as_of, F)` and each
  value, the diffs received at `t` sum to the replayed change at `t` — less
  is `subscribe-missing-update` (a dropped update), more of the same sign
  `subscribe-duplicate-update`, any other difference (a change no committed
  write made then) `subscribe-phantom-update`;
- **timestamp order** (`subscribe-out-of-order`): an update arrives in a
  batch whose range holds its time, never at a time its subscriber was
  already told was complete (below the batch's lower bound), and in
  ascending time within a batch; progress never goes back;
- **nothing beyond the frontier** (`subscribe-beyond-frontier`): no update
  at or beyond its batch's upper (the progress that batch announced);
- **strict serializability** (`not-strict-serializable`): without `AS OF`,
  `as_of` is at least the `write_ts` or `read_ts` of every operation that
  completed before the subscription began.

Fail closed: a subscription is judged only if its table's changes are known
over all of `[as_of, F)`. Not judged, with the reason: tables dropped or
created twice (their incarnations are not modeled), values that are not
integers, a malformed stream, and subscriptions that reach past a time from
which the replay is unknowable — an indeterminate UPDATE/DELETE or a write
without `write_ts` (either may have taken effect at any time after the last
timestamp of an operation that completed before it began), an UPDATE/DELETE
whose row count the replay does not reproduce, or two retracting one row
(both are other checkers' anomalies). An indeterminate INSERT of values
added once is resolved by the evidence: it happened (at its `write_ts`, or
at the time a subscription received it) iff some read or subscription saw
one of its values.

`check_history` runs the other checkers on the history without its
`subscribe` rows (`without_subscriptions`, `remap`): to them a subscription
is nothing they model.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final, final

from sim.history.checker.tables import INF, pauses_gc
from sim.history.checker.verdict import (
    Collector,
    Coverage,
    CoverageBuilder,
    Verdict,
    describe,
    fmt_t,
)
from sim.history.checker.whitebox_data import predicate
from sim.history.model import (
    ADD,
    CREATE_TABLE,
    DELETE,
    DROP_TABLE,
    FAIL,
    INFO,
    NONE,
    OK,
    READ,
    SUBSCRIBE,
    UPDATE,
    History,
    HistoryBuilder,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "BEYOND",
    "DUPLICATE",
    "MISSING",
    "OUT_OF_ORDER",
    "PHANTOM",
    "SNAPSHOT",
    "check_subscribe",
    "remap",
    "subscribe_args",
    "without_subscriptions",
]

MISSING: Final = "subscribe-missing-update"
DUPLICATE: Final = "subscribe-duplicate-update"
PHANTOM: Final = "subscribe-phantom-update"
OUT_OF_ORDER: Final = "subscribe-out-of-order"
BEYOND: Final = "subscribe-beyond-frontier"
SNAPSHOT: Final = "subscribe-wrong-snapshot"
STALE: Final = "not-strict-serializable"

#: Why subscriptions go unjudged (`Verdict.coverage`).
DDL: Final = "its table is dropped or created more than once: incarnations are not modeled"
NOT_INTEGER: Final = "it received rows whose first column is not an integer"
MALFORMED: Final = "its recorded stream is malformed (args without as_of and batches as Op describes)"
UNKNOWABLE: Final = ("it reaches past a time from which its table's changes are unknowable (an indeterminate "
                     "or unplaced write, or one the replay cannot follow)")

#: Examples spelled out per anomaly.
_SHOWN: Final = 4

_Change = tuple[int, int, int]  # (ts, value, diff)


@final
@dataclass
class _Stream:
    """One subscription's recorded stream, parsed."""

    as_of: int
    explicit: bool
    snapshot: bool
    batches: list[tuple[int, list[_Change]]]

    @property
    def frontier(self) -> int:
        """The last progress received (`as_of` if none)."""
        return self.batches[-1][0] if self.batches else self.as_of


@final
@dataclass
class _Model:
    """A table's replayed changes: `changes[k]` at `times[k]` (ascending,
    consolidated, never empty), trustworthy below `horizon`."""

    times: list[int] = field(default_factory=list)
    changes: list[Counter[int]] = field(default_factory=list)
    horizon: int = INF

    def distrust(self, ts: int) -> None:
        self.horizon = min(self.horizon, ts)


@pauses_gc
def check_subscribe(h: History) -> Verdict:
    """Judges every `subscribe` operation of `h` (see the module docstring)."""
    t0 = time.perf_counter()
    col = Collector("subscribe", h.op_id)
    cov = CoverageBuilder()
    stats = {"subscriptions": 0, "judged": 0, "batches": 0, "updates": 0}
    by_table: dict[int, list[int]] = {}
    for i, k in enumerate(h.kind):
        if h.obj[i] >= 0 and (k in (ADD, UPDATE, DELETE, READ, SUBSCRIBE, CREATE_TABLE, DROP_TABLE)):
            by_table.setdefault(h.obj[i], []).append(i)
    bound = _realtime_bound(h)
    for rows in by_table.values():
        subs = [i for i in rows if h.kind[i] == SUBSCRIBE]
        if subs:
            stats["subscriptions"] += len(subs)
            _table(h, rows, subs, bound, col, cov, stats)
    v = col.verdict(stats=stats, seconds=time.perf_counter() - t0)
    return replace(v, coverage=cov.build())


# --- the table's replay ------------------------------------------------------------------------


def _table(
    h: History,
    rows: list[int],
    subs: list[int],
    bound: _Bound,
    col: Collector,
    cov: CoverageBuilder,
    stats: dict[str, int],
) -> None:
    streams: dict[int, _Stream] = {}
    for i in subs:
        parsed = _parse(h, i)
        if isinstance(parsed, str):
            cov.skip(parsed, (i,))
        elif parsed is None:
            cov.judge((i,))  # it never started: it received nothing
        else:
            streams[i] = parsed
    creates = sum(1 for i in rows if h.kind[i] == CREATE_TABLE and h.status[i] != FAIL)
    drops = sum(1 for i in rows if h.kind[i] == DROP_TABLE and h.status[i] != FAIL)
    if creates > 1 or drops:
        cov.skip(DDL, streams)
        return
    model = _replay(h, rows, streams, bound)
    for i, s in streams.items():
        stats["batches"] += len(s.batches)
        stats["updates"] += sum(len(u) for _, u in s.batches)
        _structure(h, i, s, col)
        _stale(h, i, s, bound, col)
    order = sorted(streams, key=lambda i: (streams[i].as_of, i))
    state: Counter[int] = Counter()
    k = 0
    for i in order:
        s = streams[i]
        while k < len(model.times) and model.times[k] <= s.as_of:
            state.update(model.changes[k])
            k += 1
        judged = _content(h, i, s, model, +state, col)
        if judged:
            cov.judge((i,))
            stats["judged"] += 1
        else:
            cov.skip(UNKNOWABLE, (i,))


def _replay(h: History, rows: list[int], streams: dict[int, _Stream], bound: _Bound) -> _Model:
    """The table's changes, from its acknowledged writes (and the
    indeterminate INSERTs the evidence places)."""
    model = _Model()
    placed: list[tuple[int, int]] = []  # (key, row): see below
    info_adds: list[int] = []
    added: Counter[int] = Counter()
    for i in rows:
        k, st, w = h.kind[i], h.status[i], h.write_ts[i]
        if k not in (ADD, UPDATE, DELETE) or st == FAIL:
            continue
        if k == ADD:
            added.update(h.elements(i))
        if st == INFO:
            if k == ADD:
                info_adds.append(i)
            else:  # may have happened, at its write_ts or any time after its floor
                model.distrust(w if w != NONE else bound.floor(h.invoke[i]) + 1)
            continue
        if w == NONE:
            r = h.read_ts[i]
            if k != ADD and h.count[i] in (0, NONE) and r != NONE:
                # An UPDATE/DELETE that matched nothing at its read_ts wrote
                # nothing (a write that changes rows commits at a write_ts).
                placed.append((2 * r + 1, i))
            else:
                model.distrust(bound.floor(h.invoke[i]) + 1)  # happened, but when?
            continue
        placed.append((2 * w, i))
    unique = all(n == 1 for n in added.values())
    for i in info_adds:
        w = h.write_ts[i]
        if not unique:
            model.distrust(w if w != NONE else bound.floor(h.invoke[i]) + 1)
            continue
        exact, seen = _evidence(h, rows, streams, set(h.elements(i)))
        if not seen:
            continue  # no read or subscription saw it: it did not happen (as far as anyone can tell)
        if w != NONE:
            placed.append((2 * w, i))
        elif exact is not None:
            placed.append((2 * exact, i))
        else:
            model.distrust(bound.floor(h.invoke[i]) + 1)
    # Keys: 2 * write_ts for a write, 2 * read_ts + 1 for the read of an
    # UPDATE/DELETE that matched nothing (after the writes at its read_ts).
    placed.sort()
    state: Counter[int] = Counter()
    j = 0
    while j < len(placed):
        key, i = placed[j]
        ts = key >> 1
        if key & 1:
            where = predicate(json.loads(h.args[i] or "{}"))
            if any(n > 0 and (where is None or where(v)) for v, n in state.items()):
                model.distrust(ts + 1)  # the replay has rows it did not find
            j += 1
            continue
        delta: Counter[int] = Counter()
        while j < len(placed) and placed[j][0] == key:
            if not _apply(h, placed[j][1], state, delta):
                model.distrust(ts)
            j += 1
        state.update(delta)
        if any(n < 0 for n in state.values()):
            model.distrust(ts)  # two writes retracted one row: a lost update, named by the whitebox checker
        state = +state
        change = Counter({v: d for v, d in delta.items() if d})
        if change:
            model.times.append(ts)
            model.changes.append(change)
    return model


def _apply(h: History, i: int, state: Counter[int], delta: Counter[int]) -> bool:
    """Adds write `i`'s diffs, on the contents `state` just before its
    timestamp, to `delta`; False if the replay cannot follow it."""
    if h.kind[i] == ADD:
        delta.update(h.elements(i))
        return True
    args = json.loads(h.args[i] or "{}")
    where = predicate(args)
    matched = [v for v, n in sorted(state.items()) if n > 0 and (where is None or where(v)) for _ in range(n)]
    if h.count[i] != NONE and h.count[i] != len(matched):
        return False
    for v in matched:
        delta[v] -= 1
    if h.kind[i] == UPDATE:
        if args.get("add") is not None:
            for v in matched:
                delta[v + int(args["add"])] += 1
        elif matched:
            new = args.get("set")
            if not isinstance(new, int) or isinstance(new, bool):
                return False
            delta[new] += len(matched)
    return True


def _evidence(h: History, rows: list[int], streams: dict[int, _Stream], values: set[int]) -> tuple[int | None, bool]:
    """Whether some ok read or subscription of the table saw one of
    `values` added, and the earliest time a subscription received it as a
    change (after its `as_of`), if one did."""
    seen = False
    exact: int | None = None
    for i in rows:
        if h.kind[i] == READ and h.status[i] == OK and any(x in values for x in h.result(i) or ()):
            seen = True
    for s in streams.values():
        for _, updates in s.batches:
            for ts, v, d in updates:
                if v in values and d > 0:
                    seen = True
                    if ts > s.as_of and (exact is None or ts < exact):
                        exact = ts
    return exact, seen


# --- one subscription -----------------------------------------------------------------------------


def _parse(h: History, i: int) -> _Stream | str | None:
    """Subscription `i`'s stream; None if it never started; a reason if it
    cannot be judged."""
    text = h.args[i]
    if text is None:
        return MALFORMED  # not even its options: whatever it received is not in the history
    try:
        args = json.loads(text)
        if "batches" not in args:
            return None if h.status[i] != OK or "as_of" not in args or args.get("explicit") else MALFORMED
        as_of = args["as_of"]
        batches: list[tuple[int, list[_Change]]] = []
        for upper, updates in args["batches"]:
            got = [(ts, v, d) for ts, v, d in updates]
            if not _ints(upper, *(x for u in got for x in (u[0], u[2]))):
                return MALFORMED
            if any(v is None for _, v, _ in got):
                return NOT_INTEGER
            if not _ints(*(v for _, v, _ in got)):
                return NOT_INTEGER
            batches.append((upper, got))
        if not _ints(as_of):
            return MALFORMED
    except (ValueError, TypeError, KeyError):
        return MALFORMED
    return _Stream(as_of, bool(args.get("explicit")), args.get("snapshot", True) is not False, batches)


def _ints(*xs: object) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) for x in xs)


def _structure(h: History, i: int, s: _Stream, col: Collector) -> None:
    """Timestamp order and the frontier, from the stream alone."""
    lower = s.as_of
    late: list[tuple[int, _Change]] = []  # (lower, update)
    unordered: list[_Change] = []
    beyond: list[tuple[int, _Change]] = []  # (upper, update)
    regress: list[tuple[int, int]] = []
    for n, (upper, updates) in enumerate(s.batches):
        if upper < lower or (n == 0 and upper <= lower):
            regress.append((lower, upper))
        prev = None
        for u in updates:
            ts = u[0]
            if ts < lower:
                late.append((lower, u))
            if ts >= upper:
                beyond.append((upper, u))
            if prev is not None and ts < prev:
                unordered.append(u)
            prev = ts
        lower = max(lower, upper)
    if late or unordered or regress:
        parts = []
        if late:
            lo, u = late[0]
            parts.append(f"{len(late)} updates arrived after the progress had passed their time, e.g. "
                         f"{_fmt(u)} in a batch from {lo}")
        if unordered:
            parts.append(f"{len(unordered)} updates came after a later one in their batch, e.g. {_fmt(unordered[0])}")
        if regress:
            lo, up = regress[0]
            parts.append(f"its progress went from {lo} to {up}")
        col.add(OUT_OF_ORDER, (i,), f"{describe(h, i)} (as_of {s.as_of}) did not receive its changes in "
                f"timestamp order: " + "; ".join(parts) + ".")
    if beyond:
        up, u = beyond[0]
        col.add(BEYOND, (i,), f"{describe(h, i)} (as_of {s.as_of}) received {len(beyond)} updates at or beyond "
                f"the progress their batch announced, e.g. {_fmt(u)} in a batch up to {up}: it was told of "
                "times that were not complete.")


def _stale(h: History, i: int, s: _Stream, bound: _Bound, col: Collector) -> None:
    """A subscription's `as_of` against what completed before it began."""
    if s.explicit:
        return
    got = bound.before(h.invoke[i])
    if got is None or got[0] <= s.as_of:
        return
    ts, j = got
    what = "write_ts" if h.kind[j] != READ else "read_ts"
    col.add(STALE, (j, i), f"{describe(h, i)} began at {fmt_t(h.invoke[i])}, after {describe(h, j)} completed "
            f"at {fmt_t(h.complete[j])}, yet its as_of {s.as_of} is below the other's {what} {ts}: its snapshot "
            "leaves out what was acknowledged before it began.")


def _content(h: History, i: int, s: _Stream, model: _Model, state: Counter[int], col: Collector) -> bool:
    """Compares the received updates with the replay below the horizon;
    True iff the whole stream was comparable."""
    frontier = s.frontier
    got: dict[int, Counter[int]] = {}
    for _, updates in s.batches:
        for ts, v, d in updates:
            if ts < frontier:
                got.setdefault(ts, Counter())[v] += d
    horizon = model.horizon
    if s.batches and s.as_of < horizon:
        want = state if s.snapshot else Counter()
        have = got.get(s.as_of, Counter())
        if +have != want or any(n < 0 for n in have.values()):
            _snapshot_anomaly(h, i, s, want, have, col)
    lo = bisect_right(model.times, s.as_of)
    hi = bisect_left(model.times, min(frontier, horizon))
    want_at = dict(zip(model.times[lo:hi], model.changes[lo:hi], strict=True))
    missing: list[_Change] = []
    duplicate: list[_Change] = []
    phantom: list[_Change] = []
    for ts in sorted(set(want_at) | {t for t in got if s.as_of < t < min(frontier, horizon)}):
        exp, have = want_at.get(ts, Counter()), got.get(ts, Counter())
        for v in sorted(set(exp) | set(have)):
            e, g = exp.get(v, 0), have.get(v, 0)
            if e == g:
                continue
            if e and (g == 0 or ((g > 0) == (e > 0) and abs(g) < abs(e))):
                missing.append((ts, v, e - g))
            elif e and (g > 0) == (e > 0):
                duplicate.append((ts, v, g - e))
            else:
                phantom.append((ts, v, g - e))
    who = f"{describe(h, i)} (as_of {s.as_of}, progress to {frontier})"
    if missing:
        col.add(MISSING, (i,), f"{who} never received {len(missing)} committed changes, e.g. "
                f"{_fmts(missing)}: replaying the acknowledged writes in write_ts order gives them.")
    if duplicate:
        col.add(DUPLICATE, (i,), f"{who} received {len(duplicate)} changes more often than they were "
                f"committed, e.g. {_fmts(duplicate)} once too many.")
    if phantom:
        col.add(PHANTOM, (i,), f"{who} received {len(phantom)} changes that no acknowledged write made at "
                f"that time, e.g. {_fmts(phantom)}.")
    return frontier <= horizon


def _snapshot_anomaly(
    h: History, i: int, s: _Stream, want: Counter[int], have: Counter[int], col: Collector
) -> None:
    less = sorted((want - have).elements())
    more = sorted((have - want).elements())
    parts = []
    if less:
        parts.append(f"it misses {_values(less)}")
    if more:
        parts.append(f"it has {_values(more)} too many")
    if any(n < 0 for n in have.values()):
        parts.append("it retracts rows")
    what = "its table's contents then" if s.snapshot else "nothing (SNAPSHOT = false)"
    col.add(SNAPSHOT, (i,), f"{describe(h, i)} received a snapshot at as_of {s.as_of} that is not {what} "
            f"({_values(sorted(want.elements()))} by replaying the acknowledged writes): " + "; ".join(parts) + ".")


def _fmt(u: _Change) -> str:
    ts, v, d = u
    return f"({v}, {d:+d}) at {ts}"


def _fmts(us: Sequence[_Change]) -> str:
    shown = ", ".join(_fmt(u) for u in us[:_SHOWN])
    return shown + (f" (and {len(us) - _SHOWN} more)" if len(us) > _SHOWN else "")


def _values(xs: Sequence[int]) -> str:
    shown = ", ".join(map(str, xs[:8]))
    return "{" + shown + (f", … ({len(xs)} in all)" if len(xs) > 8 else "") + "}"


# --- real time ------------------------------------------------------------------------------------


@final
class _Bound:
    """The largest timestamp (`write_ts`, or `read_ts` of a read) of the ok
    operations that completed before a given time, and whose it is."""

    def __init__(self, h: History) -> None:
        pts = []
        for i in range(h.n):
            if h.status[i] != OK or h.kind[i] not in (ADD, UPDATE, DELETE, READ):
                continue
            ts = h.read_ts[i] if h.kind[i] == READ else h.write_ts[i]
            if ts != NONE:
                pts.append((h.complete[i], ts, i))
        pts.sort()
        self._ends = [c for c, _, _ in pts]
        best: list[tuple[int, int]] = list(accumulate(((ts, i) for _, ts, i in pts), max))
        self._best = best

    def before(self, t: int) -> tuple[int, int] | None:
        """(timestamp, row) of the largest, or None if nothing completed before `t`."""
        k = bisect_left(self._ends, t)
        return self._best[k - 1] if k else None

    def floor(self, t: int) -> int:
        """The largest timestamp of what completed before `t` (-1 if none):
        an operation that began at `t` writes above it."""
        got = self.before(t)
        return -1 if got is None else got[0]


def _realtime_bound(h: History) -> _Bound:
    return _Bound(h)


# --- the other checkers' view ---------------------------------------------------------------------


def without_subscriptions(h: History) -> tuple[History, list[int] | None]:
    """`h` without its `subscribe` rows, and which row of `h` each row of it
    is (None, and `h` itself, when it has none)."""
    if SUBSCRIBE not in h.kind:
        return h, None
    keep = [i for i, k in enumerate(h.kind) if k != SUBSCRIBE]
    b = HistoryBuilder()
    for i in keep:
        b.add_row(
            h.op_id[i], h.process[i], h.kind[i], h.name(i), h.invoke[i], h.complete[i], h.status[i],
            h.elements(i), h.res[h.res_off[i] : h.res_off[i + 1]] if h.kind[i] == READ and h.status[i] == OK else None,
            h.count[i], h.args[i], h.error_code[i], h.error[i], h.read_ts[i], h.write_ts[i], h.catalog_ts[i],
            h.client[i],
        )
    return b.build(), keep


def remap(v: Verdict, rows: Sequence[int]) -> Verdict:
    """`v`, of a history `without_subscriptions` made, with its coverage in
    the rows of the whole history (`rows[i]` is row i's)."""
    c = v.coverage
    if c is None:
        return v
    judged = frozenset(rows[i] for i in c.judged)
    unjudged = {r: frozenset(rows[i] for i in rs) for r, rs in c.unjudged.items()}
    return replace(v, coverage=Coverage(judged, unjudged))


def subscribe_args(as_of: int, batches: Sequence[tuple[int, Sequence[_Change]]], **options: Any) -> dict[str, Any]:
    """A subscription's recorded `args` (for hand-written histories)."""
    return {**options, "as_of": as_of, "batches": [[up, [list(u) for u in us]] for up, us in batches]}
