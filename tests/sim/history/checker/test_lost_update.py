"""Checker 3 on read-then-writes: an UPDATE/DELETE reads at its read_ts and
writes at its write_ts, so a row it matched must still be there when its write
applies — else two of them retracted the same row and one update is lost (the
known-bad `no_write_lock`)."""

from __future__ import annotations

from typing import Any

from sim.history.checker.verdict import Outcome
from sim.history.checker.whitebox import check_whitebox
from sim.history.model import History, Kind, Op, Status

_INC: dict[str, Any] = {"add": 1}


def _op(i: int, kind: Kind, t0: int, t1: int, *, rts: int | None = None, wts: int | None = None,
        els: tuple[int, ...] = (), res: tuple[int, ...] | None = None,
        args: dict[str, Any] | None = None, status: Status = Status.OK) -> Op:
    return Op(i, i, kind, "c", t0, None if status is Status.INFO else t1, status, elements=els,
              result=res, args=args, read_ts=rts, write_ts=wts)


def _history(*ops: Op) -> History:
    return History.from_ops(ops)


def test_updates_under_the_write_lock_are_valid() -> None:
    # Each UPDATE reads where the previous one wrote: no write in between.
    h = _history(
        _op(0, Kind.ADD, 0, 10, wts=1, els=(0,)),
        _op(1, Kind.UPDATE, 20, 30, rts=1, wts=2, args=_INC),
        _op(2, Kind.UPDATE, 25, 40, rts=2, wts=3, args=_INC),
        _op(3, Kind.READ, 50, 60, rts=3, res=(2,)),
    )
    v = check_whitebox(h)
    assert v.outcome == Outcome.VALID, v.anomalies


def test_two_updates_that_read_the_same_row_lose_one() -> None:
    # Both read {0} at read_ts 1; the second write retracts 0 again.
    h = _history(
        _op(0, Kind.ADD, 0, 10, wts=1, els=(0,)),
        _op(1, Kind.UPDATE, 20, 30, rts=1, wts=2, args=_INC),
        _op(2, Kind.UPDATE, 21, 40, rts=1, wts=3, args=_INC),
    )
    v = check_whitebox(h)
    assert v.names == ["not-strict-serializable"]
    (a,) = v.anomalies
    assert a.ops == (1, 2)
    assert a.explanation.startswith("lost update: op 2 (ok, process 2: update c) matched {0}")
    assert "op 1 (ok, process 1: update c) already changed it at write_ts 2" in a.explanation


def test_two_updates_in_one_group_commit_lose_one() -> None:
    # Without the lock both writes can share a group commit (one write_ts).
    h = _history(
        _op(0, Kind.ADD, 0, 10, wts=1, els=(0,)),
        _op(1, Kind.UPDATE, 20, 30, rts=1, wts=2, args=_INC),
        _op(2, Kind.DELETE, 21, 30, rts=1, wts=2),
    )
    assert check_whitebox(h).names == ["not-strict-serializable"]


def test_an_insert_between_read_and_write_is_not_a_lost_update() -> None:
    # Rows the update did not match may come and go: only a matched row that
    # vanished shows a double retraction.
    h = _history(
        _op(0, Kind.ADD, 0, 10, wts=1, els=(0,)),
        _op(1, Kind.UPDATE, 20, 40, rts=1, wts=3, args={"add": 1, "where": [["=", 0]]}),
        _op(2, Kind.ADD, 21, 30, wts=2, els=(7,)),
        _op(3, Kind.READ, 50, 60, rts=3, res=(1, 7)),
    )
    v = check_whitebox(h)
    assert v.outcome == Outcome.VALID, v.anomalies


def test_after_an_indeterminate_update_nothing_is_judged() -> None:
    # The info UPDATE may have landed at any time from its write_ts on: the
    # replayed state is unknowable there, so no lost update can be claimed.
    h = _history(
        _op(0, Kind.ADD, 0, 10, wts=1, els=(0,)),
        _op(1, Kind.UPDATE, 20, 30, rts=1, wts=2, args=_INC, status=Status.INFO),
        _op(2, Kind.UPDATE, 21, 40, rts=1, wts=3, args=_INC),
    )
    v = check_whitebox(h)
    assert v.outcome == Outcome.VALID, v.anomalies
