"""Shard state encoding: incremental diffs and rollups reproduce states exactly.

Diffs are computed per entry (not by flattening the whole state), so this checks
them against arbitrary command sequences: applying the encoded diff to the old
state must give the new one, and a rollup must round-trip.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from persist.frontier import Frontier
from persist.machine import (
    add_rollup,
    append,
    apply_compaction,
    downgrade_since,
    expire_leases,
    expire_writer,
    finish_gc,
    register,
    register_reader,
    register_writer,
)
from persist.state import (
    HollowBatch,
    ShardState,
    apply_diff,
    decode_diff,
    decode_rollup,
    diff_states,
    encode_diff,
    encode_rollup,
)

commands = st.lists(
    st.tuples(
        st.sampled_from(["append", "empty", "compact", "reader", "writer", "expire", "since", "rollup", "gc",
                         "register"]),
        st.integers(0, 30),
        st.integers(1, 3),
    ),
    max_size=60,
)


def _step(s: ShardState, kind: str, a: int, b: int, n: int) -> ShardState:
    now = 1_000 * n
    if kind in ("append", "empty"):
        lower = s.upper.ts
        assert lower is not None
        key = None if kind == "empty" else f"s/b/w/{n}"
        batch = HollowBatch(key, lower, Frontier.at(lower + b), 0, 0 if key is None else b, 10)
        out = append(s, writer_id="w", token=str(n), batch=batch, expected_upper=None, now_ms=now, lease_ms=10**9)
    elif kind == "compact" and len(s.batches) >= 2:
        i = a % (len(s.batches) - 1)
        inputs = s.batches[i : i + b + 1]
        output = HollowBatch(f"s/b/c/{n}", inputs[0].lower, inputs[-1].upper, 0, sum(x.len for x in inputs), 5)
        out = apply_compaction(s, inputs=tuple((x.key, x.lower) for x in inputs), output=output)
    elif kind == "reader":
        out = register_reader(s, f"r{a}", now, b * 1_000)
    elif kind == "writer":
        out = register_writer(s, f"x{a}", now, b * 1_000)
    elif kind == "expire":
        out = expire_leases(expire_writer(s, f"x{a}"), now)
    elif kind == "since" and s.readers:
        rid = sorted(s.readers)[a % len(s.readers)]
        out = downgrade_since(s, reader_id=rid, new_since=Frontier.at(a), seqno_hold=s.seqno, now_ms=now, lease_ms=10**6)
    elif kind == "rollup":
        out = add_rollup(s, s.seqno)
    elif kind == "register":  # a few names, values that change and repeat
        out = register(s, f"critical/c{a % 3}", f"since={b}")
    elif kind == "gc":
        dead = frozenset(g.key for g in s.garbage[: a % 5])
        out = finish_gc(s, deleted=dead, dropped_rollups=frozenset(s.rollups[:-1]))
    else:
        return s
    return out if isinstance(out, ShardState) else s


@given(commands)
def test_diffs_and_rollups_reproduce_every_state(cmds: list[tuple[str, int, int]]) -> None:
    s = ShardState(shard_id="s", seqno=0)
    s = register_writer(s, "w", 0, 10**9)  # type: ignore[assignment]
    assert isinstance(s, ShardState)
    replayed = apply_diff(None, decode_diff(encode_diff(diff_states(None, s, "init"))))
    assert replayed == s
    for n, (kind, a, b) in enumerate(cmds, start=1):
        new = _step(s, kind, a, b, n).with_seqno(s.seqno + 1)
        diff = decode_diff(encode_diff(diff_states(s, new, kind)))
        replayed = apply_diff(replayed, diff)
        assert replayed == new, (kind, diff)
        assert decode_rollup(encode_rollup(new)) == new
        s = new


@given(commands)
def test_with_seqno_changes_only_the_seqno(cmds: list[tuple[str, int, int]]) -> None:
    # with_seqno spells out the fields (issue 20): a field added to
    # ShardState must be carried over too.
    s = ShardState(shard_id="s", seqno=0, tombstone=True)
    for n, (kind, a, b) in enumerate(cmds, start=1):
        s = _step(s, kind, a, b, n)
        assert s.with_seqno(s.seqno + 7) == dataclasses.replace(s, seqno=s.seqno + 7)


def test_a_registration_is_a_state_change_only_when_its_value_changes() -> None:
    s = ShardState(shard_id="s", seqno=0)
    once = register(s, "txns", "registered")
    assert isinstance(once, ShardState)
    assert once.registrations == {"txns": "registered"}
    assert register(once, "txns", "registered") is once  # no transition, so no CaS
    closed = ShardState(shard_id="s", seqno=0, tombstone=True)
    assert not isinstance(register(closed, "txns", "registered"), ShardState)
