"""Benchmark of the linearizability checkers on register, compare-and-set and
multiset-table histories (issue 34, item 6): operations per CPU-second, the
fraction decided (valid or invalid, not unknown) within the default bound,
whether each verdict matches the known ground truth, and peak memory.

Histories are generated, seeded and deterministic: every operation gets a
random interval on its client's timeline (2 to 64 clients) and a random
linearization point inside it; results are computed by applying the
operations in linearization-point order, so each history is linearizable by
construction. Its non-linearizable twin differs in one read, made stale:

- `register`: one-row table; INSERT of 0, then `UPDATE … SET v` (fresh v, count
  1) and SELECT. Stale read: returns the value of a write w1 that completed
  before a write w2 began, w2 having completed before the read began.
- `cas`: one-row table; `UPDATE … SET b WHERE = a` with its row count (1 or 0;
  b fresh) and SELECT. Stale read as for `register`, w1/w2 succeeded.
- `multiset`: one table; INSERT (fresh values, or a copy of a row present),
  `DELETE … WHERE = x` with its count, SELECT (the multiset) and COUNT. Stale
  read: a SELECT misses a row inserted once, before it began, that no DELETE
  invoked before it completed could have removed.
- `set`: grow-only sets (INSERT of unique values and SELECT) in tables of 100
  operations, the one workload checkers "blackbox" and "linear" model, so that
  they are timed on something they can judge. Stale read: as for `multiset`.

Where no read fits (a small history from many clients), three sequential
operations are appended to both twins (write, write, read; or insert, read).

Each checker runs on its own through `check_history(h, checkers=[name])` with
its default bound (what `coordsim check --checkers NAME` does; validation of
the history is included in its time): "table" on every history; "blackbox"
and "linear" on every history too, but their decided fraction and speed in
RESULT count only the `set` family, the only one they model (on the others
they must say `unknown`, which the table shows; a `valid` there would be
counted wrong). "linear" is skipped (unknown) above its 2,000-operation cap.
CPU time is `time.process_time` (single-threaded checkers; wall time on a
shared machine also counts other processes). Memory is peak RSS during the
check above the RSS just before it: the kernel's peak mark (VmHWM) is reset
through /proc/self/clear_refs before each check (Linux); where that fails,
the column is the `ru_maxrss` growth, which only shows new process peaks.
tracemalloc is not used: it slows the checkers several-fold. Memory freed by
an earlier check but kept by the allocator is reused without counting, so the
column understates a check's peak (0.0 = no growth); the first large check of
a kind shows it best.

ops/cpu-s in RESULT is over the decided runs (a run that ends at the bound
spends its 10 s without deciding anything; that CPU is reported apart, as
`undecided_cpu_s_…`).

`--emit DIR` writes every history as `NAME.edn` (`history_to_edn`) and
`NAME.json` (`history_to_porcupine`: one `{clientId, input, call, output,
return}` per operation, times in ns), and `manifest.json` with each one's
ground truth, so another checker can be timed on the same input. The
yardstick named in the issue is Porcupine (Go); no Go toolchain is installed
here, so it was not built or timed, and no ratio to it is reported.

    uv run python bench/linear.py [--quick] [--seed S] [--emit DIR]

The full run covers 100 to 100,000 operations from 2, 8 and 64 clients (many
runs of it end at the 10 s time limit, so it takes long); `--quick` covers 100
to 10,000 operations from 2 and 8 clients, and 64 clients on one register of
100 operations.

Last line: `RESULT ops_per_cpu_s_table=… decided_fraction_table=… correct_fraction_table=…
wrong_table=… undecided_cpu_s_table=… peak_mb_table=… …` (the same for blackbox and linear).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import random
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

# Run as a file, this directory comes first on sys.path, and bench/oracle.py
# would shadow the `oracle` package the checkers import.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench` as a package, for its helpers

from bench.checker import _reset_peak_rss  # noqa: E402
from sim.history.checker.run import check_history  # noqa: E402
from sim.history.checker.verdict import Outcome  # noqa: E402
from sim.history.export import history_to_edn, history_to_porcupine  # noqa: E402
from sim.history.model import (  # noqa: E402
    ADD,
    DELETE,
    NONE,
    OK,
    READ,
    UPDATE,
    History,
    HistoryBuilder,
    validate,
)

FAMILIES: Final = ("register", "cas", "multiset", "set")
CHECKERS: Final = ("table", "blackbox", "linear")
#: The families each checker models; its RESULT figures count only these.
MODELS: Final = {
    "table": frozenset(FAMILIES),
    "blackbox": frozenset({"set"}),
    "linear": frozenset({"set"}),
}
CLIENTS: Final = (2, 8, 64)
SIZES: Final = (100, 1_000, 10_000, 100_000)
QUICK_SIZES: Final = (100, 1_000, 10_000)
#: --quick leaves out 64 clients but for one register of 100 operations: from
#: 32 clients on, a "table" search typically runs into its 10 s time limit
#: (unknown), and a minute holds only a few of those.
QUICK_CLIENTS: Final = (2, 8)
QUICK_EXTRA: Final = (("register", 100, 64),)
SET_TABLE_OPS: Final = 100
_COUNT_KIND: Final = -1  # plan-only marker: a COUNT (a READ with args {"count": true})


# --- generation ------------------------------------------------------------------------------


@dataclass
class _Op:
    kind: int  # a KIND_CODE, or _COUNT_KIND
    client: int
    inv: int
    end: int
    lin: float
    table: str = "t"
    value: int = 0  # INSERT's row, UPDATE's SET, DELETE's WHERE =
    where: int | None = None  # CAS's WHERE =
    result: tuple[int, ...] = ()
    count: int = NONE


@dataclass
class _Plan:
    family: str
    ops: list[_Op] = field(default_factory=list)
    fresh: int = 1  # next unused value


def _intervals(n: int, clients: int, rng: random.Random) -> list[tuple[int, int, int, float]]:
    """(client, invoke, complete, linearization point) for n ops, each client
    one op at a time, think time ~1 µs and latency ~5 µs (exponential)."""
    clocks = [(10, c) for c in range(clients)]
    out = []
    for _ in range(n):
        now, c = heapq.heappop(clocks)
        inv = now + int(rng.expovariate(1 / 1_000)) + 1
        end = inv + int(rng.expovariate(1 / 5_000)) + 1
        out.append((c, inv, end, inv + rng.random() * (end - inv)))
        heapq.heappush(clocks, (end, c))
    return out


def _resolve(plan: _Plan, rng: random.Random) -> None:
    """Fills in results by applying the ops in linearization-point order (op
    index breaking ties): the history is linearizable by construction."""
    state: dict[str, list[int]] = {}
    for op in sorted(plan.ops, key=lambda o: o.lin):
        s = state.setdefault(op.table, [])
        if op.kind == ADD:
            if plan.family == "multiset" and s and rng.random() < 0.3:
                op.value = rng.choice(s)  # a second copy of a row: a multiset
            s.append(op.value)
        elif op.kind == UPDATE:
            if plan.family == "cas":
                # Mostly the current value (succeeds), else an old one (count 0).
                op.where = s[0] if rng.random() < 0.6 or op.value < 3 else rng.randrange(op.value)
            hit = op.where is None or s == [op.where]
            op.count = 1 if hit else 0
            if hit:
                s[:] = [op.value]
        elif op.kind == DELETE:
            if s and rng.random() < 0.8:
                op.value = rng.choice(s)
            op.count = s.count(op.value)
            s[:] = [v for v in s if v != op.value]
        elif op.kind == READ:
            op.result = tuple(sorted(s))
        else:
            op.count = len(s)


def _add_ops(plan: _Plan, n: int, clients: int, rng: random.Random) -> None:
    """Appends n ops of the plan's family (results unresolved)."""
    fam = plan.family
    for c, inv, end, lin in _intervals(n, clients, rng):
        j = len(plan.ops)
        op = _Op(READ, c, inv, end, lin)
        x = rng.random()
        if fam in ("register", "cas"):
            if j == 0:
                # The row, INSERT 0, before any other op begins.
                op.kind, op.value, op.inv, op.end, op.lin = ADD, 0, 1, 2, 1.5
            elif x < 0.5:
                op.kind, op.value = UPDATE, plan.fresh
                plan.fresh += 1
        elif fam == "multiset":
            if x < 0.35:
                op.kind, op.value = ADD, plan.fresh
                plan.fresh += 1
            elif x < 0.6:
                op.kind, op.value = DELETE, rng.randrange(plan.fresh)
            elif x < 0.7:
                op.kind = _COUNT_KIND
        else:
            op.table = f"s{j // SET_TABLE_OPS}"
            if x < 0.5:
                op.kind, op.value = ADD, plan.fresh
                plan.fresh += 1
        plan.ops.append(op)


def _stale_register(plan: _Plan) -> tuple[int, tuple[int, ...]] | None:
    """A read and the value it could not return (module docstring), or None."""
    ops = plan.ops
    writes = sorted((i for i, o in enumerate(ops) if o.kind in (ADD, UPDATE) and (o.kind == ADD or o.count == 1)),
                    key=lambda i: ops[i].end)
    reads = [i for i, o in enumerate(ops) if o.kind == READ]
    for r in reads[len(reads) // 2 :] + reads[: len(reads) // 2]:
        done = [w for w in writes if ops[w].end < ops[r].inv]
        if not done:
            continue
        w2 = max(done, key=lambda w: ops[w].inv)
        w1s = [w for w in done if ops[w].end < ops[w2].inv]
        if w1s:
            return r, (ops[w1s[-1]].value,)
    return None


def _stale_table(plan: _Plan) -> tuple[int, tuple[int, ...]] | None:
    """A SELECT and its result less a row it must have seen, or None."""
    ops = plan.ops
    inserts: dict[tuple[str, int], list[int]] = {}
    deletes: dict[tuple[str, int], list[int]] = {}
    for i, o in enumerate(ops):
        if o.kind == ADD:
            inserts.setdefault((o.table, o.value), []).append(i)
        elif o.kind == DELETE:
            deletes.setdefault((o.table, o.value), []).append(ops[i].inv)
    reads = [i for i, o in enumerate(ops) if o.kind == READ]
    for r in reads[len(reads) // 2 :] + reads[: len(reads) // 2]:
        rd = ops[r]
        for v in rd.result:
            ins = inserts[(rd.table, v)]
            if (
                len(ins) == 1
                and ops[ins[0]].end < rd.inv
                and all(t > rd.end for t in deletes.get((rd.table, v), ()))
            ):
                res = list(rd.result)
                res.remove(v)
                return r, tuple(res)
    return None


def _build(plan: _Plan, stale: tuple[int, tuple[int, ...]] | None) -> History:
    b = HistoryBuilder()
    for i, o in enumerate(plan.ops):
        result = o.result if stale is None or stale[0] != i else stale[1]
        if o.kind == ADD:
            b.add_row(i, o.client, ADD, o.table, o.inv, o.end, OK, (o.value,))
        elif o.kind == UPDATE:
            args = (
                {"set": o.value} if o.where is None else {"set": o.value, "where": [["=", o.where]]}
            )
            b.add_row(i, o.client, UPDATE, o.table, o.inv, o.end, OK, count=o.count,
                      args=json.dumps(args, sort_keys=True))
        elif o.kind == DELETE:
            b.add_row(i, o.client, DELETE, o.table, o.inv, o.end, OK, count=o.count,
                      args=json.dumps({"where": [["=", o.value]]}))
        elif o.kind == READ:
            b.add_row(i, o.client, READ, o.table, o.inv, o.end, OK, result=result)
        else:
            b.add_row(i, o.client, READ, o.table, o.inv, o.end, OK, result=(), count=o.count,
                      args=json.dumps({"count": True}))
    h = b.build()
    validate(h)
    return h


def generate(family: str, n: int, clients: int, seed: int) -> tuple[History, History]:
    """(linearizable history, its twin with one stale read), both seeded."""
    rng = random.Random(f"{family}/{n}/{clients}/{seed}")
    plan = _Plan(family)
    _add_ops(plan, n, clients, rng)
    _resolve(plan, rng)
    find = _stale_register if family in ("register", "cas") else _stale_table
    stale = find(plan)
    if stale is None:
        # Append, after everything, ops on one client that make a stale read
        # possible (write, write, read / insert, read), and look again.
        t0 = max(o.end for o in plan.ops) + 10
        extra = (
            [(UPDATE, plan.fresh), (UPDATE, plan.fresh + 1), (READ, 0)]
            if family in ("register", "cas")
            else [(ADD, plan.fresh), (READ, 0)]
        )
        table = plan.ops[-1].table
        for k, (kind, v) in enumerate(extra):
            plan.ops.append(_Op(kind, 0, t0 + 10 * k, t0 + 10 * k + 5, t0 + 10 * k + 2, table, v))
        plan.fresh += 2
        _resolve_tail(plan, len(extra))
        stale = find(plan)
        assert stale is not None, (family, n, clients)
    return _build(plan, None), _build(plan, stale)


def _resolve_tail(plan: _Plan, k: int) -> None:
    """Results of the last k (sequential, after everything) ops, given the
    ones before: writes succeed (a CAS from the current value)."""
    state: dict[str, list[int]] = {}
    for o in sorted(plan.ops[:-k], key=lambda o: o.lin):
        s = state.setdefault(o.table, [])
        if o.kind == ADD:
            s.append(o.value)
        elif o.kind == UPDATE and o.count == 1:
            s[:] = [o.value]
        elif o.kind == DELETE:
            s[:] = [v for v in s if v != o.value]
    for o in plan.ops[-k:]:
        s = state.setdefault(o.table, [])
        if o.kind == ADD:
            s.append(o.value)
        elif o.kind == UPDATE:
            o.where = s[0] if plan.family == "cas" else None
            o.count = 1
            s[:] = [o.value]
        else:
            o.result = tuple(sorted(s))


# --- measurement -----------------------------------------------------------------------------


def _status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@dataclass
class _Run:
    family: str
    n: int
    clients: int
    linearizable: bool
    checker: str
    cpu_s: float
    outcome: Outcome
    peak_mb: float

    @property
    def decided(self) -> bool:
        return self.outcome in (Outcome.VALID, Outcome.INVALID)

    @property
    def correct(self) -> bool:
        return self.outcome is (Outcome.VALID if self.linearizable else Outcome.INVALID)

    @property
    def wrong(self) -> bool:
        return self.decided and not self.correct


def _measure(h: History, checker: str) -> tuple[float, Outcome, float, bool]:
    """CPU seconds, outcome, peak MB above the start, whether VmHWM was used."""
    gc.collect()
    hwm = _reset_peak_rss()
    rss0 = _status_kb("VmRSS:") if hwm else None
    max0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c0 = time.process_time()
    report = check_history(h, checkers=[checker])
    cpu = time.process_time() - c0
    peak = _status_kb("VmHWM:") if hwm else None
    if peak is not None and rss0 is not None:
        mb = max(0, peak - rss0) / 1024
    else:
        hwm = False
        mb = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - max0) / 1024
    return cpu, report.outcome, mb, hwm


def _grid(quick: bool) -> list[tuple[str, int, int]]:
    """(family, operations, clients) to generate, in order."""
    if not quick:
        return [(f, n, c) for f in FAMILIES for n in SIZES for c in CLIENTS]
    grid = [(f, n, c) for f in FAMILIES for n in QUICK_SIZES for c in QUICK_CLIENTS]
    return grid + list(QUICK_EXTRA)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="sizes up to 10,000 operations (default 100,000)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--emit", type=Path, default=None, metavar="DIR",
                        help="write each history as DIR/NAME.edn and DIR/NAME.json (Porcupine-style)")
    args = parser.parse_args(argv)
    grid = _grid(args.quick)
    if args.emit is not None:
        args.emit.mkdir(parents=True, exist_ok=True)
    manifest: list[dict[str, object]] = []
    runs: list[_Run] = []
    all_hwm = True
    wall0 = time.perf_counter()
    sizes = sorted({n for _, n, _ in grid})
    clients_used = sorted({c for _, _, c in grid})
    print(f"seed {args.seed}; {len(grid)} history pairs; sizes {', '.join(f'{n:,}' for n in sizes)}; clients "
          f"{', '.join(map(str, clients_used))}; checkers {', '.join(CHECKERS)} (default bounds)")
    head = f"{'family':<9} {'ops':>7} {'cl':>3} {'truth':<6} " + " ".join(
        f"{c + ' verdict':>16} {'ops/cpu-s':>10} {'MB':>6}" for c in CHECKERS
    )
    print(head)
    for family, n, clients in grid:
        pair = generate(family, n, clients, args.seed)
        for linearizable, h in zip((True, False), pair, strict=True):
            name = f"{family}-{n}-c{clients}-{'lin' if linearizable else 'stale'}"
            if args.emit is not None:
                (args.emit / f"{name}.edn").write_text(history_to_edn(h))
                (args.emit / f"{name}.json").write_text(history_to_porcupine(h))
                manifest.append({"name": name, "family": family, "ops": h.n, "clients": clients,
                                 "linearizable": linearizable, "seed": args.seed})
            cells = []
            for checker in CHECKERS:
                cpu, outcome, mb, hwm = _measure(h, checker)
                all_hwm &= hwm
                run = _Run(family, h.n, clients, linearizable, checker, cpu, outcome, mb)
                runs.append(run)
                mark = "!" if run.wrong else ("" if run.decided else "?")
                speed = f"{h.n / cpu:,.0f}" if cpu > 0 else "inf"
                cells.append(f"{outcome.value + mark:>16} {speed:>10} {mb:>6.1f}")
            truth = "lin" if linearizable else "stale"
            print(f"{family:<9} {h.n:>7,} {clients:>3} {truth:<6} " + " ".join(cells), flush=True)
    if args.emit is not None:
        (args.emit / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        print(
            f"wrote {2 * len(manifest)} histories (EDN and Porcupine JSON) and manifest.json to {args.emit}"
        )
    print("'?' = not decided (unknown/skipped); '!' = a verdict against the ground truth")
    mem = "peak RSS above the RSS before the check (VmHWM reset per check)" if all_hwm else \
        "ru_maxrss growth (new process peaks only; VmHWM reset unavailable)"
    print(f"MB = {mem}; CPU = time.process_time, history validation included")
    result = []
    print(f"{'checker':<9} {'families':<28} {'runs':>5} {'ops/cpu-s':>10} {'decided':>8} {'correct':>8} "
          f"{'wrong':>6} {'peak MB':>8} {'undecided cpu-s':>15}  wrong elsewhere")
    for checker in CHECKERS:
        mine = [r for r in runs if r.checker == checker and r.family in MODELS[checker]]
        other_wrong = sum(
            r.wrong for r in runs if r.checker == checker and r.family not in MODELS[checker]
        )
        done = [r for r in mine if r.decided]
        ops = sum(r.n for r in done)
        cpu = sum(r.cpu_s for r in done)
        rate = ops / cpu if cpu > 0 else 0.0
        lost = sum(r.cpu_s for r in mine if not r.decided)
        decided = sum(r.decided for r in mine) / len(mine)
        correct = sum(r.correct for r in mine) / len(mine)
        wrong = sum(r.wrong for r in mine)
        peak = max(r.peak_mb for r in mine)
        fams = ",".join(f for f in FAMILIES if f in MODELS[checker])
        print(f"{checker:<9} {fams:<28} {len(mine):>5} {rate:>10,.0f} {decided:>8.3f} {correct:>8.3f} "
              f"{wrong:>6} {peak:>8.1f} {lost:>15.1f}  {other_wrong}")
        result += [f"ops_per_cpu_s_{checker}={rate:.0f}", f"decided_fraction_{checker}={decided:.3f}",
                   f"correct_fraction_{checker}={correct:.3f}", f"wrong_{checker}={wrong + other_wrong}",
                   f"undecided_cpu_s_{checker}={lost:.1f}", f"peak_mb_{checker}={peak:.1f}"]
    print(f"ops/cpu-s = operations / CPU seconds over the decided runs of the checker's families (the CPU "
          f"spent on undecided ones is apart); wall {time.perf_counter() - wall0:.0f}s")
    print("RESULT " + " ".join(result))


if __name__ == "__main__":
    main()
