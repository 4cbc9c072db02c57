"""Random histories that are valid by construction, for the checker's own tests
and benchmark.

Processes issue operations with random think times and durations; each
operation takes effect at a random instant inside its interval (its
linearization point), and a sequential model of the tables — applied in
linearization-point order — decides its outcome and the timestamps a correct
system would annotate. So the history is strictly serializable, and its
timestamps respect real time, whatever the parameters; mutations of it
(`drop_read_element`, `swap_completions`) then test what the checkers catch.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
from dataclasses import dataclass
from typing import Final, final

from sim.history.model import (
    ADD,
    CREATE_TABLE,
    DELETE,
    DROP_TABLE,
    FAIL,
    INFO,
    NONE,
    OK,
    READ,
    UPDATE,
    History,
    HistoryBuilder,
)

__all__ = ["GenConfig", "drop_read_element", "generate", "swap_completions"]

_DUP: Final = "42P07"
_UNKNOWN: Final = "42P01"


@final
@dataclass(frozen=True)
class GenConfig:
    """Shape of a generated history.

    Tables live in a sliding window: every `ops_per_table` operations a new
    table is created and, with `drops`, the oldest of `window` is dropped, so a
    long history has many short-lived tables (as Elle's set workloads rotate
    keys) and reads stay small."""

    ops: int = 100
    processes: int = 4
    window: int = 2
    ops_per_table: int = 50
    drops: bool = True
    p_read: float = 0.4
    p_mutate: float = 0.0  # share of ops that UPDATE/DELETE (on tables named m*)
    p_info: float = 0.02
    mean_think_ns: int = 2_000
    mean_duration_ns: int = 10_000
    seed: int = 0


def generate(cfg: GenConfig) -> History:
    """A strictly serializable history with consistent timestamp annotations."""
    rng = random.Random(cfg.seed)
    # (kind, table, elements/args, process, invoke, complete, lin point, info, applies)
    plan: list[tuple[int, str, object, int, int, int, float, bool, bool]] = []
    clocks = [(0, p) for p in range(cfg.processes)]
    pid_of = list(range(cfg.processes))
    next_pid = cfg.processes
    tables: list[str] = []
    next_elem = 0
    created = 0

    def table_name(k: int) -> str:
        mutable = cfg.p_mutate > 0 and k % 2 == 1
        return f"{'m' if mutable else 't'}{k}"

    for g in range(cfg.ops):
        now, slot = heapq.heappop(clocks)
        inv = now + int(rng.expovariate(1 / cfg.mean_think_ns)) + 1
        dur = int(rng.expovariate(1 / cfg.mean_duration_ns)) + 1
        comp = inv + dur
        lin = inv + rng.random() * dur
        want_tables = g // cfg.ops_per_table + cfg.window
        payload: object = None
        if created < want_tables:
            kind, name = CREATE_TABLE, table_name(created)
            tables.append(name)
            created += 1
        elif cfg.drops and len(tables) > cfg.window and rng.random() < 0.5:
            kind, name = DROP_TABLE, tables.pop(0)
        else:
            active = tables[-cfg.window :]
            # Occasionally aim at a table that is not there (yet or any more).
            name = rng.choice(active) if rng.random() > 0.03 else table_name(max(0, created - cfg.window - 1))
            r = rng.random()
            if name.startswith("m") and r < cfg.p_mutate * 2:
                kind = UPDATE if rng.random() < 0.5 else DELETE
                payload = rng.random()
            elif r < cfg.p_read:
                kind = READ
            else:
                kind = ADD
                payload = (next_elem,)
                next_elem += 1
        info = rng.random() < cfg.p_info
        applies = not info or rng.random() < 0.5
        plan.append((kind, name, payload, pid_of[slot], inv, comp, lin, info, applies))
        if info:
            pid_of[slot] = next_pid
            next_pid += 1
        heapq.heappush(clocks, (comp, slot))

    order = sorted(range(len(plan)), key=lambda i: (plan[i][6], i))
    state: dict[str, set[int]] = {}
    dts = cts = 0
    fresh = 10**9
    rows: list[list[object]] = [[] for _ in plan]
    for i in order:
        kind, name, payload, pid, inv, comp, _, info, applies = plan[i]
        st, code = OK, None
        els: tuple[int, ...] = ()
        res: list[int] | None = None
        count = rts = wts = cat = NONE
        args: str | None = None
        exists = name in state
        if kind == CREATE_TABLE:
            if exists:
                st, code = FAIL, _DUP
            elif applies:
                state[name] = set()
                cts += 1
                cat = cts
        elif kind == DROP_TABLE:
            if not exists:
                st, code = FAIL, _UNKNOWN
            elif applies:
                del state[name]
                cts += 1
                cat = cts
        else:
            cat = cts
            if kind == ADD:
                assert isinstance(payload, tuple)
                els = payload
            if not exists:
                st, code = FAIL, _UNKNOWN
            elif kind == READ:
                res = sorted(state[name])
                rts = dts
            elif kind == ADD:
                if applies:
                    dts += 1
                    wts = dts
                    state[name].update(els)
            else:
                s = state[name]
                assert isinstance(payload, float)
                pivot = sorted(s)[int(payload * len(s))] if s else 0
                if kind == UPDATE:
                    args = json.dumps({"set": fresh, "where": [["=", pivot]]}, sort_keys=True)
                    hit = [x for x in s if x == pivot]
                    if applies and hit:
                        s.discard(pivot)
                        s.add(fresh)
                    fresh += 1
                else:
                    args = json.dumps({"where": [["<=", pivot]]}, sort_keys=True)
                    hit = [x for x in s if x <= pivot]
                    if applies:
                        s.difference_update(hit)
                if applies:
                    dts += 1
                    wts = dts
                    count = len(hit)
        if info:
            if st == FAIL:
                code = None
            st = INFO
            res = None
            count = NONE
            if not applies:
                wts = cat = NONE if kind != READ else cat
            rts = NONE
        if st == FAIL and kind in (ADD, UPDATE, DELETE):
            wts = NONE
        rows[i] = [i, pid, kind, name, inv, comp, st, els, res, count, args, code,
                   None if code is None else "generated", rts, wts, cat, None]
    b = HistoryBuilder()
    for row in rows:
        b.add_row(*row)  # type: ignore[arg-type]
    return b.build()


def _copy_with(h: History, edit: dict[int, dict[str, object]]) -> History:
    """`h` with some rows' fields replaced (by `Op` field name)."""
    from dataclasses import replace

    b = HistoryBuilder()
    for i in range(h.n):
        op = h.op(i)
        if i in edit:
            op = replace(op, **edit[i])  # type: ignore[arg-type]
        b.append(op)
    return b.build()


def drop_read_element(h: History, rng: random.Random) -> tuple[History, int, int] | None:
    """Removes one element from one non-empty ok read: (history, row, element),
    or None if there is no such read."""
    cands = [i for i in range(h.n) if h.kind[i] == READ and h.status[i] == OK and h.res_off[i + 1] > h.res_off[i]]
    if not cands:
        return None
    i = rng.choice(cands)
    res = list(h.result(i) or ())
    x = rng.choice(res)
    res.remove(x)
    return _copy_with(h, {i: {"result": tuple(res)}}), i, x


def swap_completions(h: History, rng: random.Random) -> History | None:
    """Swaps the completion times of two completed ops of different processes
    where the result is still a well-formed history (each op completes after
    its invoke and before its process's next invoke), or None."""
    nxt_inv: dict[int, int] = {}
    by_proc: dict[int, list[int]] = {}
    for i in range(h.n):
        by_proc.setdefault(h.process[i], []).append(i)
    for rows in by_proc.values():
        rows.sort(key=lambda r: h.invoke[r])
        for a, b in itertools.pairwise(rows):
            nxt_inv[a] = h.invoke[b]
    done = [i for i in range(h.n) if h.status[i] != INFO]
    for _ in range(50):
        if len(done) < 2:
            return None
        a, b = rng.sample(done, 2)
        ca, cb = h.complete[a], h.complete[b]
        if h.process[a] == h.process[b] or ca == cb:
            continue
        if cb < h.invoke[a] or ca < h.invoke[b]:
            continue
        if cb > nxt_inv.get(a, 2**62) or ca > nxt_inv.get(b, 2**62):
            continue
        return _copy_with(h, {a: {"complete_ns": cb}, b: {"complete_ns": ca}})
    return None
