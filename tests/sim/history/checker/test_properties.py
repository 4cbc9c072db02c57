"""Property tests of the checkers: histories generated from a sequential model
are always valid; single mutations are caught when they should be; checker 2
(black-box graph) and checker 5 (linearizability search) agree."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sim.history.checker.blackbox import check_blackbox
from sim.history.checker.generate import GenConfig, drop_read_element, generate, swap_completions
from sim.history.checker.linear import check_linear
from sim.history.checker.named import check_named
from sim.history.checker.tables import ends
from sim.history.checker.verdict import Outcome
from sim.history.checker.whitebox import check_whitebox
from sim.history.model import (
    ADD,
    DROP_TABLE,
    FAIL,
    NONE,
    OK,
    READ,
    History,
    Kind,
    Op,
    Status,
    validate,
)

if TYPE_CHECKING:
    import random

configs = st.builds(
    GenConfig,
    ops=st.integers(1, 60),
    processes=st.integers(1, 5),
    window=st.integers(1, 3),
    ops_per_table=st.integers(5, 30),
    drops=st.booleans(),
    p_read=st.floats(0.1, 0.7),
    p_mutate=st.sampled_from([0.0, 0.0, 0.15]),
    p_info=st.sampled_from([0.0, 0.05, 0.2]),
    mean_think_ns=st.sampled_from([1, 1_000, 20_000]),
    seed=st.integers(0, 2**32),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_generated_histories_are_valid_for_every_checker(cfg: GenConfig) -> None:
    """No checker finds an anomaly in a valid history; each says `valid`,
    except that whitebox says `unknown` (it fails closed) when no operation
    carries a system timestamp (e.g. a single `info` operation)."""
    h = generate(cfg)
    validate(h)
    stamped = any(ts != NONE for ts in (*h.read_ts, *h.write_ts, *h.catalog_ts))
    for check in (check_named, check_blackbox, check_whitebox):
        v = check(h)
        expected = Outcome.VALID if stamped or check is not check_whitebox else Outcome.UNKNOWN
        assert v.outcome == expected, (check.__name__, v.outcome, v.reason, v.anomalies[:2], cfg)
    lin = check_linear(h)
    assert lin.outcome == (Outcome.UNKNOWN if lin.reason else Outcome.VALID), (lin, cfg)


@settings(max_examples=120)
@given(configs.filter(lambda c: c.p_mutate == 0), st.randoms(use_true_random=False))
def test_dropping_an_acknowledged_element_from_a_read_is_caught(cfg: GenConfig, rnd: random.Random) -> None:
    h = generate(cfg)
    e = ends(h)
    # Reads that must contain some element: its add was acknowledged before
    # the read began, and the read's incarnation of the table is known. A drop
    # that may fall before the read's end (with a create that may re-create the
    # table after it) leaves the read free to see a new, empty incarnation,
    # unless what it still returns was acknowledged before that drop began.
    writer = {(h.obj[a], x): a for a in range(h.n) if h.kind[a] == ADD and h.status[a] == OK for x in h.elements(a)}
    drops: dict[int, list[int]] = {}
    for d in range(h.n):
        if h.kind[d] == DROP_TABLE and h.status[d] != FAIL:
            drops.setdefault(h.obj[d], []).append(h.invoke[d])

    def determinate(r: int, x: int) -> bool:
        early = [di for di in drops.get(h.obj[r], []) if di < e[r]]
        if not early:
            return True
        first = min(early)
        return any((w := writer.get((h.obj[r], y))) is not None and e[w] < first
                   for y in h.result(r) or () if y != x)

    cands = [
        (r, x)
        for r in range(h.n)
        if h.kind[r] == READ and h.status[r] == OK
        for x in h.result(r) or ()
        if (a := writer.get((h.obj[r], x))) is not None and e[a] < h.invoke[r] and determinate(r, x)
    ]
    assume(cands)
    r, x = rnd.choice(cands)
    res = tuple(y for y in h.result(r) or () if y != x)
    ops = [op if op.op_id != h.op_id[r] else _with_result(op, res) for op in h.ops()]
    bad = History.from_ops(ops)
    named = check_named(bad)
    assert {"stale-read", "lost-write"} & set(named.names), named
    assert check_blackbox(bad).outcome == Outcome.INVALID
    assert check_whitebox(bad).outcome == Outcome.INVALID
    assert check_linear(bad).outcome == Outcome.INVALID


def _with_result(op: Op, res: tuple[int, ...]) -> Op:
    from dataclasses import replace

    return replace(op, result=res)


small = st.builds(
    GenConfig,
    ops=st.integers(2, 14),
    processes=st.integers(2, 4),
    window=st.just(1),
    ops_per_table=st.integers(4, 14),
    drops=st.booleans(),
    p_read=st.floats(0.3, 0.6),
    p_info=st.sampled_from([0.0, 0.1, 0.3]),
    mean_think_ns=st.sampled_from([1, 3_000]),
    seed=st.integers(0, 2**32),
)


def _agree(h: History) -> None:
    validate(h)
    bb = check_blackbox(h)
    lin = check_linear(h, time_limit_s=5.0)
    if Outcome.UNKNOWN in (bb.outcome, lin.outcome):
        return
    assert bb.outcome == lin.outcome, (bb.anomalies[:1], lin.anomalies[:1], list(h.ops()))


@settings(max_examples=200)
@given(small, st.randoms(use_true_random=False), st.sampled_from(["drop", "swap"]))
def test_blackbox_and_linear_agree_on_mutated_histories(cfg: GenConfig, rnd: random.Random, how: str) -> None:
    h = generate(cfg)
    if how == "drop":
        m = drop_read_element(h, rnd)
        assume(m is not None)
        assert m is not None
        h = m[0]
    else:
        s = swap_completions(h, rnd)
        assume(s is not None)
        assert s is not None
        h = s
    _agree(h)


@st.composite
def random_histories(draw: st.DrawFn, *, once: bool = True, max_ops: int = 9) -> History:
    """Arbitrary small histories over two tables — mostly invalid — with each
    op on its own process: unique adds, reads returning any subset of the
    values; with `once`, create/drop at most once per table (checker 2's exact
    fragment)."""
    ops: list[Op] = []
    n = draw(st.integers(1, max_ops))
    values = 0
    ddl_used: set[tuple[str, Kind]] = set()
    for i in range(n):
        table = draw(st.sampled_from(["t", "u"]))
        kind = draw(st.sampled_from([Kind.ADD, Kind.ADD, Kind.READ, Kind.READ, Kind.CREATE_TABLE, Kind.DROP_TABLE]))
        if once and kind in (Kind.CREATE_TABLE, Kind.DROP_TABLE):
            if (table, kind) in ddl_used:
                kind = Kind.READ
            ddl_used.add((table, kind))
        inv = draw(st.integers(0, 30))
        end = inv + draw(st.integers(0, 12))
        status = draw(st.sampled_from([Status.OK, Status.OK, Status.OK, Status.INFO, Status.FAIL]))
        els: tuple[int, ...] = ()
        res = None
        code = None
        if kind == Kind.ADD:
            els = (values,)
            values += 1
        if status == Status.FAIL:
            code = "42P01" if kind in (Kind.ADD, Kind.READ) else "42P07"
        if kind == Kind.READ and status == Status.OK:
            res = tuple(sorted(draw(st.sets(st.integers(0, max(values, 1)), max_size=4))))
        ops.append(Op(i, i, kind, table, inv, end, status, elements=els, result=res, error_code=code))
    return History.from_ops(ops)


@settings(max_examples=400)
@given(random_histories())
def test_blackbox_and_linear_agree_on_random_histories(h: History) -> None:
    _agree(h)


@pytest.mark.slow
@settings(max_examples=5_000)
@given(random_histories(max_ops=12))
def test_blackbox_and_linear_agree_on_many_random_histories(h: History) -> None:
    _agree(h)


@settings(max_examples=400)
@given(random_histories(once=False))
def test_named_anomalies_are_real_violations(h: History) -> None:
    """Checker 1 never cries wolf: whatever it reports, the exact search finds
    no linearization either (re-created tables included)."""
    validate(h)
    named = check_named(h)
    if named.outcome == Outcome.INVALID:
        lin = check_linear(h, time_limit_s=5.0)
        assert lin.outcome != Outcome.VALID, (named.anomalies, list(h.ops()))


@settings(max_examples=150)
@given(configs.filter(lambda c: c.p_mutate == 0), st.randoms(use_true_random=False))
def test_whitebox_catches_a_read_ts_below_a_write_it_saw(cfg: GenConfig, rnd: random.Random) -> None:
    """Lower one read's read_ts below the write_ts of an element it returned:
    the read now shows the future of its own timestamp."""
    h = generate(cfg)
    wts = {(h.obj[a], x): h.write_ts[a] for a in range(h.n) if h.kind[a] == ADD and h.write_ts[a] >= 0
           for x in h.elements(a)}
    cands = [
        (r, w)
        for r in range(h.n)
        if h.kind[r] == READ and h.status[r] == OK and h.read_ts[r] >= 0
        for x in h.result(r) or ()
        if (w := wts.get((h.obj[r], x))) is not None and w >= 1
    ]
    assume(cands)
    r, w = rnd.choice(cands)
    from dataclasses import replace

    ops = [op if op.op_id != h.op_id[r] else replace(op, read_ts=w - 1) for op in h.ops()]
    assert check_whitebox(History.from_ops(ops)).outcome == Outcome.INVALID
