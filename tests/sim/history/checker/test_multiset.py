"""Checker "table" (`check_multiset`): linearizability of tables as multisets
of rows, without system timestamps (issue 34). Registers (a one-row table
with UPDATE … SET and SELECT), compare-and-set registers (UPDATE … WHERE = a
with its row count) and sets are special cases, each with hand-computed
verdicts, and the history format's multisets. The search at large (against
brute force, on generated histories, the issue's 10,000-operation registers):
tests/sim/history/checker/test_multiset_search.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sim.history.checker.multiset import (
    NOT_A_TABLE,
    OUT_OF_TIME,
    OVER_BOUND,
    check_multiset,
)
from sim.history.checker.verdict import Outcome, Verdict
from sim.history.edn import loads_all
from sim.history.export import history_to_edn
from sim.history.import_edn import history_from_edn
from sim.history.model import (
    History,
    HistoryError,
    Kind,
    Op,
    Status,
    multiset_tables,
    validate,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

OK, INFO, FAIL = Status.OK, Status.INFO, Status.FAIL


def _op(
    i: int, kind: Kind, t0: int, t1: int | None, status: Status = OK, *, obj: str = "t",
    els: tuple[int, ...] = (), res: tuple[int, ...] | None = None, n: int | None = None,
    args: dict[str, Any] | None = None, code: str | None = None,
) -> Op:
    """Op i on process i (a process per op: none overlaps itself)."""
    return Op(i, i, kind, obj, t0, None if status is INFO else t1, status, elements=els,
              result=res, count=n, args=args, error_code=code)


def _add(i: int, t0: int, t1: int | None, *els: int, status: Status = OK, obj: str = "t") -> Op:
    return _op(i, Kind.ADD, t0, t1, status, els=els, obj=obj)


def _read(i: int, t0: int, t1: int, *res: int, where: list[list[Any]] | None = None, obj: str = "t") -> Op:
    return _op(i, Kind.READ, t0, t1, res=res, args=None if where is None else {"where": where}, obj=obj)


def _count(i: int, t0: int, t1: int, n: int, where: list[list[Any]] | None = None) -> Op:
    args: dict[str, Any] = {"count": True} if where is None else {"count": True, "where": where}
    return _op(i, Kind.READ, t0, t1, res=(), n=n, args=args)


def _set(i: int, t0: int, t1: int | None, v: int, n: int | None = None, *, where: int | None = None,
         status: Status = OK) -> Op:
    """UPDATE t SET v [WHERE x = where] → n rows (compare-and-set when `where` is given)."""
    args: dict[str, Any] = {"set": v} if where is None else {"set": v, "where": [["=", where]]}
    return _op(i, Kind.UPDATE, t0, t1, status, n=n, args=args)


def _delete(i: int, t0: int, t1: int | None, where: list[list[Any]], n: int | None, status: Status = OK) -> Op:
    return _op(i, Kind.DELETE, t0, t1, status, n=n, args={"where": where})


def _check(*ops: Op, **kw: Any) -> Verdict:
    h = History.from_ops(ops)
    validate(h)
    return check_multiset(h, **kw)


def _valid(*ops: Op) -> None:
    v = _check(*ops)
    assert v.outcome is Outcome.VALID, [a.explanation for a in v.anomalies]
    assert v.coverage is not None
    assert not v.coverage.unjudged


def _invalid(*ops: Op, names: Sequence[str] = ("not-linearizable",)) -> Verdict:
    v = _check(*ops)
    assert v.outcome is Outcome.INVALID, v
    assert v.names == sorted(names), [a.explanation for a in v.anomalies]
    return v


def _edn(text: str) -> History:
    h, _ = history_from_edn(loads_all(text))
    return h


# --- registers: a one-row table, UPDATE … SET and SELECT --------------------------------------


def test_register_sequential_write_then_read_is_valid() -> None:
    _valid(_add(0, 0, 1, 0), _set(1, 10, 20, 5, 1), _read(2, 30, 40, 5))


def test_register_read_concurrent_with_a_write_may_see_either_value() -> None:
    for seen in (0, 5):
        _valid(_add(0, 0, 1, 0), _set(1, 10, 40, 5, 1), _read(2, 20, 30, seen))


def test_register_read_of_a_value_never_written_is_not_linearizable() -> None:
    _invalid(_add(0, 0, 1, 0), _read(1, 10, 20, 7))


def test_register_update_with_a_wrong_row_count_is_not_linearizable() -> None:
    # SET on a one-row table affects 1 row, not 2.
    _invalid(_add(0, 0, 1, 0), _set(1, 10, 20, 5, 2))


def test_register_reads_cannot_flip_back_between_two_concurrent_writes() -> None:
    # Writes of 1 and 2 overlap everything; reads in sequence see 2, 1, 2:
    # after 2 then 1, the write of 2 is spent, so the last read is impossible.
    base = (_add(0, 0, 1, 0), _set(1, 5, 100, 1, 1), _set(2, 5, 100, 2, 1))
    _valid(*base, _read(3, 10, 20, 2), _read(4, 30, 40, 1))
    v = _invalid(*base, _read(3, 10, 20, 2), _read(4, 30, 40, 1), _read(5, 50, 60, 2))
    (a,) = v.anomalies
    assert a.ops[0] == 5
    assert "shortest failing prefix is the 6 operations" in a.explanation


def test_register_indeterminate_write_may_take_effect_later_or_never() -> None:
    base = (_add(0, 0, 1, 0), _set(1, 10, 20, 1, 1), _set(2, 15, None, 2, status=INFO))
    _valid(*base, _read(3, 30, 40, 2))  # it took effect
    _valid(*base, _read(3, 30, 40, 1), _read(4, 50, 60, 2))  # it took effect late
    _valid(*base, _read(3, 30, 40, 1), _read(4, 50, 60, 1))  # it never did
    # Once seen, it cannot be undone: 1 was written before, never after.
    _invalid(*base, _read(3, 30, 40, 2), _read(4, 50, 60, 1))


def test_register_read_of_a_failed_write_is_an_aborted_read() -> None:
    v = _invalid(_add(0, 0, 1, 0), _set(1, 10, 20, 3, status=FAIL), _read(2, 30, 40, 3))
    assert "Adya G1a (aborted read)" in v.anomalies[0].explanation
    assert "op 1" in v.anomalies[0].explanation


def test_the_issues_smallest_reproduction_is_not_linearizable() -> None:
    # A read that starts after an update has completed, and still sees the old value.
    h = _edn(
        '{:index 0, :time 0, :type :invoke, :process 9, :f :add, :value ["acct" 0]}\n'
        '{:index 1, :time 1, :type :ok, :process 9, :f :add, :value ["acct" 0]}\n'
        '{:index 2, :time 10, :type :invoke, :process 0, :f :update, :value ["acct" {:set 5}]}\n'
        '{:index 3, :time 20, :type :ok, :process 0, :f :update, :value ["acct" {:set 5}], :count 1}\n'
        '{:index 4, :time 30, :type :invoke, :process 1, :f :read, :value ["acct" nil]}\n'
        '{:index 5, :time 40, :type :ok, :process 1, :f :read, :value ["acct" #{0}]}\n'
    )
    v = check_multiset(h)
    assert v.outcome is Outcome.INVALID
    assert v.names == ["not-linearizable"]
    (a,) = v.anomalies
    assert a.ops[:2] == (2, 1)  # the read, then the update that completed before it began
    assert "'acct' holds {5}" in a.explanation
    assert "returned {0}" in a.explanation
    assert v.coverage is not None
    assert v.coverage.judged == frozenset({0, 1, 2})


# --- compare-and-set registers: UPDATE … SET b WHERE = a, with its row count ---------------


def test_cas_register_one_of_two_racing_cas_wins() -> None:
    # Both try 0 -> x concurrently: one reports 1 row, the other 0 (it failed).
    _valid(_add(0, 0, 1, 0), _set(1, 10, 20, 1, 1, where=0), _set(2, 15, 25, 2, 0, where=0),
           _read(3, 30, 40, 1))


def test_cas_register_chain_in_real_time_order() -> None:
    base = (_add(0, 0, 1, 0), _set(1, 10, 30, 1, 1, where=0), _set(2, 20, 40, 2, 1, where=1))
    _valid(*base, _read(3, 50, 60, 2))
    _invalid(*base, _read(3, 50, 60, 1))


def test_cas_register_that_reports_no_match_although_the_value_was_there() -> None:
    _invalid(_add(0, 0, 1, 0), _set(1, 10, 20, 1, 0, where=0))


def test_cas_that_succeeds_twice_from_the_same_value_is_a_lost_update() -> None:
    v = _invalid(
        _add(0, 0, 1, 0), _set(1, 10, 20, 1, 1, where=0), _set(2, 15, 25, 2, 1, where=0),
        names=("lost-update", "not-linearizable"),
    )
    lost = next(a for a in v.anomalies if a.name == "lost-update")
    assert lost.ops[:2] == (1, 2)
    assert "Adya P4 / Elle lost-update" in lost.explanation
    assert "only 1 row(s) of 0 were ever written" in lost.explanation


def test_cas_twice_from_a_value_written_twice_is_no_lost_update() -> None:
    # 0 -> 1, 1 -> 0 (a second 0), 0 -> 2: two CAS from 0, and two 0s.
    _valid(_add(0, 0, 1, 0), _set(1, 10, 20, 1, 1, where=0), _set(2, 30, 40, 0, 1, where=1),
           _set(3, 50, 60, 2, 1, where=0), _read(4, 70, 80, 2))


# --- sets and multisets ----------------------------------------------------------------------


def test_set_concurrent_adds_and_reads() -> None:
    _valid(_add(0, 0, 10, 1), _add(1, 0, 30, 2), _read(2, 5, 15, 1), _read(3, 20, 25, 1),
           _read(4, 20, 40, 1, 2), _read(5, 50, 60, 1, 2))


def test_set_stale_read_misses_an_acknowledged_add() -> None:
    _invalid(_add(0, 0, 10, 1), _add(1, 0, 10, 2), _read(2, 20, 30, 1))


def test_multiset_holds_a_value_as_often_as_it_was_inserted() -> None:
    _valid(_add(0, 0, 10, 1), _add(1, 0, 10, 1), _read(2, 20, 30, 1, 1))
    _valid(_add(0, 0, 10, 1, 1), _read(1, 20, 30, 1, 1), _count(2, 40, 50, 2))
    _invalid(_add(0, 0, 10, 1), _add(1, 0, 10, 1), _read(2, 20, 30, 1))


def test_a_duplicate_row_in_a_vector_read_is_named() -> None:
    # Done when: a duplicate row in a vector read -> duplicate-row. A vector
    # read is a multiset; this one has 1 twice, inserted once.
    h = _edn(
        '{:index 0, :time 0, :type :invoke, :process 0, :f :add, :value ["t" 1]}\n'
        '{:index 1, :time 10, :type :ok, :process 0, :f :add, :value ["t" 1]}\n'
        '{:index 2, :time 20, :type :invoke, :process 1, :f :read, :value ["t" nil]}\n'
        '{:index 3, :time 30, :type :ok, :process 1, :f :read, :value ["t" [1 1]]}\n'
    )
    assert list(h.result(1) or ()) == [1, 1]
    v = check_multiset(h)
    assert v.outcome is Outcome.INVALID
    assert v.names == ["duplicate-row", "not-linearizable"]
    dup = next(a for a in v.anomalies if a.name == "duplicate-row")
    assert dup.ops == (1, 0)
    assert "returned 1 2 times" in dup.explanation
    assert "Jepsen set-full: duplicated" in dup.explanation


def test_a_stale_read_after_delete_is_not_linearizable() -> None:
    # Done when: a stale read after DELETE.
    base = (_add(0, 0, 10, 1, 2), _delete(1, 20, 30, [["=", 1]], 1))
    _valid(*base, _read(2, 40, 50, 2))
    v = _invalid(*base, _read(2, 40, 50, 1, 2))
    assert v.anomalies[0].ops[:2] == (2, 1)
    assert "DELETE WHERE x = 1, 1 row" in v.anomalies[0].explanation


def test_delete_and_update_with_ranges_and_counts() -> None:
    base = (_add(0, 0, 10, 1, 2, 3, 4),)
    # DELETE WHERE x <= 2 AND x <> 1 -> {1, 3, 4}; UPDATE SET x = x + 10 WHERE x > 3 -> {1, 3, 14}.
    rm = _delete(1, 20, 30, [["<=", 2], ["<>", 1]], 1)
    shift = _op(2, Kind.UPDATE, 40, 50, n=1, args={"add": 10, "where": [[">", 3]]})
    _valid(*base, rm, shift, _read(3, 60, 70, 1, 3, 14), _read(4, 60, 70, 3, where=[[">=", 2], ["<", 14]]))
    _invalid(*base, rm, shift, _read(3, 60, 70, 1, 3, 4))
    _invalid(*base, _delete(1, 20, 30, [["<=", 2]], 1))  # two rows match


def test_count() -> None:
    base = (_add(0, 0, 10, 1, 2), _add(1, 0, 10, 2))
    _valid(*base, _count(2, 20, 30, 3), _count(3, 20, 30, 2, where=[["=", 2]]))
    _invalid(*base, _count(2, 20, 30, 2))


def test_operations_that_all_share_one_timestamp_are_concurrent() -> None:
    # Every op invoked and completed at t=5: any order is allowed.
    _valid(_add(0, 5, 5, 0), _set(1, 5, 5, 1, 1), _read(2, 5, 5, 0), _read(3, 5, 5, 1),
           _set(4, 5, 5, 9, 0, where=7), _count(5, 5, 5, 1))
    # ... but no order explains a value nobody wrote, or two CAS from one 0.
    _invalid(_add(0, 5, 5, 0), _set(1, 5, 5, 1, 1), _read(2, 5, 5, 7))
    _invalid(_add(0, 5, 5, 0), _set(1, 5, 5, 1, 1, where=0), _set(2, 5, 5, 2, 1, where=0),
             names=("lost-update", "not-linearizable"))


# --- tables: existence -----------------------------------------------------------------------


def test_table_existence_create_drop_and_unknown_table() -> None:
    create = _op(0, Kind.CREATE_TABLE, 0, 10)
    gone = _op(1, Kind.READ, 20, 30, FAIL, code="42P01")
    _valid(_op(5, Kind.READ, 0, 5, FAIL, code="42P01"), create, _add(2, 20, 30, 1), _read(3, 40, 50, 1))
    _invalid(create, gone)
    drop = _op(2, Kind.DROP_TABLE, 40, 50)
    _valid(create, _add(1, 20, 30, 1), drop, _op(3, Kind.READ, 60, 70, FAIL, code="42P01"))
    # Re-created, it is empty: the old rows are gone.
    _invalid(create, _add(1, 20, 30, 1), drop, _op(3, Kind.CREATE_TABLE, 60, 70), _read(4, 80, 90, 1))
    # A CREATE that found the table existing (42P07) saw it there.
    _invalid(create, drop, _op(3, Kind.CREATE_TABLE, 60, 70, FAIL, code="42P07"))


def test_tables_are_independent() -> None:
    v = _check(_add(0, 0, 10, 1, obj="a"), _add(1, 0, 10, 1, obj="b"), _read(2, 20, 30, 1, obj="a"),
               _read(3, 20, 30, obj="b"))
    assert v.outcome is Outcome.INVALID
    assert v.anomalies[0].ops[0] == 3
    assert v.stats["tables"] == 2


# --- coverage and bounds ---------------------------------------------------------------------


def _two_tables() -> list[Op]:
    """Table "small" (3 ops) and table "big" (37 ops: writes and reads, six
    at a time, each read seeing the write of two steps before)."""
    ops = [_add(0, 0, 1, 0, obj="small"), _op(1, Kind.UPDATE, 10, 20, n=1, args={"set": 1}, obj="small"),
           _read(2, 30, 40, 1, obj="small"), _add(3, 0, 1, 0, obj="big")]
    for k in range(4, 40):
        t = 10 * k
        ops.append(_op(k, Kind.UPDATE, t, t + 55, n=1, args={"set": k}, obj="big") if k % 2
                   else _read(k, t, t + 55, k - 5 if k > 5 else 0, obj="big"))
    return ops


def test_a_search_over_its_bound_is_unknown_never_valid() -> None:
    ops = _two_tables()
    full = _check(*ops)
    assert full.coverage is not None
    assert not full.coverage.unjudged
    assert full.outcome is not Outcome.UNKNOWN
    v = _check(*ops, max_states=8)
    assert v.outcome is Outcome.UNKNOWN
    assert v.reason is not None
    assert "'big': over the search bound (8 configurations" in v.reason
    assert v.coverage is not None
    assert v.coverage.judged == frozenset({0, 1, 2})  # "small" is searched first and decided
    assert v.coverage.unjudged == {OVER_BOUND: frozenset(range(3, 40))}


def test_out_of_time_is_unknown() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # every reading a second later
        return now[0]

    v = check_multiset(History.from_ops(_two_tables()), time_limit_s=1.5, clock=clock)
    assert v.outcome is Outcome.UNKNOWN
    assert v.coverage is not None
    assert set(v.coverage.unjudged) == {OUT_OF_TIME}
    assert v.coverage.unjudged[OUT_OF_TIME] | v.coverage.judged == frozenset(range(40))


def test_a_named_anomaly_decides_a_table_whatever_the_bound() -> None:
    v = _check(_add(0, 0, 1, 0), _set(1, 10, 20, 1, 1, where=0), _set(2, 15, 25, 2, 1, where=0), max_states=1)
    assert v.outcome is Outcome.INVALID
    assert v.names == ["lost-update"]
    assert v.coverage is not None
    assert v.coverage.judged == frozenset({0, 1, 2})


def test_what_the_model_cannot_represent_is_unjudged_with_the_reason() -> None:
    cols = _op(2, Kind.READ, 20, 30, res=(1,), args={"columns": ["x"]})
    view = [_op(3, Kind.CREATE_VIEW, 0, 1, obj="v", args={"on": "t"}), _read(4, 2, 3, 1, obj="v")]
    v = _check(_add(0, 0, 10, 1), _read(1, 20, 30, 1), cols, *view)
    assert v.outcome is Outcome.UNKNOWN
    assert v.coverage is not None
    assert v.coverage.judged == frozenset({0, 1})
    assert v.coverage.unjudged == {  # the view's DDL is no table's operation: in neither
        NOT_A_TABLE: frozenset({4}),
        "unsupported operation: SELECT of named columns": frozenset({2}),
    }
    # Failed ops (no effect) are judged with their table; a history without
    # table ops is skipped.
    v = _check(_add(0, 0, 10, 1), _set(1, 20, 30, 5, status=FAIL, n=None), _read(2, 40, 50, 1))
    assert v.outcome is Outcome.VALID
    assert v.coverage is not None
    assert v.coverage.judged == frozenset({0, 1, 2})
    assert _check(_op(0, Kind.CREATE_CLUSTER, 0, 1, obj="c")).skipped


# --- the history format: multisets, COUNT and :txn in EDN --------------------------------------


def test_a_table_is_a_multiset_in_the_history_format() -> None:
    h = History.from_ops([_add(0, 0, 10, 1), _add(1, 20, 30, 1), _add(2, 20, 30, 2, obj="u"),
                          _read(3, 40, 50, 2, 2, obj="w")])
    validate(h)  # the same value twice in one table is no longer malformed
    assert multiset_tables(h) == frozenset({h.names.index("t"), h.names.index("w")})


def test_edn_vector_reads_are_multisets_and_set_literals_stay_sets() -> None:
    inv = '{:type :invoke, :process 0, :f :add, :value ["t" [1 1]]}\n{:type :ok, :process 0, :f :add, :value ["t" [1 1]]}\n'
    rd = '{:type :invoke, :process 1, :f :read, :value ["t" nil]}\n{:type :ok, :process 1, :f :read, :value ["t" %s]}\n'
    h = _edn(inv + rd % "[1 2 1]")
    assert list(h.result(1) or ()) == [1, 1, 2]
    # Written back as a vector (a set literal cannot hold 1 twice), and read again the same.
    text = history_to_edn(h)
    assert '["t" [1 1 2]]' in text
    assert list(_edn(text).ops()) == list(h.ops())
    # A read without repeats is still written as a set, for Elle and Knossos.
    assert '["t" #{1 2}]' in history_to_edn(_edn(inv + rd % "[2 1]"))
    with pytest.raises(HistoryError, match="a set with a duplicate element: 1"):
        _edn(inv + rd % "#{1 1}")


def test_edn_count_form() -> None:
    text = (
        '{:index 0, :time 0, :type :invoke, :process 0, :f :add, :value ["t" [1 2 2]]}\n'
        '{:index 1, :time 1, :type :ok, :process 0, :f :add, :value ["t" [1 2 2]]}\n'
        '{:index 2, :time 2, :type :invoke, :process 0, :f :count, :value ["t" nil]}\n'
        '{:index 3, :time 3, :type :ok, :process 0, :f :count, :value ["t" 3]}\n'
        '{:index 4, :time 4, :type :invoke, :process 0, :f :count, :value ["t" {:where [[:> 1]]}]}\n'
        '{:index 5, :time 5, :type :ok, :process 0, :f :count, :value ["t" 2]}\n'
    )
    h = _edn(text)
    c1, c2 = h.op(1), h.op(2)
    assert (c1.kind, c1.args, c1.count) == (Kind.READ, {"count": True}, 3)
    assert (c2.kind, c2.args, c2.count) == (Kind.READ, {"count": True, "where": [[">", 1]]}, 2)
    assert history_to_edn(h) == text
    assert check_multiset(h).outcome is Outcome.VALID
    # The older form, a :read with {:count true} and :count n, reads the same.
    old = _edn(text.replace(":f :count, :value [\"t\" nil]", ':f :read, :value ["t" {:count true}]')
               .replace(':type :ok, :process 0, :f :count, :value ["t" 3]', ':type :ok, :process 0, :f :read, :value ["t" #{}], :count 3')
               .replace(":f :count", ":f :read").replace('{:where [[:> 1]]}', '{:count true, :where [[:> 1]]}')
               .replace(':value ["t" 2]', ':value ["t" #{}], :count 2'))
    assert list(old.ops()) == list(h.ops())
    with pytest.raises(HistoryError, match=r"an :ok :count needs :value \[table n\]"):
        _edn(text.replace('["t" 3]', '["t" #{1}]'))
    with pytest.raises(HistoryError, match="completes :count but process 0 invoked :read"):
        _edn(text.replace(':type :invoke, :process 0, :f :count, :value ["t" nil]', ':type :invoke, :process 0, :f :read, :value ["t" nil]'))


def test_edn_transactions_are_refused_in_one_line() -> None:
    with pytest.raises(HistoryError) as err:
        _edn('{:index 7, :type :invoke, :process 0, :f :txn, :value [[:r 1 nil] [:w 1 2]]}\n')
    assert str(err.value) == (
        "EDN: event :index 7: transactional operations (:f :txn) are not supported: coordsim checks "
        "histories of single statements until multi-statement transactions exist"
    )
