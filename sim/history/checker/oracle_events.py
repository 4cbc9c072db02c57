"""Checker 4: the timestamp oracle's guarantees (seed 000) over the internal-
event table, per timeline and in real-time order.

The guarantees are `oracle.spec.BOUNDS`, judged by `oracle.spec.check` — the
same table and function the oracle's conformance suite uses. Every broken
bound is a `timestamp-regression` naming the bound. A successful catalog append
applies its new upper on the `catalog` timeline (seed 001), so it counts as an
`apply_write` there. The bound `read_ts <= max apply_write` needs each
timeline's starting `read_ts`, which a trace does not record (a restarted
in-memory oracle resumes at its persisted upper): it runs only for the
timelines in `read_floors`.

And the contract of `apply_write` itself ("marks a write at write_ts as
completed"): an `apply_write(ts)` must start only after the same coordinator's
table append at `ts` on that timeline (a `table-append` event) completed successfully. Reads
block on the tables' uppers, so one that runs early costs latency rather than
answers — but from then on `read_ts` names a timestamp whose data may never
exist, which is exactly what the oracle promises not to hand out.

And the order group commit relies on: a coordinator's table appends reach
storage in `write_ts` order, so an append that starts after another of the
same coordinator's appends (on that timeline) completed carries a larger
timestamp. One that does not finds every table's upper already past its
timestamp: it can only conflict, and the coordinator fences itself (what
happens with more than one group commit in flight whose `write_ts` calls
overlap).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from oracle.spec import BOUNDS, Compare, Operation, Violation, check
from sim.history.checker.verdict import Collector, Verdict, fmt_t
from sim.history.model import EventKind, Status

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sim.history.model import Event

__all__ = ["check_oracle_events"]

_T: Final = str(EventKind.TABLE_APPEND)
#: The events that are oracle calls, as `oracle.spec` names them.
_OPS: Final = {
    str(EventKind.ORACLE_WRITE_TS): Operation.WRITE_TS,
    str(EventKind.ORACLE_READ_TS): Operation.READ_TS,
    str(EventKind.ORACLE_PEEK_WRITE_TS): Operation.PEEK_WRITE_TS,
    str(EventKind.ORACLE_APPLY_WRITE): Operation.APPLY_WRITE,
    str(EventKind.CATALOG_APPEND): Operation.APPLY_WRITE,
}
_BOUNDED: Final = frozenset(b.op for b in BOUNDS)
_WORDS: Final = {Compare.GREATER: "greater than", Compare.AT_LEAST: "at least"}


@final
@dataclass(frozen=True, slots=True)
class _Call:
    """An event as `oracle.spec.check` reads it (an `oracle.spec.Timed`)."""

    op: str
    invoke_ns: int
    complete_ns: int | None
    ts: int | None
    ok: bool
    event: Event


def _ev(e: Event) -> str:
    who = f" by {e.actor}" if e.actor else ""
    return f"event {e.seq} ({e.kind}{who} on {e.timeline!r} → {e.ts})"


def check_oracle_events(
    events: Sequence[Event], *, read_floors: Mapping[str, int] | None = None
) -> Verdict:
    """Judges the oracle calls among `events` by `oracle.spec`, and each
    `apply_write` by the table append it must follow.

    Args:
        read_floors: `read_ts` at the start of the trace, per timeline, where
            known (and the oracle never restarted): enables the bound
            `read_ts <= max apply_write` there.
    """
    t0 = time.perf_counter()
    col = Collector("oracle")
    per: dict[str, list[_Call]] = {}
    appends: dict[tuple[str | None, str | None, int], Event] = {}
    by_writer: dict[tuple[str | None, str | None], list[Event]] = {}
    applies: list[Event] = []
    for ev in events:
        if ev.kind == _T and ev.ts is not None:
            appends.setdefault((ev.actor, ev.timeline, ev.ts), ev)
            by_writer.setdefault((ev.actor, ev.timeline), []).append(ev)
        op = _OPS.get(ev.kind)
        if op is None:
            continue
        ok = ev.status == Status.OK
        if ok and ev.ts is not None and ev.kind == EventKind.ORACLE_APPLY_WRITE:
            applies.append(ev)
        default = "catalog" if ev.kind == EventKind.CATALOG_APPEND else ""
        call = _Call(str(op), ev.start_ns, ev.end_ns, ev.ts, ok, ev)
        per.setdefault(ev.timeline or default, []).append(call)
    checked = 0
    for tl in sorted(per):
        calls = per[tl]
        checked += sum(1 for c in calls if c.op in _BOUNDED and c.ok and c.ts is not None)
        found = check(calls, read_floor=None if read_floors is None else read_floors.get(tl))
        for v in sorted(found, key=lambda v: (v.op.event.start_ns, v.op.event.seq)):
            _report(v, col)
    checked += _apply_after_append(applies, appends, col)
    ordered = 0
    for writer in sorted(by_writer, key=lambda k: (k[0] or "", k[1] or "")):
        ordered += _appends_in_order(by_writer[writer], col)
    return col.verdict(
        stats={"oracle-calls": checked, "timelines": len(per), "table-appends": ordered},
        unknown=None if checked or ordered else "no oracle calls in the internal-event table",
        seconds=time.perf_counter() - t0,
        skipped=checked == 0 and ordered == 0,
    )


def _report(v: Violation[_Call], col: Collector) -> None:
    """One broken bound as a `timestamp-regression`, in the words of the trace."""
    ev, b = v.op.event, v.bound
    cause = None if v.cause is None else v.cause.event
    why = f"{b.reason} (bound `{b.name}`, seed 000)"
    if b.compare is Compare.AT_MOST_MAX:
        by = "the timeline's starting point" if cause is None else _ev(cause)
        text = (
            f"{_ev(ev)} returned {ev.ts} at {fmt_t(ev.end_ns or 0)}, above {v.limit}, the "
            f"largest timestamp applied by then ({by}): {why}."
        )
    elif cause is None:  # only the ceiling can be bounded by the starting point alone
        raise AssertionError(f"{b.name} reported without a cause")
    elif b.compare is Compare.DIFFERENT:
        text = (
            f"{_ev(ev)} and {_ev(cause)} overlapped in time and both returned {ev.ts}: {why}."
        )
    else:
        text = (
            f"{_ev(ev)} was called at {fmt_t(ev.start_ns)}, after {_ev(cause)} completed at "
            f"{fmt_t(cause.end_ns or 0)}, but returned {ev.ts}, which is not "
            f"{_WORDS[b.compare]} {v.limit}: {why}; the oracle's operations must be "
            "linearizable."
        )
    seqs = (ev.seq,) if cause is None else (cause.seq, ev.seq)
    ops = ev.ops if cause is None else cause.ops + ev.ops
    col.add("timestamp-regression", ops, text, events=seqs)


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


def _appends_in_order(appends: list[Event], col: Collector) -> int:
    """Flags each table append (of one coordinator, on one timeline) that
    started strictly after a successful append at a larger timestamp had
    completed. Returns how many it checked."""
    done = sorted((e for e in appends if e.status == Status.OK and e.end_ns is not None),
                  key=lambda e: (e.end_ns or 0, e.seq))
    k = 0
    top: Event | None = None  # the largest-ts append completed before the current start
    for ev in sorted(appends, key=lambda e: (e.start_ns, e.seq)):
        while k < len(done) and (done[k].end_ns or 0) < ev.start_ns:
            if top is None or (done[k].ts or 0) > (top.ts or 0):
                top = done[k]
            k += 1
        if top is None or (top.ts or 0) <= (ev.ts or 0):
            continue
        col.add(
            "timestamp-regression",
            top.ops + ev.ops,
            f"{_ev(ev)} started at {fmt_t(ev.start_ns)}, after {_ev(top)} had completed at "
            f"{fmt_t(top.end_ns or 0)}: a coordinator's appends must reach storage in write_ts "
            f"order (group commit: one in flight, or timestamps allocated in append order), "
            f"else every table's upper is already past {ev.ts} and the append can only "
            "conflict — the coordinator fences itself and its writers' outcome is lost.",
            events=(top.seq, ev.seq),
        )
    return len(appends)
