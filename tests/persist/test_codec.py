"""Batch encoding, and the decoded-batch cache readers share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persist.codec import (
    DecodedBatches,
    Update,
    consolidate,
    consolidate_at,
    consolidated_sums,
    decode_batch,
    encode_batch,
    sum_batch,
)
from sim.runtime.errors import InvalidUsage


def _batch(n: int) -> bytes:
    return encode_batch(Update(f"k{i}".encode(), b"v", ts=i, diff=1) for i in range(n))


def test_round_trip() -> None:
    assert [u.ts for u in decode_batch(_batch(3))] == [0, 1, 2]


def test_a_key_is_decoded_once_and_the_least_recent_is_evicted() -> None:
    cache = DecodedBatches(capacity=2)
    first = cache.decode("a", _batch(1))
    assert cache.decode("a", b"not read again") is first  # a hit never decodes
    cache.decode("b", _batch(2))
    cache.decode("a", _batch(1))  # a is now the most recent
    cache.decode("c", _batch(3))  # evicts b
    with pytest.raises(InvalidUsage, match="not a persist batch"):
        cache.decode("b", b"garbage")  # b was evicted: decoded again, and fails
    assert len(cache.decode("a", b"")) == 1


def test_a_failed_decode_is_not_cached() -> None:
    cache = DecodedBatches()
    with pytest.raises(InvalidUsage):
        cache.decode("x", b"garbage")
    assert len(cache.decode("x", _batch(2))) == 2


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        DecodedBatches(capacity=0)


@given(
    st.lists(
        st.tuples(st.binary(max_size=2), st.binary(max_size=1), st.integers(0, 9), st.integers(-2, 2)),
        max_size=40,
    ),
    st.integers(9, 12),
)
def test_consolidate_at_is_consolidate_forwarded_to_ts(rows: list[tuple[bytes, bytes, int, int]], ts: int) -> None:
    updates = [Update(*r) for r in rows]
    want = [u._replace(ts=ts) for u in consolidate(updates, since=ts)]
    assert consolidate_at(updates, ts) == want
    assert all(u.ts == ts for u in want)


def test_consolidate_at_refuses_a_later_update() -> None:
    with pytest.raises(InvalidUsage, match="at 5"):
        consolidate_at([Update(b"k", b"", 5, 1)], 4)


@given(
    st.lists(
        st.lists(
            st.tuples(st.binary(max_size=1), st.binary(max_size=1), st.integers(0, 12), st.integers(-2, 2)),
            max_size=12,
        ),
        max_size=5,
    ),
    st.integers(0, 12),
)
def test_batch_sums_add_up_to_the_snapshot(batches: list[list[tuple[bytes, bytes, int, int]]], as_of: int) -> None:
    # How ReadHandle.snapshot uses them: a batch wholly at or before as_of
    # adds its sums; any other adds its updates at or before as_of.
    acc: dict[tuple[bytes, bytes], int] = {}
    every: list[Update] = []
    for rows in batches:
        updates = [Update(*r) for r in rows]
        every.extend(u for u in updates if u.ts <= as_of)
        summed = sum_batch(updates)
        assert (summed.min_ts, summed.max_ts) == (
            (min(u.ts for u in updates), max(u.ts for u in updates)) if updates else (None, None)
        )
        if summed.max_ts is not None and summed.max_ts <= as_of:
            for k, d in summed.sums.items():
                acc[k] = acc.get(k, 0) + d
        else:
            for u in updates:
                if u.ts <= as_of:
                    acc[u.key, u.value] = acc.get((u.key, u.value), 0) + u.diff
    assert consolidated_sums(acc, as_of) == consolidate_at(every, as_of)
