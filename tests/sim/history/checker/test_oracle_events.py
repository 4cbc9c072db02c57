"""Checker 4: the oracle's guarantees (seed 000) over internal events."""

from __future__ import annotations

from sim.history.checker.oracle_events import check_oracle_events
from sim.history.checker.verdict import Outcome
from sim.history.model import Event, EventKind, Status


def _ev(seq: int, kind: EventKind, start: int, end: int | None, ts: int, *, timeline: str = "user",
        status: Status = Status.OK) -> Event:
    return Event(seq=seq, kind=str(kind), component="oracle", start_ns=start, end_ns=end,
                 status=status, timeline=timeline, ts=ts)


W, R, P, A = (EventKind.ORACLE_WRITE_TS, EventKind.ORACLE_READ_TS,
              EventKind.ORACLE_PEEK_WRITE_TS, EventKind.ORACLE_APPLY_WRITE)


def test_a_correct_oracle_is_valid() -> None:
    events = [
        _ev(0, W, 0, 10, 5),
        _ev(1, A, 20, 30, 5),
        _ev(2, R, 40, 50, 5),
        _ev(3, W, 60, 70, 6),
        _ev(4, P, 80, 90, 6),
        _ev(5, R, 65, 95, 5),  # overlaps the write: may return the old read_ts
        _ev(6, W, 0, 5, 1, timeline="catalog"),  # timelines are independent
    ]
    v = check_oracle_events(events)
    assert v.outcome == Outcome.VALID, v.anomalies


def test_read_ts_below_an_applied_write_is_a_regression() -> None:
    v = check_oracle_events([_ev(0, A, 0, 10, 7), _ev(1, R, 20, 30, 6)])
    assert v.names == ["timestamp-regression"]
    assert v.anomalies[0].events == (0, 1)
    assert "returned 6, which is not at least 7" in v.anomalies[0].explanation


def test_write_ts_not_above_a_previous_read_ts_is_a_regression() -> None:
    v = check_oracle_events([_ev(0, R, 0, 10, 7), _ev(1, W, 20, 30, 7)])
    assert v.names == ["timestamp-regression"]


def test_split_brain_oracles_hand_out_the_same_write_ts() -> None:
    # Two in-memory oracles (a second coordinator beside the first) each count
    # from the same timestamp-store value: real-time order exposes the duplicate.
    v = check_oracle_events([_ev(0, W, 0, 10, 8), _ev(1, W, 20, 30, 8)])
    assert v.outcome == Outcome.INVALID


def test_catalog_append_counts_as_apply_write_on_the_catalog_timeline() -> None:
    append = Event(seq=0, kind=str(EventKind.CATALOG_APPEND), component="catalog", start_ns=0,
                   end_ns=10, ts=4, timeline="catalog")
    v = check_oracle_events([append, _ev(1, R, 20, 30, 3, timeline="catalog")])
    assert v.names == ["timestamp-regression"]


def test_failed_and_unfinished_calls_bound_nothing() -> None:
    v = check_oracle_events([
        _ev(0, A, 0, 10, 9, status=Status.FAIL),
        _ev(1, A, 0, None, 9),
        _ev(2, R, 20, 30, 3),
    ])
    assert v.outcome == Outcome.VALID


def test_no_events_is_skipped_not_unknown() -> None:
    v = check_oracle_events([])
    assert v.skipped
    assert v.reason


def test_peek_below_an_earlier_read_ts_is_a_regression() -> None:
    # read_ts <= write_ts always: a peek under an earlier read means the next
    # write_ts could land on a timestamp already readable.
    v = check_oracle_events([_ev(0, R, 0, 10, 9), _ev(1, P, 20, 30, 8)])
    assert v.names == ["timestamp-regression"]
    assert v.anomalies[0].events == (0, 1)
    assert "bound `peek_write_ts >= read_ts`" in v.anomalies[0].explanation


def test_overlapping_write_ts_calls_must_differ() -> None:
    v = check_oracle_events([_ev(0, W, 0, 20, 8), _ev(1, W, 10, 30, 8), _ev(2, W, 15, 16, 9)])
    assert v.names == ["timestamp-regression"]
    assert v.anomalies[0].events == (0, 1)
    assert "overlapped in time and both returned 8" in v.anomalies[0].explanation


def test_read_beyond_applied_needs_the_starting_point() -> None:
    # A restarted in-memory oracle resumes at its persisted upper, above every
    # applied write, and a trace does not record where a timeline started: the
    # bound applies only to timelines whose starting read_ts the caller gives.
    events = [_ev(0, A, 0, 10, 5), _ev(1, R, 20, 30, 1000)]
    assert check_oracle_events(events).outcome == Outcome.VALID
    assert check_oracle_events(events, read_floors={"user": 1000}).outcome == Outcome.VALID
    v = check_oracle_events(events, read_floors={"user": 0})
    assert v.names == ["timestamp-regression"]
    assert v.anomalies[0].events == (0, 1)
    assert "above 5, the largest timestamp applied by then" in v.anomalies[0].explanation


def test_a_failed_apply_write_may_have_applied() -> None:
    events = [_ev(0, A, 0, 10, 50, status=Status.FAIL), _ev(1, R, 20, 30, 50)]
    assert check_oracle_events(events, read_floors={"user": 0}).outcome == Outcome.VALID


def _append(seq: int, start: int, end: int | None, ts: int, *, actor: str = "a",
            status: Status = Status.OK) -> Event:
    return Event(seq=seq, kind=str(EventKind.TABLE_APPEND), component="storage", start_ns=start,
                 end_ns=end, status=status, timeline="user", ts=ts, actor=actor)


def test_appends_in_write_ts_order_are_valid() -> None:
    # Overlapping appends are fine while none starts after a later one ended
    # (event-loop's on-loop oracle: several commits in flight, in order);
    # another coordinator's appends are its own sequence.
    v = check_oracle_events([
        _append(0, 0, 10, 5), _append(1, 5, 20, 6), _append(2, 20, 30, 7),
        _append(3, 40, 50, 3, actor="b"),
    ])
    assert v.outcome == Outcome.VALID, v.anomalies
    assert v.stats["table-appends"] == 4


def test_an_append_after_a_later_one_completed_is_a_regression() -> None:
    # Two commits in flight whose write_ts calls overlapped: the one at 30
    # reached storage first, so the append at 29 can only conflict.
    v = check_oracle_events([_append(0, 0, 10, 30), _append(1, 11, 12, 29)])
    assert v.names == ["timestamp-regression"]
    assert v.anomalies[0].events == (0, 1)
    assert "appends must reach storage in write_ts order" in v.anomalies[0].explanation


def test_appends_at_one_instant_or_after_a_failed_append_bound_nothing() -> None:
    # Same virtual instant: a trace cannot say which came first. A failed
    # append moved no upper.
    v = check_oracle_events([
        _append(0, 0, 10, 30), _append(1, 10, 10, 29),
        _append(2, 20, 25, 40, status=Status.FAIL), _append(3, 30, 35, 31),
    ])
    assert v.outcome == Outcome.VALID, v.anomalies
