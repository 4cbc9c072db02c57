"""The search of checker "table" (`sim.history.checker.multiset`): Wing &
Gong's linearizability search with Lowe's memoization over one table's
operations, as Porcupine does it, with reductions that keep it exact, over the
model of `sim.history.checker.multiset_model`. The search is iterative (no
recursion limit) and bounded: it stops with `SearchStop` past `max_states`
configurations or its deadline, and the caller must then call the table
unknown, never valid.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, final

from sim.history.checker.multiset_model import (
    HI_ANY,
    LO_ANY,
    OP_COUNT,
    OP_DELETE,
    OP_GONE,
    OP_READ,
    OP_SET,
    OP_SHIFT,
    OP_THERE,
    Spec,
    State,
    apply_op,
)
from sim.history.checker.tables import INF

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["OUT_OF_TIME", "OVER_BOUND", "SearchResult", "SearchStop", "search"]

#: Why a search stopped (`SearchStop.reason`): the coverage's reasons.
OVER_BOUND: Final = "over the search bound"
OUT_OF_TIME: Final = "out of time"


@final
@dataclass
class SearchResult:
    """A finished search: linearizable (`ok`), or the deepest point it
    reached — the return of op `stuck`, which no order of the ops invoked
    before it (`prefix` of them, `stuck` included) lets happen: the shortest
    failing prefix. `configs`: the configurations it cached."""

    ok: bool
    configs: int
    stuck: int = -1  # op index (in the search's order)
    states: list[State] = field(default_factory=list)  # states seen there (a sample)
    pending: list[int] = field(default_factory=list)  # ops not yet linearized there
    prefix: int = 0


@final
class SearchStop(Exception):
    """The search hit its bound: `reason` is `OVER_BOUND` or `OUT_OF_TIME`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: Dominance checks per new configuration: how many of the most recently
#: linearized indeterminate ops to try leaving out (see `search`).
_DOMINANCE: Final = 16


def _pure(sp: Spec) -> bool:
    """Whether op `sp` leaves the state as it is whenever it can happen: an
    observation (read, COUNT, "found the table unknown/existing") or an
    UPDATE/DELETE that reports 0 rows (a failed compare-and-set)."""
    code = sp[0]
    return code in (OP_READ, OP_COUNT, OP_GONE, OP_THERE) or (code in (OP_SET, OP_SHIFT, OP_DELETE) and sp[5] == 0)


@final
class _Needs:
    """The indeterminate ops worth trying in one configuration (`cands`:
    (call node, op, state after it), in call order), computed once for it.

    An indeterminate op can always move later (it has no return, so real
    time puts nothing after it) and can always be dropped, so it need only
    be tried right before an op X that depends on it: one possible after it
    but not before, or whose result differs — unless X overwrites it (X
    after y = X alone) or the two commute (y then X = X then y, reached from
    X's configuration). Deferring to X that way assumes X's configuration is
    explored: sure for a determinate X, and for an indeterminate one only if
    it does not defer to y in turn, so there only to a lower index (two
    commuting ops each leaving it to the other would explore neither).
    Overwriting needs no such order: it shortens the linearization.
    Pending full reads are kept by their result (none is possible in `s`:
    it would have been linearized at once); UPDATEs of every row to one
    value (`blind`) depend only on the number of rows, so on no `OP_SET`."""

    __slots__ = ("cands", "key", "ret")

    def __init__(
        self, key: tuple[int, int, int, State], specs: Sequence[Spec], s: State, nxt: list[int],
        is_call: list[bool], op_of: list[int], blind: list[bool], infos: list[tuple[int, int]], ib: int,
        bit_of: list[int],
    ) -> None:
        self.key = key
        step = apply_op
        reads: set[tuple[int, ...]] = set()
        # (spec, outcome in s, j if indeterminate else -1) of candidates that may depend on y
        others: list[tuple[Spec, State | Literal[False], int]] = []
        x = nxt[0]
        while is_call[x]:
            sp = specs[op_of[x]]
            if sp[0] == OP_READ and sp[1] == LO_ANY and sp[2] == HI_ANY and not sp[3]:
                reads.add(sp[4])
            elif not blind[op_of[x]]:
                others.append((sp, step(sp, s), -1))
            x = nxt[x]
        self.ret = x  # the first return: the pending calls are the nodes before it
        pending = [(node, j) for node, j in infos[: bisect_left(infos, (x, -1))] if not ib & bit_of[j]]
        for _, j in pending:
            if not blind[j]:
                others.append((specs[j], step(specs[j], s), j))
        self.cands: list[tuple[int, int, State]] = []
        n = len(s) if s else 0
        for node, j in pending:
            y = specs[j]
            if blind[j] and not others and n:
                # The common case (an indeterminate write of a register),
                # without a step: needed only by a read of its outcome.
                sy: State | Literal[False] = (y[4],) * n
                if sy in reads:
                    self.cands.append((node, j, sy))
                continue
            sy = step(y, s)
            if sy is False or sy == s:
                continue
            if (
                sy in reads
                or (s is None) != (sy is None)
                or (s is not None and sy is not None and len(s) != len(sy))  # blind ops may depend on it
                or any(
                    a is not False and (b is False or (b != a and (rank > j or step(y, b) != a)))
                    for sx, b, rank in others
                    if rank != j
                    for a in (step(sx, sy),)
                )
            ):
                self.cands.append((node, j, sy))


def _blind(sp: Spec) -> bool:
    """An UPDATE … SET v of every row: its outcome depends only on how many rows there are."""
    return sp[0] == OP_SET and sp[1] == LO_ANY and sp[2] == HI_ANY and not sp[3]


def search(
    specs: Sequence[Spec],
    calls: Sequence[int],
    rets: Sequence[int],
    init: State,
    *,
    max_states: int,
    deadline: float,
    clock: Callable[[], float],
) -> SearchResult:
    """WGL over ops in call order (`rets[j] >= INF`: indeterminate, may take
    effect any time after its call, or never).

    Iterative, as Porcupine: a doubly linked list of the determinate ops'
    call and return entries in time order (a call before a return at one
    instant, so equal times are concurrent); the search linearizes one of
    the pending calls before the first return, backtracking when a return is
    reached unlinearized; a cache of configurations (linearized ops, state)
    prunes those seen before. The linearized set is kept as `(lo, win, ib)`:
    every determinate op below index `lo` is linearized, `win` is the bitset
    of those at or above it (a few concurrent ops: small integers, never an
    n-bit one), `ib` that of the indeterminate ones.

    Reductions keep the configurations few. A *pure* op (`_pure`) that can
    happen now is linearized at once, without trying the alternatives: any
    linearization that places it later stays one with it moved here (it
    changes no state, and everything real time puts before it is already
    linearized), so the configuration with it is equivalent to the one
    without. Indeterminate ops are never forced and are tried last, only
    where some candidate depends on them (`_Needs`); a configuration that
    differs from a cached one only by indeterminate ops linearized is
    pruned (it can do nothing the other cannot, by never linearizing them),
    and so is an op right after an indeterminate op Y that gives the state
    it gives without Y: Y's parent configuration tries it too (it is a
    candidate there: linearizing Y passes no return).
    """
    m = len(specs)
    info = [r >= INF for r in rets]
    # Which pass tries op j: 0 pure (at once), 1 determinate, 2 indeterminate.
    cls = [2 if info[j] else 0 if _pure(specs[j]) else 1 for j in range(m)]
    # Bit positions: determinate ops and indeterminate ones counted apart.
    pos = [0] * m
    n_ok = n_info = 0
    for j in range(m):
        if info[j]:
            pos[j] = n_info
            n_info += 1
        else:
            pos[j] = n_ok
            n_ok += 1
    if n_ok == 0:
        return SearchResult(True, 0)
    bit_of = [1 << pos[j] if info[j] else 0 for j in range(m)]
    evs = sorted([(calls[j], 0, j) for j in range(m)] + [(rets[j], 1, j) for j in range(m) if not info[j]])
    size = len(evs) + 1
    op_of = [0] * size
    is_call = [False] * (size + 1)  # is_call[-1]: the list's end, as a return
    match = [0] * size  # determinate call node -> its return node
    call_node = [0] * m
    calls_before = [0] * size  # calls among the nodes before this one
    infos: list[tuple[int, int]] = []  # (call node, op) of indeterminate ops: not in the list
    listed = [0]
    n_calls = 0
    for node, (_, r, j) in enumerate(evs, start=1):
        op_of[node] = j
        calls_before[node] = n_calls
        if r == 0:
            is_call[node] = True
            call_node[j] = node
            n_calls += 1
            if info[j]:
                infos.append((node, j))
                continue
        else:
            match[call_node[j]] = node
        listed.append(node)
    nxt = [-1] * size
    prv = [-1] * size
    for a, b in itertools.pairwise(listed):
        nxt[a] = b
        prv[b] = a

    state: State = init
    lo = win = ib = 0
    remaining = n_ok
    # A configuration's key: (win << 32 | lo) << 32 | the state's id, paired
    # with `ib` when that is not 0 — one small integer, not a tuple of four:
    # the cache is the search's memory (about 70 bytes a configuration).
    ids: dict[State, int] = {init: 0}
    cache: set[int | tuple[int, int]] = {0}
    # (node, state, lo, win, ib, pass, needs, index in needs.cands)
    stack: list[tuple[int, State, int, int, int, int, _Needs | None, int]] = []
    ipath: list[int] = []  # bits of the indeterminate ops linearized, in path order
    best = -1
    out = SearchResult(False, 0)
    entry = nxt[0]
    tries = 0
    pas = 0
    p2 = -1  # pass 2: the index in needs.cands to try next
    step = apply_op
    blind = [_blind(sp) for sp in specs]
    full: list[tuple[int, ...] | None] = [
        sp[4] if sp[0] == OP_READ and sp[1] == LO_ANY and sp[2] == HI_ANY and not sp[3] else None for sp in specs
    ]
    needs: _Needs | None = None
    while True:
        if p2 < 0:
            if is_call[entry]:
                j = op_of[entry]
                if cls[j] != pas:
                    entry = nxt[entry]
                    continue
                tries += 1
                if not tries & 4095 and clock() > deadline:
                    raise SearchStop(OUT_OF_TIME)
                fr = full[j]
                ns = step(specs[j], state) if fr is None else state if state == fr else False
                if ns is False:
                    entry = nxt[entry]
                    continue
                d = pos[j] - lo
                nwin = win | (1 << d)
                nlo = lo
                if d == 0:
                    t = (~nwin & (nwin + 1)).bit_length() - 1  # trailing ones
                    nwin >>= t
                    nlo = lo + t
                sid = ids.get(ns)
                if sid is None:
                    sid = ids[ns] = len(ids)
                packed = ((nwin << 32 | nlo) << 32) | sid
                key: int | tuple[int, int] = (packed, ib) if ib else packed
                seen = key in cache
                if not seen and stack and stack[-1][5] == 2:
                    # The last op was indeterminate (Y): if this op gives
                    # the same state before Y, Y's parent tries that.
                    alt = step(specs[j], stack[-1][1])
                    seen = alt is not False and alt == ns
                if not seen and ib:
                    for b in ipath[-_DOMINANCE:]:
                        if ((packed, ib ^ b) if ib ^ b else packed) in cache:
                            seen = True
                            break
                if not seen:
                    if len(cache) >= max_states:
                        raise SearchStop(OVER_BOUND)
                    cache.add(key)
                    stack.append((entry, state, lo, win, ib, pas, None, 0))
                    state, lo, win = ns, nlo, nwin
                    for x in (entry, match[entry]):
                        nxt[prv[x]] = nxt[x]
                        if nxt[x] != -1:
                            prv[nxt[x]] = prv[x]
                    remaining -= 1
                    if remaining == 0:
                        return SearchResult(True, len(cache))
                    entry = nxt[0]
                    pas = 0
                    continue
                if pas == 1:
                    entry = nxt[entry]
                    continue
                # A pure op leads to a configuration seen before: this one is
                # equivalent to it, so it is done too.
            elif pas == 0:
                pas = 1
                entry = nxt[0]
                continue
            elif n_info:
                ck = (lo, win, ib, state)
                if needs is None or needs.key != ck:
                    needs = _Needs(ck, specs, state, nxt, is_call, op_of, blind, infos, ib, bit_of)
                p2 = 0
                continue
            else:
                _deepest(out, entry, best, state, nxt, is_call, op_of, calls_before)
                best = max(best, entry)
        else:
            assert needs is not None
            cands = needs.cands
            pushed = False
            while p2 < len(cands):
                node, j, ns = cands[p2]
                tries += 1
                if not tries & 4095 and clock() > deadline:
                    raise SearchStop(OUT_OF_TIME)
                bit = bit_of[j]
                nib = ib | bit
                sid = ids.get(ns)
                if sid is None:
                    sid = ids[ns] = len(ids)
                packed = ((win << 32 | lo) << 32) | sid
                key = (packed, nib)
                seen = key in cache
                if not seen and stack and stack[-1][5] == 2:
                    alt = step(specs[j], stack[-1][1])
                    seen = alt is not False and alt == ns
                if not seen:
                    # Dominated by the same configuration without an
                    # indeterminate op (this one, or one linearized recently)?
                    for b in (bit, *ipath[-_DOMINANCE:]):
                        if ((packed, nib ^ b) if nib ^ b else packed) in cache:
                            seen = True
                            break
                if len(cache) >= max_states:
                    raise SearchStop(OVER_BOUND)
                cache.add(key)
                if not seen:
                    stack.append((node, state, lo, win, ib, 2, needs, p2))
                    state, ib = ns, nib
                    ipath.append(bit)
                    entry = nxt[0]
                    pas = 0
                    p2 = -1
                    pushed = True
                    break
                p2 += 1
            if pushed:
                continue
            entry = needs.ret
            p2 = -1
            _deepest(out, entry, best, state, nxt, is_call, op_of, calls_before)
            best = max(best, entry)
        # Backtrack, past the pure ops linearized at once (their configuration
        # was equivalent to the one before them).
        while True:
            if not stack:
                out.configs = len(cache)
                return out
            entry, state, lo, win, ib, pas, frame_needs, idx = stack.pop()
            if pas == 2:
                ipath.pop()
                needs, p2 = frame_needs, idx + 1
                break
            for x in (match[entry], entry):
                nxt[prv[x]] = x
                if nxt[x] != -1:
                    prv[nxt[x]] = x
            remaining += 1
            if pas != 0:
                entry = nxt[entry]
                break


def _deepest(
    out: SearchResult, entry: int, best: int, state: State,
    nxt: list[int], is_call: list[bool], op_of: list[int], calls_before: list[int],
) -> None:
    """Records a dead end at return `entry` if it is the deepest yet."""
    if entry < best:
        return
    if entry > best:
        out.states = []
        out.stuck = op_of[entry]
        out.pending = []
        x = nxt[0]
        while x != entry:
            if is_call[x]:
                out.pending.append(op_of[x])
            x = nxt[x]
        out.prefix = calls_before[entry]
    if len(out.states) < 4 and state not in out.states:
        out.states.append(state)
