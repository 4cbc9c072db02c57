"""Arrangements answer exactly at every time in [since, upper), before and after
compaction; transforms round-trip through their SQL text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controllers.arrangement import Arrangement, Maintainer
from controllers.transform import Comparison, Transform, decode_row, encode_row, parse_select
from persist.codec import Update
from sim.runtime.errors import InvalidUsage

_rows = st.tuples(st.integers(0, 3), st.sampled_from(["a", "b"]))
_updates = st.lists(st.tuples(st.integers(0, 30), _rows, st.sampled_from([1, 1, -1])), max_size=40)


def _model(writes: list[tuple[int, tuple[int, str], int]], as_of: int, t: Transform) -> list[tuple[bytes, int]]:
    acc: dict[tuple[int, str], int] = {}
    for ts, row, d in writes:
        if ts <= as_of:
            acc[row] = acc.get(row, 0) + d
    c = t.compile(("k", "v"))
    if c.count:
        return [(encode_row((sum(n for r, n in acc.items() if c.keep(r)),)), 1)]
    out: dict[bytes, int] = {}
    for r, n in acc.items():
        if c.keep(r) and n:
            key = encode_row(c.project(r))
            out[key] = out.get(key, 0) + n
    return sorted((k, n) for k, n in out.items() if n)


@given(
    _updates,
    st.integers(0, 10),
    st.lists(st.integers(0, 30), max_size=5),
    st.sampled_from(
        [Transform(), Transform((Comparison("v", "=", "a"),)), Transform(count=True), Transform(project=("v",)),
         Transform((Comparison("k", ">=", 2),), count=True)]
    ),
)
def test_arrangement_reads_are_exact(
    writes: list[tuple[int, tuple[int, str], int]], as_of: int, compactions: list[int], t: Transform
) -> None:
    writes = sorted(writes, key=lambda w: w[0])
    m = Maintainer(t.compile(("k", "v")))
    snapshot = [Update(encode_row(r), b"", as_of, d) for ts, r, d in writes if ts <= as_of]
    arr = Arrangement(as_of, m.initial(snapshot))
    rest = [Update(encode_row(r), b"", ts, d) for ts, r, d in writes if ts > as_of]
    # Deliver the rest in a few batches, compacting in between.
    upper = as_of + 1
    for cut in (*sorted(compactions), 31):
        if cut < upper:
            continue
        batch = [u for u in rest if upper <= u.ts < cut + 1]
        arr.insert(m.step(batch), cut + 1)
        upper = cut + 1
        arr.compact(min(cut, upper - 1))
        for read_at in range(arr.since, upper):
            expected = _model(writes, read_at, t)
            assert list(arr.read(read_at)) == expected, (read_at, arr.since)
            assert list(arr.read(read_at)) == expected  # again: a kept read must still be right
    with pytest.raises(InvalidUsage):
        arr.read(arr.upper)
    if arr.since > 0:
        with pytest.raises(InvalidUsage):
            arr.read(arr.since - 1)


def test_reads_that_fold_the_same_updates_are_the_same_tuple() -> None:
    """Peeks of an unchanging collection get the same read (the replica
    reuses its evaluation of it); another update folded in, or compaction
    changing the base, gives a new one."""
    a, b = encode_row((1,)), encode_row((2,))
    arr = Arrangement(5, [(a, 1)])
    arr.insert([(6, b, 1)], 8)
    first = arr.read(6)
    assert first == ((a, 1), (b, 1))
    assert arr.read(7) is first  # the same update folded in
    assert arr.read(5) == ((a, 1),)  # fewer: another read
    assert arr.read(7) == first
    arr.insert([(8, b, -1)], 9)
    assert arr.read(8) == ((a, 1),)
    kept = arr.read(7)
    assert kept == first
    arr.compact(6)  # folds the update at 6 into the base
    assert arr.read(7) == first
    assert arr.read(7) is not kept


@given(
    st.lists(st.tuples(st.sampled_from(["k", "v", "w"]), st.sampled_from(["=", "<>", "<", ">="]),
                       st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4))), max_size=3),
    st.sampled_from([None, ("k",), ("v", "k")]),
    st.booleans(),
)
def test_transform_sql_round_trips(
    terms: list[tuple[str, str, int | str | bool | None]], project: tuple[str, ...] | None, count: bool
) -> None:
    t = Transform(tuple(Comparison(*c) for c in terms), None if count else project, count)
    assert parse_select(t.to_sql("src")) == ("src", t)


def test_rows_encode_stably() -> None:
    assert encode_row((1, "é", None, False)) == b'[1,"\\u00e9",null,false]'
    assert decode_row(encode_row((1, "é", None, False))) == (1, "é", None, False)
    with pytest.raises(InvalidUsage):
        encode_row((1.5,))  # type: ignore[arg-type]
    with pytest.raises(InvalidUsage):
        parse_select("SELECT * FROM t WHERE a = b")
