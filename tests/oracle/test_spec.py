"""One specification, two checkers: the conformance suite's `check_history` and
the trace checker `check_oracle_events` must flag exactly the same violations of
`oracle.spec.BOUNDS` when fed the same sequence of oracle calls — one breaking
sequence per bound, valid ones (concurrent calls included), and random ones,
where both must also match a literal, quadratic reading of the table."""

from __future__ import annotations

import re
from typing import TypeAlias

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from oracle.spec import BOUNDS, Bound, Compare, Order
from oracle.testing import OpRecord, check_history
from sim.history.checker.oracle_events import check_oracle_events
from sim.history.checker.verdict import MAX_REPORTED
from sim.history.model import Event, EventKind, Status

#: One call: (operation, invoke ns, complete ns, timestamp, ok).
Call: TypeAlias = tuple[str, int, int, int | None, bool]
#: A flagged violation: (bound name, position of the call, position of its cause).
Flag: TypeAlias = tuple[str, int, int | None]

W, R, P, A = "write_ts", "read_ts", "peek_write_ts", "apply_write"
TIMELINE = "user"


def c(op: str, invoke: int, complete: int, ts: int | None, ok: bool = True) -> Call:
    return (op, invoke, complete, ts, ok)


def conformance_flags(calls: list[Call], floor: int) -> set[Flag]:
    """What `oracle.testing.check_history` flags, by position in `calls`."""
    records = [OpRecord("c", op, i, e, ts, ok) for op, i, e, ts, ok in calls]
    pos = {id(r): n for n, r in enumerate(records)}
    out = set()
    for v in check_history(records, read_floor=floor):
        assert v.kind == v.bound.kind
        out.add((v.bound.name, pos[id(v.op)], None if v.cause is None else pos[id(v.cause)]))
    return out


def trace_flags(calls: list[Call], floor: int) -> set[Flag]:
    """What the trace checker flags on the same calls recorded as internal
    events (`seq` = position), as `ObservedOracle` would record them."""
    events = [
        Event(seq=n, kind=str(EventKind(f"oracle.{op}")), component=f"oracle:{TIMELINE}",
              start_ns=i, end_ns=e, status=Status.OK if ok else Status.FAIL,
              timeline=TIMELINE, ts=ts, actor="coordinator")
        for n, (op, i, e, ts, ok) in enumerate(calls)
    ]
    verdict = check_oracle_events(events, read_floors={TIMELINE: floor})
    assert sum(verdict.counts.values()) == len(verdict.anomalies)  # none went unreported
    out = set()
    for a in verdict.anomalies:
        assert a.name == "timestamp-regression"
        m = re.search(r"bound `([^`]+)`", a.explanation)
        assert m is not None, a.explanation
        *cause, op = a.events
        out.add((m.group(1), op, cause[0] if cause else None))
    return out


def both(calls: list[Call], floor: int = 0) -> set[Flag]:
    got, trace = conformance_flags(calls, floor), trace_flags(calls, floor)
    assert got == trace, f"conformance {sorted(got, key=str)} != trace {sorted(trace, key=str)}"
    return got


# --- one breaking sequence per bound -----------------------------------------------------

#: Bound name -> (calls, read floor, the (call, cause) positions it must flag: exactly these).
BREAKS: dict[str, tuple[list[Call], int, set[tuple[int, int | None]]]] = {
    "write_ts > write_ts": ([c(W, 0, 1, 10), c(W, 2, 3, 10)], 0, {(1, 0)}),
    "write_ts > read_ts": ([c(R, 0, 1, 5), c(W, 2, 3, 5)], 5, {(1, 0)}),
    "write_ts > peek_write_ts": ([c(P, 0, 1, 8), c(W, 2, 3, 8)], 0, {(1, 0)}),
    "write_ts > apply_write": ([c(A, 0, 1, 20), c(W, 2, 3, 20)], 0, {(1, 0)}),
    # Overlapping allocations: no real-time order, yet they must differ.
    "write_ts != write_ts": ([c(W, 0, 10, 7), c(W, 5, 15, 7)], 0, {(1, 0)}),
    "read_ts >= apply_write": ([c(A, 0, 1, 7), c(R, 2, 3, 6)], 0, {(1, 0)}),
    "read_ts >= read_ts": ([c(R, 0, 1, 7), c(R, 2, 3, 6)], 7, {(1, 0)}),
    # Above the applied 5 (which was invoked before the read returned).
    "read_ts <= max apply_write": ([c(A, 0, 1, 5), c(R, 2, 3, 9)], 0, {(1, 0)}),
    "peek_write_ts >= write_ts": ([c(W, 0, 1, 9), c(P, 2, 3, 8)], 0, {(1, 0)}),
    "peek_write_ts >= apply_write": ([c(A, 0, 1, 9), c(P, 2, 3, 8)], 0, {(1, 0)}),
    "peek_write_ts >= peek_write_ts": ([c(P, 0, 1, 9), c(P, 2, 3, 8)], 0, {(1, 0)}),
    # read_ts <= write_ts always: a peek sees at least what an earlier read did.
    "peek_write_ts >= read_ts": ([c(R, 0, 1, 9), c(P, 2, 3, 8)], 9, {(1, 0)}),
}


@pytest.mark.parametrize("bound", BOUNDS, ids=lambda b: b.name)
def test_each_bound_is_flagged_alike_by_both_checkers(bound: Bound) -> None:
    calls, floor, expected = BREAKS[bound.name]  # a new bound needs a sequence here
    assert both(calls, floor) == {(bound.name, op, cause) for op, cause in expected}


def test_every_breaking_sequence_names_a_bound_of_the_table() -> None:
    assert set(BREAKS) == {b.name for b in BOUNDS}


def test_read_above_the_starting_point_with_nothing_applied_has_no_cause() -> None:
    assert both([c(W, 0, 1, 7), c(R, 2, 3, 7)]) == {("read_ts <= max apply_write", 1, None)}


def test_one_call_can_break_several_bounds_and_each_is_named() -> None:
    calls = [c(A, 0, 1, 5), c(R, 2, 3, 5), c(P, 4, 5, 5), c(W, 6, 7, 5)]
    assert both(calls) == {
        ("write_ts > read_ts", 3, 1),
        ("write_ts > peek_write_ts", 3, 2),
        ("write_ts > apply_write", 3, 0),
    }


def test_the_strongest_cause_is_named() -> None:
    calls = [c(W, 0, 1, 3), c(W, 2, 3, 9), c(W, 4, 5, 6), c(P, 6, 7, 5)]
    assert both(calls) == {
        ("write_ts > write_ts", 2, 1),
        ("peek_write_ts >= write_ts", 3, 1),
    }


# --- valid sequences: nothing flagged ----------------------------------------------------

VALID: dict[str, tuple[list[Call], int]] = {
    "sequential": (
        [
            c(W, 0, 1, 10),
            c(A, 2, 3, 10),
            c(R, 4, 5, 10),
            c(P, 6, 7, 10),
            c(W, 8, 9, 11),
            c(R, 10, 11, 10),
            c(P, 12, 13, 11),
            c(A, 14, 15, 8),
            c(R, 16, 17, 10),
        ],
        0,
    ),
    # Overlapping calls are not ordered: each may take effect first.
    "read overlaps the apply it misses": ([c(A, 0, 10, 7), c(R, 5, 6, 3)], 3),
    "peek overlaps an allocation": ([c(W, 0, 10, 9), c(P, 5, 6, 8)], 0),
    "read overlaps an allocation": ([c(R, 0, 10, 4), c(W, 5, 6, 5), c(R, 5, 12, 4)], 4),
    "overlapping allocations differ": ([c(W, 0, 10, 5), c(W, 1, 9, 6), c(W, 2, 3, 7)], 0),
    # A tie in time is concurrency: the clock cannot order the two.
    "apply returns as the read begins": ([c(A, 0, 5, 7), c(R, 5, 6, 3)], 3),
    "write returns as the next begins": ([c(W, 0, 5, 7), c(W, 5, 6, 6)], 0),
    # A failed call bounds nothing from below, but may have applied its write.
    "failed apply may have applied": (
        [c(A, 0, 1, 50, ok=False), c(R, 2, 3, 50), c(R, 4, 5, 50), c(W, 6, 7, 51)],
        0,
    ),
    "failed calls bound nothing": (
        [c(W, 0, 1, 9, ok=False), c(A, 2, 3, 9, ok=False), c(R, 4, 5, 0), c(P, 6, 7, 1)],
        0,
    ),
    # One that failed with an unknown argument may have applied anything.
    "failed apply of an unknown timestamp": ([c(A, 0, 1, None, ok=False), c(R, 2, 3, 99)], 0),
    "the starting point is readable": ([c(R, 0, 1, 100), c(P, 2, 3, 100)], 100),
}


@pytest.mark.parametrize("case", VALID)
def test_valid_sequences_are_flagged_by_neither(case: str) -> None:
    calls, floor = VALID[case]
    assert both(calls, floor) == set()


# --- random sequences: both agree, and with the table read literally ------------------


def by_definition(calls: list[Call], floor: int) -> set[Flag]:
    """The table read literally, pair by pair (quadratic): a check of
    `oracle.spec.check`'s sweeps, which must name the same strongest cause."""
    answered = [n for n, (_, _, _, ts, ok) in enumerate(calls) if ok and ts is not None]
    found = (
        _broken(bound, calls, answered, b, floor)
        for bound in BOUNDS
        for b in answered
        if calls[b][0] == bound.op
    )
    return {f for f in found if f is not None}


def _broken(
    bound: Bound, calls: list[Call], answered: list[int], b: int, floor: int
) -> Flag | None:
    """The flag if call `b` breaks `bound`, naming its strongest cause."""
    _, b_inv, b_end, b_ts, _ = calls[b]
    assert b_ts is not None
    of_kind = [n for n in range(len(calls)) if calls[n][0] == bound.by]
    if bound.order is Order.REAL_TIME:
        before = [n for n in of_kind if n in answered and calls[n][2] < b_inv]
        if not before:
            return None
        best = max(before, key=lambda n: (calls[n][3] or 0, -calls[n][2], -n))
        limit = calls[best][3] or 0
        broken = b_ts <= limit if bound.compare is Compare.GREATER else b_ts < limit
        return (bound.name, b, best) if broken else None
    if bound.order is Order.CONCURRENT:
        for n in sorted(of_kind, key=lambda n: (calls[n][1], n)):  # the earliest is named
            _, inv, end, ts, _ = calls[n]
            overlap = not (end < b_inv or b_end < inv)
            named_once = (inv, n) < (b_inv, b) or bound.op != bound.by
            if n in answered and n != b and ts == b_ts and overlap and named_once:
                return (bound.name, b, n)
        return None
    maybe = [n for n in of_kind if calls[n][1] <= b_end]  # Order.MAY_PRECEDE
    if any(calls[n][3] is None for n in maybe):
        return None
    above = [n for n in maybe if (calls[n][3] or 0) > floor]
    top = max(above, key=lambda n: (calls[n][3] or 0, -calls[n][1], -n)) if above else None
    ceiling = floor if top is None else calls[top][3] or 0
    return (bound.name, b, top) if b_ts > ceiling else None


_calls = st.lists(
    st.tuples(
        st.sampled_from([W, R, P, A]),
        st.integers(0, 20),
        st.integers(0, 5),
        st.one_of(st.none(), st.integers(0, 8)),
        st.booleans(),
    ).map(lambda t: c(t[0], t[1], t[1] + t[2], t[3], t[4] and t[3] is not None)),
    max_size=14,
)


@given(calls=_calls, floor=st.integers(0, 4))
def test_random_sequences_are_flagged_alike_and_as_the_table_says(
    calls: list[Call], floor: int
) -> None:
    expected = by_definition(calls, floor)
    assume(len(expected) <= MAX_REPORTED)  # the trace checker keeps only that many
    assert both(calls, floor) == expected
