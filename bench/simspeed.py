"""Virtual-mode simulation speed: simulated operations per wall-second.

For select-one, insert and update on `decoupled` and `event-loop` at 64
clients: simulated ops per wall-second (a timed run in a fresh process,
nothing instrumented), then loop callbacks and timers per simulated operation
(the loop's own counts, over a second run) and the loop floor they imply (what
those events cost with no model code at all, so the ceiling on ops per
wall-second that making the model code free would reach), then, for every pair, the top
functions by own time under cProfile and the own time summed by component
(package, library, asyncio, C builtins) (a third run; cProfile's overhead is
why it never times anything). The first level of 64 clients is a warm-up; the
measurement is the second. Last, the anomaly sweep issue 20 names: 200 seeds
of crash-restart on decoupled, every checker, in one process.

`--against REV` measures a git revision beside this tree in the same run:
each round times both in fresh processes, in alternating order, and the
ratios are per round. The revision is checked out into a temporary worktree,
removed afterwards; its sweep verdicts must equal this tree's.

Usage: uv run python bench/simspeed.py [--quick] [--top N] [--against REV] [--rounds N]
Last line: `RESULT sim_ops_per_wall_s=… events_per_op=… select_one_el=… insert_dec=… update_dec=…
select_one_dec=… insert_el=… update_el=… sweep_s=… floor_callback_us=… floor_timer_us=…
ceiling_<pair>=…` (`sim_ops_per_wall_s` and
`events_per_op` are select-one on decoupled, the figure the issue's target is
stated in; the others are each pair's ops per wall-second, means over the
rounds; `floor_callback_us`, `floor_timer_us` the loop floor's unit costs and
`ceiling_<pair>` its ops per wall-second; with `--against`, `speedup_<pair>=…` and `sweep_speedup=…` follow,
each the mean of the per-round ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.compare.runner import run_pair
from sim.load.run_config import RunConfig
from sim.runtime.core import Runtime, run
from sim.runtime.loop import VirtualEventLoop

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[1]
PAIRS = (
    ("select-one", "decoupled", "select_one_dec"),
    ("select-one", "event-loop", "select_one_el"),
    ("insert", "decoupled", "insert_dec"),
    ("insert", "event-loop", "insert_el"),
    ("update", "decoupled", "update_dec"),
    ("update", "event-loop", "update_el"),
)
SWEEP = ("crash-restart", "decoupled")

# Run in a fresh interpreter with a tree's root first on sys.path, so this
# tree and an older revision are timed by the same code. Uses only what both
# provide (run_pair's on_level, the sweep's tasks/sweep).
_MEASURE = """
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from sim.compare.runner import run_pair
from sim.load.run_config import RunConfig
workload, config, ops = sys.argv[2], sys.argv[3], int(sys.argv[4])
cfg = RunConfig(mode="virtual", configurations=(config,), workloads=(workload,), concurrency=(64, 64),
             ops_per_level=ops, warmup_ops=20, repeat=1)
marks = []
with tempfile.TemporaryDirectory() as tmp:
    out = run_pair(cfg, config, workload, Path(tmp) / "trace", on_level=lambda r: marks.append(time.perf_counter()))
row = out.rows[1]
print(json.dumps({"ops": row.ops, "simulated_s": row.window_s * row.repeats, "wall_s": marks[1] - marks[0]}))
"""
_SWEEP = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from sim.nemesis.sweep import sweep, tasks
work = tasks(sys.argv[2], sys.argv[3], seeds=int(sys.argv[4]))
start = time.perf_counter()
results = sweep(work, jobs=1)
wall = time.perf_counter() - start
print(json.dumps({"wall_s": wall, "ops": sum(r.ops for r in results),
                  "verdicts": [[r.seed, r.outcome, sorted(r.anomalies.items())] for r in results]}))
"""


@dataclass
class Counts:
    callbacks: int = 0
    timers: int = 0


def _config(workload: str, config: str, ops: int) -> RunConfig:
    return RunConfig(
        mode="virtual", configurations=(config,), workloads=(workload,), concurrency=(64, 64),
        ops_per_level=ops, warmup_ops=20, repeat=1,
    )


def _in_tree(root: Path, script: str, *args: object) -> dict[str, Any]:
    """Runs `script` in a fresh interpreter on the tree at `root`; its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(root), *map(str, args)],
        cwd=root, env=env, capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"simspeed: measuring {root} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@contextlib.contextmanager
def _worktree(rev: str) -> Iterator[Path]:
    """`rev` checked out (detached) into a temporary directory this bench
    makes and removes; nothing else is touched."""
    parent = Path(tempfile.mkdtemp(prefix="coordsim-simspeed-"))
    tree = parent / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), rev], check=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(parent, ignore_errors=True)


@contextlib.contextmanager
def _counting(counts: Counts) -> Iterator[None]:
    """Adds up the statistics of every virtual loop closed in the block
    (the loop counts its callbacks and timers itself)."""
    close = VirtualEventLoop.close

    def counted_close(self: VirtualEventLoop) -> None:
        stats = self.statistics()
        counts.callbacks += stats.callbacks
        counts.timers += stats.timers
        close(self)

    VirtualEventLoop.close = counted_close  # type: ignore[method-assign]
    try:
        yield
    finally:
        VirtualEventLoop.close = close  # type: ignore[method-assign]


@dataclass(frozen=True)
class Floor:
    """What the virtual loop costs with no model code: wall seconds per
    callback (a task step that only yields) and per timer (a sleep, less the
    two callbacks it also takes: the timer's and the task's wake-up)."""

    callback_s: float
    timer_s: float
    samples: int

    def per_op(self, callbacks: float, timers: float) -> float:
        """Seconds per operation of `callbacks` (fired timers included, as the
        loop counts them) and `timers` per operation."""
        return callbacks * self.callback_s + timers * self.timer_s


def _loop_floor(steps: int, rounds: int = 3) -> Floor:
    """64 tasks that each yield `steps` times, then 64 that each sleep
    `steps` times, on the virtual loop through `Runtime.sleep`; the fastest
    of `rounds` runs of each (the floor: noise only ever adds)."""

    async def yields(rt: Runtime) -> float:
        async def task() -> None:
            for _ in range(steps):
                await asyncio.sleep(0)

        start = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for _ in range(64):
                tg.create_task(task())
        return time.perf_counter() - start

    async def sleeps(rt: Runtime) -> float:
        async def task(i: int) -> None:
            for k in range(steps):
                await rt.sleep(1e-4 * (1 + (i * 7 + k) % 13))  # deadlines spread over the heap

        start = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for i in range(64):
                tg.create_task(task(i))
        return time.perf_counter() - start

    n = 64 * steps
    callback = min(run(yields) for _ in range(rounds)) / n
    sleep = min(run(sleeps) for _ in range(rounds)) / n
    return Floor(callback, sleep - 2 * callback, n)


def _per_op(workload: str, config: str, ops: int) -> tuple[float, float]:
    """Callbacks and timers per operation over the whole run (warm-up levels
    included: they do the same work per operation)."""
    counts = Counts()
    cfg = _config(workload, config, ops)
    with _counting(counts), tempfile.TemporaryDirectory() as tmp:
        out = run_pair(cfg, config, workload, Path(tmp) / "trace")
    total = sum(r.ops for r in out.rows) + cfg.warmup_ops
    return counts.callbacks / total, counts.timers / total


def _profile(workload: str, config: str, ops: int, top: int) -> list[str]:
    prof = cProfile.Profile()
    cfg = _config(workload, config, ops)
    with tempfile.TemporaryDirectory() as tmp:
        prof.enable()
        out = run_pair(cfg, config, workload, Path(tmp) / "trace")
        prof.disable()
    total_ops = sum(r.ops for r in out.rows) + cfg.warmup_ops
    stats = pstats.Stats(prof)
    rows: list[tuple[float, int, str]] = []
    for (path, line, func), (_cc, ncalls, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = "/".join(Path(path).parts[-2:]) if path != "~" else "builtin"
        rows.append((tottime, ncalls, f"{where}:{line}({func})"))
    whole = sum(r[0] for r in rows)
    # cProfile counts every resumption of a coroutine as a call, and charges
    # a few long-lived frames (the run's exit stack) with time across task
    # switches: rows called less than once per 20 operations are not per-op
    # costs and are left out.
    rows = sorted((r for r in rows if r[1] >= total_ops / 20), reverse=True)
    lines = [f"    {t / whole:6.1%}  {n / total_ops:8.1f} calls/op  {name}" for t, n, name in rows[:top]]
    by_part = _by_component(stats)
    lines.append("    own time by component: " + ", ".join(
        f"{part} {t / whole:.0%}" for part, t in sorted(by_part.items(), key=lambda kv: -kv[1]) if t / whole >= 0.01
    ))
    return lines


def _by_component(stats: pstats.Stats) -> dict[str, float]:
    """Own time summed by where the code lives: the project's packages (`sim`
    by subpackage), each installed library, asyncio, the rest of the standard
    library, and C builtins. Every function counts, so the parts add up to
    the whole (under cProfile, whose per-call overhead weighs most on code
    made of many small calls: the loop's and the runtime's)."""
    root = str(ROOT) + os.sep
    parts: dict[str, float] = {}
    for (path, _line, _func), (_cc, _n, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if path == "~":
            part = "builtins (C)"
        elif "site-packages" in Path(path).parts:  # before the root: the venv may be in it
            part = Path(path.split("site-packages" + os.sep, 1)[1]).parts[0]
        elif path.startswith(root):
            rel = Path(path[len(root):]).parts
            part = "/".join(rel[:2]) if rel[0] == "sim" and len(rel) > 2 else rel[0]
        elif f"{os.sep}asyncio{os.sep}" in path:
            part = "asyncio"
        else:
            part = "stdlib"
        parts[part] = parts.get(part, 0.0) + tottime
    return parts


def _spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):,.0f} ± {sd:,.0f}"


def _ratio(values: list[float]) -> str:
    return f"{statistics.mean(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer operations and seeds; one profile (select-one decoupled)")
    p.add_argument("--top", type=int, default=12, help="profile entries per pair")
    p.add_argument("--against", metavar="REV", help="a git revision to time beside this tree, round by round")
    p.add_argument("--rounds", type=int, default=None, help="timed runs per pair and tree (default 1, or 3 with --against)")
    args = p.parse_args()
    ops = 40 if args.quick else 250  # at concurrency 1; 64 clients measure 8x as many
    seeds = 40 if args.quick else 200
    rounds = args.rounds or (3 if args.against and not args.quick else 1)
    with contextlib.ExitStack() as stack:
        trees = {"this": ROOT}
        if args.against:
            trees["base"] = stack.enter_context(_worktree(args.against))
        _run(trees, ops=ops, seeds=seeds, rounds=rounds, quick=args.quick, top=args.top)


def _run(trees: dict[str, Path], *, ops: int, seeds: int, rounds: int, quick: bool, top: int) -> None:
    result: dict[str, str] = {}
    ratios: dict[str, str] = {}
    ceilings: dict[str, str] = {}
    floor = _loop_floor(500 if quick else 2000)
    print(
        f"loop floor (no model code, this tree, 64 tasks, {floor.samples} steps, fastest of 3): "
        f"{floor.callback_s * 1e6:.2f} us per callback, {floor.timer_s * 1e6:.2f} us per timer",
        flush=True,
    )
    result["floor_callback_us"] = f"{floor.callback_s * 1e6:.2f}"
    result["floor_timer_us"] = f"{floor.timer_s * 1e6:.2f}"
    for workload, config, key in PAIRS:
        rates: dict[str, list[float]] = {name: [] for name in trees}
        simulated = 0.0
        n = 0
        for r in range(rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                m = _in_tree(trees[name], _MEASURE, workload, config, ops)
                rates[name].append(m["ops"] / m["wall_s"])
                if name == "this":
                    simulated, n = m["simulated_s"], m["ops"]
        callbacks, timers = _per_op(workload, config, ops)
        floor_s = floor.per_op(callbacks, timers)
        line = (
            f"{workload:<10} {config:<10} c=64: {n} ops in {simulated:.3f} simulated s "
            f"-> {_spread(rates['this'])} simulated ops/wall s (n={rounds}); "
            f"{callbacks:.1f} callbacks/op, {timers:.1f} timers/op; "
            f"loop floor {floor_s * 1e6:.1f} us/op (ceiling {1 / floor_s:,.0f} ops/s)"
        )
        ceilings[f"ceiling_{key}"] = f"{1 / floor_s:.0f}"
        if "base" in trees:
            per_round = [a / b for a, b in zip(rates["this"], rates["base"], strict=True)]
            line += f"; base {_spread(rates['base'])}, speed-up {_ratio(per_round)}"
            ratios[f"speedup_{key}"] = f"{statistics.mean(per_round):.2f}"
        print(line, flush=True)
        rate = statistics.mean(rates["this"])
        result[key] = f"{rate:.0f}"
        if key == "select_one_dec":
            result["sim_ops_per_wall_s"] = f"{rate:.0f}"
            result["events_per_op"] = f"{callbacks + timers:.1f}"
        if not quick or key == "select_one_dec":
            print(f"  profile (own time share, calls per op), {workload} {config}:")
            for entry in _profile(workload, config, ops, top):
                print(entry)

    scenario, config = SWEEP
    walls: dict[str, list[float]] = {name: [] for name in trees}
    verdicts: dict[str, Any] = {}
    ops_total = 0
    for r in range(rounds):
        for name in list(trees) if r % 2 == 0 else list(reversed(trees)):
            s = _in_tree(trees[name], _SWEEP, scenario, config, seeds)
            walls[name].append(s["wall_s"])
            verdicts[name] = s["verdicts"]
            ops_total = s["ops"]
    line = (
        f"sweep {scenario} {config}: {seeds} seeds, {ops_total} ops, every checker, one process: "
        f"{statistics.mean(walls['this']):.2f} s (n={rounds})"
    )
    if "base" in trees:
        per_round = [b / a for a, b in zip(walls["this"], walls["base"], strict=True)]
        same = verdicts["this"] == verdicts["base"]
        line += f"; base {statistics.mean(walls['base']):.2f} s, speed-up {_ratio(per_round)}; verdicts identical: {same}"
        ratios["sweep_speedup"] = f"{statistics.mean(per_round):.2f}"
        if not same:
            raise SystemExit("simspeed: the sweep's verdicts differ from the base revision's")
    print(line, flush=True)
    result["sweep_s"] = f"{statistics.mean(walls['this']):.2f}"

    keys = ["sim_ops_per_wall_s", "events_per_op", "select_one_el", "insert_dec", "update_dec",
            "select_one_dec", "insert_el", "update_el", "sweep_s", "floor_callback_us", "floor_timer_us"]
    fields = [f"{k}={result[k]}" for k in keys] + [f"{k}={v}" for k, v in {**ceilings, **ratios}.items()]
    print("RESULT " + " ".join(fields))


if __name__ == "__main__":
    main()
