"""Checker "table" (`check_multiset`): linearizability of tables as multisets
of rows, without system timestamps (issue 34). Registers (a one-row table
with UPDATE … SET and SELECT), compare-and-set registers (UPDATE … WHERE = a
with its row count) and sets are special cases, each with hand-computed
verdicts; a brute-force search over every order cross-checks the WGL search
on random small histories; the issue's done-when histories are here as
tests, the 10,000-operation registers included."""

from __future__ import annotations

import heapq
import json
import random
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.history.checker.generate import GenConfig, generate
from sim.history.checker.multiset import (
    NOT_A_TABLE,
    OUT_OF_TIME,
    OVER_BOUND,
    check_multiset,
)
from sim.history.checker.verdict import Outcome, Verdict
from sim.history.edn import loads_all
from sim.history.interchange import history_from_edn, history_to_edn
from sim.history.model import (
    KIND_CODE,
    NONE,
    History,
    HistoryBuilder,
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
) -> Op:  # fmt: skip
    """Op i on process i (a process per op: none overlaps itself)."""
    return Op(i, i, kind, obj, t0, None if status is INFO else t1, status, elements=els,
              result=res, count=n, args=args, error_code=code)  # fmt: skip


def _add(i: int, t0: int, t1: int | None, *els: int, status: Status = OK, obj: str = "t") -> Op:
    return _op(i, Kind.ADD, t0, t1, status, els=els, obj=obj)


def _read(i: int, t0: int, t1: int, *res: int, where: list[list[Any]] | None = None, obj: str = "t") -> Op:
    return _op(i, Kind.READ, t0, t1, res=res, args=None if where is None else {"where": where}, obj=obj)


def _count(i: int, t0: int, t1: int, n: int, where: list[list[Any]] | None = None) -> Op:
    args: dict[str, Any] = {"count": True} if where is None else {"count": True, "where": where}
    return _op(i, Kind.READ, t0, t1, res=(), n=n, args=args)


def _set(i: int, t0: int, t1: int | None, v: int, n: int | None = None, *, where: int | None = None,
         status: Status = OK) -> Op:  # fmt: skip
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
           _read(3, 30, 40, 1))  # fmt: skip


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
    )  # fmt: skip
    lost = next(a for a in v.anomalies if a.name == "lost-update")
    assert lost.ops[:2] == (1, 2)
    assert "Adya P4 / Elle lost-update" in lost.explanation
    assert "only 1 row(s) of 0 were ever written" in lost.explanation


def test_cas_twice_from_a_value_written_twice_is_no_lost_update() -> None:
    # 0 -> 1, 1 -> 0 (a second 0), 0 -> 2: two CAS from 0, and two 0s.
    _valid(_add(0, 0, 1, 0), _set(1, 10, 20, 1, 1, where=0), _set(2, 30, 40, 0, 1, where=1),
           _set(3, 50, 60, 2, 1, where=0), _read(4, 70, 80, 2))  # fmt: skip


# --- sets and multisets ----------------------------------------------------------------------


def test_set_concurrent_adds_and_reads() -> None:
    _valid(_add(0, 0, 10, 1), _add(1, 0, 30, 2), _read(2, 5, 15, 1), _read(3, 20, 25, 1),
           _read(4, 20, 40, 1, 2), _read(5, 50, 60, 1, 2))  # fmt: skip


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
           _set(4, 5, 5, 9, 0, where=7), _count(5, 5, 5, 1))  # fmt: skip
    # ... but no order explains a value nobody wrote, or two CAS from one 0.
    _invalid(_add(0, 5, 5, 0), _set(1, 5, 5, 1, 1), _read(2, 5, 5, 7))
    _invalid(_add(0, 5, 5, 0), _set(1, 5, 5, 1, 1, where=0), _set(2, 5, 5, 2, 1, where=0),
             names=("lost-update", "not-linearizable"))  # fmt: skip


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
               _read(3, 20, 30, obj="b"))  # fmt: skip
    assert v.outcome is Outcome.INVALID
    assert v.anomalies[0].ops[0] == 3
    assert v.stats["tables"] == 2


# --- coverage and bounds ---------------------------------------------------------------------


def _two_tables() -> list[Op]:
    """Table "small" (3 ops) and table "big" (37 ops: writes and reads, six
    at a time, each read seeing the write of two steps before)."""
    ops = [_add(0, 0, 1, 0, obj="small"), _op(1, Kind.UPDATE, 10, 20, n=1, args={"set": 1}, obj="small"),
           _read(2, 30, 40, 1, obj="small"), _add(3, 0, 1, 0, obj="big")]  # fmt: skip
    for k in range(4, 40):
        t = 10 * k
        ops.append(_op(k, Kind.UPDATE, t, t + 55, n=1, args={"set": k}, obj="big") if k % 2
                   else _read(k, t, t + 55, k - 5 if k > 5 else 0, obj="big"))  # fmt: skip
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


# --- the issue's 10,000-operation registers --------------------------------------------------


def _register(n: int, clients: int, seed: int) -> tuple[History, int]:
    """A linearizable register history of `n` ops from `clients` clients
    (INSERT of 0, then UPDATE … SET of fresh values and SELECTs, each taking
    effect at a random instant of its interval), and the row of a read after
    op n/2 that could be made stale: a write completed before it began, and
    another before that one began."""
    rng = random.Random(seed)
    add, read, update = (KIND_CODE[k] for k in (Kind.ADD, Kind.READ, Kind.UPDATE))
    # (kind, value, client, invoke, complete, linearization point)
    plan: list[tuple[int, int, int, int, int, float]] = [(add, 0, 0, 0, 1, 0.5)]
    clocks = [(10, c) for c in range(clients)]
    value = 0
    for _ in range(n - 1):
        now, c = heapq.heappop(clocks)
        inv = now + int(rng.expovariate(1 / 1_000)) + 1
        end = inv + int(rng.expovariate(1 / 5_000)) + 1
        lin = inv + rng.random() * (end - inv)
        if rng.random() < 0.5:
            value += 1
            plan.append((update, value, c, inv, end, lin))
        else:
            plan.append((read, -1, c, inv, end, lin))
        heapq.heappush(clocks, (end, c))
    state = -1
    seen = [0] * n
    for i in sorted(range(n), key=lambda i: plan[i][5]):
        if plan[i][0] == read:
            seen[i] = state
        else:
            state = plan[i][1]
    b = HistoryBuilder()
    for i, (kind, v, c, inv, end, _) in enumerate(plan):
        b.add_row(i, c, kind, "r", inv, end, 0, (v,) if kind == add else (),
                  (seen[i],) if kind == read else None, 1 if kind == update else NONE,
                  json.dumps({"set": v}) if kind == update else None)  # fmt: skip
    h = b.build()
    validate(h)
    writes = [i for i in range(n) if h.kind[i] != read]
    for r in range(n // 2, n):
        if h.kind[r] != read:
            continue
        done = [w for w in writes if h.complete[w] < h.invoke[r]]
        w2 = max(done, key=lambda w: h.complete[w])
        if any(h.complete[w] < h.invoke[w2] for w in done):
            return h, r
    raise AssertionError("no read to make stale")


def _with_stale_read(h: History, r: int) -> tuple[History, int]:
    """`h` with read r returning a value overwritten before it began."""
    done = [w for w in range(h.n) if h.kind[w] != KIND_CODE[Kind.READ] and h.complete[w] < h.invoke[r]]
    w2 = max(done, key=lambda w: h.complete[w])
    w1 = max((w for w in done if h.complete[w] < h.invoke[w2]), key=lambda w: h.complete[w])
    old = h.elements(w1)[0] if h.kind[w1] == KIND_CODE[Kind.ADD] else json.loads(h.args[w1] or "{}")["set"]
    ops = list(h.ops())
    ops[r] = replace(ops[r], result=(old,))
    return History.from_ops(ops), old


def test_a_linearizable_10000_operation_register_is_valid_within_the_default_bound() -> None:
    h, _ = _register(10_000, 10, seed=34)
    assert len(set(h.process)) == 10
    t0 = time.perf_counter()
    v = check_multiset(h)
    took = time.perf_counter() - t0
    assert v.outcome is Outcome.VALID, v.reason
    assert v.coverage is not None
    assert len(v.coverage.judged) == 10_000
    print(f"linearizable register: {h.n} ops, {v.stats['configurations']} configurations, {took:.2f}s")


def test_a_non_linearizable_10000_operation_register_is_invalid_within_the_default_bound() -> None:
    h, r = _register(10_000, 10, seed=34)
    bad, old = _with_stale_read(h, r)
    t0 = time.perf_counter()
    v = check_multiset(bad)
    took = time.perf_counter() - t0
    assert v.outcome is Outcome.INVALID, v.reason
    (a,) = v.anomalies
    assert a.ops[0] == r
    assert f"returned {{{old}}}" in a.explanation
    print(f"stale read at op {r}: {bad.n} ops, {v.stats['configurations']} configurations, {took:.2f}s")


# --- cross-checks ----------------------------------------------------------------------------


_CMP = {"=": int.__eq__, "<>": int.__ne__, "<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__}


def _apply(op: Op, s: tuple[int, ...] | None) -> tuple[int, ...] | bool | None:
    """The reference semantics of one op, written apart from the checker's:
    the next state, or False if op cannot happen in state s."""
    k = op.kind
    if op.status is FAIL:
        if op.error_code == "42P01" and k is not Kind.CREATE_TABLE:
            return s if s is None else False
        if op.error_code == "42P07" and k is Kind.CREATE_TABLE:
            return s if s is not None else False
        return s
    if k is Kind.CREATE_TABLE:
        return () if s is None else False
    if k is Kind.DROP_TABLE:
        return None if s is not None else False
    if s is None:
        return False
    if k is Kind.ADD:
        return tuple(sorted(s + op.elements))
    a = op.args or {}
    hit = [x for x in s if all(_CMP[c](x, v) for c, v in a.get("where", []))]
    rest = [x for x in s if not all(_CMP[c](x, v) for c, v in a.get("where", []))]
    if k is Kind.READ:
        if a.get("count"):
            return s if len(hit) == op.count else False
        return s if sorted(hit) == sorted(op.result or ()) else False
    if op.status is OK and op.count is not None and op.count != len(hit):
        return False
    if k is Kind.DELETE:
        return tuple(sorted(rest))
    new = [a["set"]] * len(hit) if "set" in a else [x + a["add"] for x in hit]
    return tuple(sorted(rest + new))


def _brute(h: History) -> bool:
    """Linearizable? By trying every order that respects real time (an `info`
    op may come anywhere after its invoke, or never), memoized on (ops done,
    state). Exponential: small histories only."""
    ops = [op for op in h.ops() if not (op.status is INFO and op.kind is Kind.READ)]
    n = len(ops)
    end = [2**62 if op.complete_ns is None or op.status is INFO else op.complete_ns for op in ops]
    before = [sum(1 << b for b in range(n) if end[b] < ops[a].invoke_ns) for a in range(n)]
    must = sum(1 << i for i, op in enumerate(ops) if op.status is not INFO)
    gone = [op.status is FAIL and op.error_code == "42P01" and op.kind is not Kind.CREATE_TABLE for op in ops]
    ddl = [op.kind for op in sorted(ops, key=lambda o: (o.invoke_ns, o.op_id))
           if op.kind in (Kind.CREATE_TABLE, Kind.DROP_TABLE) and op.status is not FAIL]  # fmt: skip
    # The table existed at the start iff its first DDL is a DROP, or there is
    # no CREATE (then, without DDL, iff some op that is evidence did not find
    # it unknown): the checker's rule.
    if ddl:
        init: tuple[int, ...] | None = () if ddl[0] is Kind.DROP_TABLE or Kind.CREATE_TABLE not in ddl else None
    else:
        there = (op.status is not FAIL or (op.kind is Kind.CREATE_TABLE and op.error_code == "42P07")
                 for op, g in zip(ops, gone, strict=True) if not g)  # fmt: skip
        init = () if any(there) else None
    seen: set[tuple[int, tuple[int, ...] | None]] = set()
    stack: list[tuple[int, tuple[int, ...] | None]] = [(0, init)]
    while stack:
        done, s = stack.pop()
        if done & must == must:
            return True
        if (done, s) in seen:
            continue
        seen.add((done, s))
        for i in range(n):
            if done >> i & 1 or before[i] & ~done:
                continue
            ns = _apply(ops[i], s)
            if ns is not False:
                stack.append((done | 1 << i, ns))  # type: ignore[arg-type]
    return False


def _random_history(rng: random.Random) -> History:
    """A small history on one table: ops from a sequential run at random
    instants of their intervals (so often linearizable), then some results
    perturbed, some ops made indeterminate or failed."""
    n = rng.randint(1, 8)
    ddl = rng.random() < 0.25
    vals = (0, 1, 2)
    spans = []
    for _ in range(n):
        t0 = rng.randint(0, 12)
        t1 = t0 + rng.randint(0, 6)
        spans.append((t0, t1, t0 + rng.random() * (t1 - t0)))
    state: tuple[int, ...] | None = None if ddl else ()
    ops: dict[int, Op] = {}
    p_info = rng.choice([0.0, 0.15, 0.4])
    for i in sorted(range(n), key=lambda i: spans[i][2]):
        kinds = [Kind.ADD, Kind.READ, Kind.READ, Kind.UPDATE, Kind.DELETE]
        k = rng.choice(kinds + ([Kind.CREATE_TABLE, Kind.DROP_TABLE] if ddl else []))
        args: dict[str, Any] = {}
        if rng.random() < 0.5 and k in (Kind.READ, Kind.UPDATE, Kind.DELETE):
            args["where"] = [[rng.choice(list(_CMP)), rng.choice(vals)]]
        if k is Kind.UPDATE:
            args["set" if rng.random() < 0.85 else "add"] = rng.choice(vals)
        if k is Kind.READ and rng.random() < 0.2:
            args["count"] = True
        els = tuple(rng.choice(vals) for _ in range(rng.choice((1, 1, 2)))) if k is Kind.ADD else ()
        t0, t1, _ = spans[i]
        code = None
        if k is Kind.CREATE_TABLE and state is not None:
            code = "42P07"
        elif k is not Kind.CREATE_TABLE and state is None:
            code = "42P01"
        if code is not None:
            ops[i] = Op(i, i, k, "t", t0, t1, FAIL, elements=els, args=args or None, error_code=code)
            continue
        res: tuple[int, ...] | None = None
        cnt = None
        if k in (Kind.READ, Kind.UPDATE, Kind.DELETE):
            assert state is not None
            hit = [x for x in state if all(_CMP[c](x, v) for c, v in args.get("where", []))]
            if k is Kind.READ and not args.get("count"):
                res = tuple(sorted(hit))
            else:
                cnt = len(hit)
            if rng.random() < 0.25:  # perturb what it saw
                if res is not None:
                    res = tuple(sorted(rng.choice(vals) for _ in range(rng.randint(0, 3))))
                else:
                    cnt = rng.randint(0, 3)
        probe = Op(i, i, k, "t", t0, t1, OK, elements=els, args=args or None, result=(), count=None)
        if k is not Kind.READ:
            nxt = _apply(probe, state)
            assert nxt is not False
            assert nxt is not True
            state = nxt
        op = Op(i, i, k, "t", t0, t1, OK, elements=els, args=args or None,
                result=() if res is None and k is Kind.READ else res, count=cnt)  # fmt: skip
        if rng.random() < p_info:
            op = Op(i, i, k, "t", t0, None, INFO, elements=els, args=args or None)
        elif rng.random() < 0.05:
            op = Op(i, i, k, "t", t0, t1, FAIL, elements=els, args=args or None,
                    error_code=rng.choice(["40001", "42P01"]))  # fmt: skip
        ops[i] = op
    return History.from_ops(ops[i] for i in range(n))


@settings(max_examples=400)
@given(st.randoms(use_true_random=False))
def test_the_search_agrees_with_trying_every_order(rng: random.Random) -> None:
    h = _random_history(rng)
    v = check_multiset(h)
    assert v.outcome is not Outcome.UNKNOWN
    assert (v.outcome is Outcome.VALID) == _brute(h), (list(h.ops()), [a.explanation for a in v.anomalies])


@settings(max_examples=60)
@given(st.builds(GenConfig, ops=st.integers(1, 80), processes=st.integers(1, 6), window=st.integers(1, 3),
                 ops_per_table=st.integers(5, 40), drops=st.booleans(), p_mutate=st.sampled_from([0.0, 0.15, 0.3]),
                 p_info=st.sampled_from([0.0, 0.05, 0.2]), seed=st.integers(0, 2**32)))  # fmt: skip
def test_generated_strictly_serializable_histories_are_valid(cfg: GenConfig) -> None:
    # DDL, INSERT, full reads, UPDATE … WHERE = and DELETE … WHERE <=, from a
    # sequential model at linearization points: linearizable by construction.
    h = generate(cfg)
    # generate() records an UPDATE's arguments only when its table exists;
    # one aimed at a missing table (failed, or made indeterminate) has none.
    # Give those a value nobody reads: the model refuses an UPDATE without SET.
    ops = [replace(op, args={"set": -1}) if op.kind is Kind.UPDATE and op.args is None else op for op in h.ops()]
    v = check_multiset(History.from_ops(ops))
    assert v.outcome is Outcome.VALID, ([a.explanation for a in v.anomalies], v.reason, cfg)


# --- the history format: multisets, COUNT and :txn in EDN --------------------------------------


def test_a_table_is_a_multiset_in_the_history_format() -> None:
    h = History.from_ops([_add(0, 0, 10, 1), _add(1, 20, 30, 1), _add(2, 20, 30, 2, obj="u"),
                          _read(3, 40, 50, 2, 2, obj="w")])  # fmt: skip
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
               .replace(':value ["t" 2]', ':value ["t" #{}], :count 2'))  # fmt: skip
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
