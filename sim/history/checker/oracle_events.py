"""Checker 4: the timestamp oracle's guarantees (seed 000) over the internal-
event table, per timeline and in real-time order:

- `write_ts` returns more than every timestamp returned by a `read_ts`,
  `write_ts` or `peek_write_ts`, or passed to an `apply_write`, that completed
  before it was called;
- `read_ts` returns at least every `apply_write` argument and every `read_ts`
  that completed before it was called;
- `peek_write_ts` returns at least every `write_ts` and `apply_write` before it.

A successful catalog append applies its new upper on the `catalog` timeline
(seed 001), so it counts as an `apply_write` there. Violations are
`timestamp-regression`.

And the contract of `apply_write` itself ("marks a write at write_ts as
completed"): an `apply_write(ts)` must start only after the same coordinator's
table append at `ts` on that timeline (a `table-append` event) completed successfully. Reads
block on the tables' uppers, so one that runs early costs latency rather than
answers — but from then on `read_ts` names a timestamp whose data may never
exist, which is exactly what the oracle promises not to hand out.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from sim.history.checker.verdict import Collector, Verdict, fmt_t
from sim.history.model import EventKind, Status

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sim.history.model import Event

__all__ = ["check_oracle_events"]

_W: Final = str(EventKind.ORACLE_WRITE_TS)
_R: Final = str(EventKind.ORACLE_READ_TS)
_P: Final = str(EventKind.ORACLE_PEEK_WRITE_TS)
_A: Final = str(EventKind.ORACLE_APPLY_WRITE)
_C: Final = str(EventKind.CATALOG_APPEND)
_T: Final = str(EventKind.TABLE_APPEND)
#: For each call, the released kinds whose maximum bounds its result, and
#: whether the bound is strict.
_BOUNDS: Final = {_W: ((_W, _R, _P, _A), True), _R: ((_R, _A), False), _P: ((_W, _P, _A), False)}


def _ev(e: Event) -> str:
    who = f" by {e.actor}" if e.actor else ""
    return f"event {e.seq} ({e.kind}{who} on {e.timeline!r} → {e.ts})"


def check_oracle_events(events: Sequence[Event]) -> Verdict:
    t0 = time.perf_counter()
    col = Collector("oracle")
    per: dict[str, list[Event]] = {}
    appends: dict[tuple[str | None, str | None, int], Event] = {}
    applies: list[Event] = []
    for ev in events:
        if ev.kind == _T and ev.ts is not None:
            appends.setdefault((ev.actor, ev.timeline, ev.ts), ev)
        if ev.status != Status.OK or ev.ts is None:
            continue
        if ev.kind == _A:
            applies.append(ev)
        k = ev.kind
        if k == _C:
            k = _A
            tl = ev.timeline or "catalog"
        elif k in (_W, _R, _P, _A):
            tl = ev.timeline or ""
        else:
            continue
        per.setdefault(tl, []).append(ev)
    checked = 0
    for tl in sorted(per):
        evs = per[tl]
        by_start = sorted(evs, key=lambda x: (x.start_ns, x.seq))
        by_end = sorted(
            (x for x in evs if x.end_ns is not None), key=lambda x: (x.end_ns or 0, x.seq)
        )
        best: dict[str, Event] = {}
        p = 0
        for ev in by_start:
            while p < len(by_end) and (by_end[p].end_ns or 0) < ev.start_ns:
                r = by_end[p]
                rk = _A if r.kind == _C else r.kind
                cur = best.get(rk)
                if cur is None or (r.ts or 0) > (cur.ts or 0):
                    best[rk] = r
                p += 1
            bound = _BOUNDS.get(ev.kind)
            if bound is None:
                continue
            checked += 1
            kinds, strict = bound
            prior = [best[k] for k in kinds if k in best]
            if not prior:
                continue
            top = max(prior, key=lambda x: (x.ts or 0, -x.seq))
            ts, bts = ev.ts or 0, top.ts or 0
            if ts < bts or (strict and ts == bts):
                rel = "greater than" if strict else "at least"
                col.add(
                    "timestamp-regression",
                    top.ops + ev.ops,
                    f"{_ev(ev)} was called at {fmt_t(ev.start_ns)}, after {_ev(top)} completed at "
                    f"{fmt_t(top.end_ns or 0)}, but returned {ts}, which is not {rel} {bts}: the "
                    "oracle's operations must be linearizable (seed 000).",
                    events=(top.seq, ev.seq),
                )
    checked += _apply_after_append(applies, appends, col)
    return col.verdict(
        stats={"oracle-calls": checked, "timelines": len(per)},
        unknown=None if checked else "no oracle calls in the internal-event table",
        seconds=time.perf_counter() - t0,
        skipped=checked == 0,
    )


def _apply_after_append(
    applies: list[Event],
    appends: dict[tuple[str | None, str | None, int], Event],
    col: Collector,
) -> int:
    """Flags each `apply_write(ts)` that started before its coordinator's
    table append at `ts` had durably completed. Returns how many it checked."""
    checked = 0
    for ev in applies:
        app = appends.get((ev.actor, ev.timeline, ev.ts or 0))
        if app is None:
            continue  # not a group commit's timestamp (e.g. the catalog timeline)
        checked += 1
        durable = app.status == Status.OK and app.end_ns is not None
        # Events are recorded as they end: at one instant, seq says which came first.
        if durable and ((app.end_ns or 0), app.seq) < (ev.start_ns, ev.seq):
            continue
        when = (
            f"completed only at {fmt_t(app.end_ns or 0)}"
            if durable
            else "never completed"
            if app.end_ns is None
            else f"failed at {fmt_t(app.end_ns)}"
        )
        col.add(
            "timestamp-regression",
            app.ops + ev.ops,
            f"{_ev(ev)} started at {fmt_t(ev.start_ns)}, but the table append at {ev.ts} "
            f"({_ev(app)}) {when}: apply_write marks a write as completed (seed 000), so from "
            f"then on read_ts could name a timestamp whose data was not durable.",
            events=(app.seq, ev.seq),
        )
    return checked
