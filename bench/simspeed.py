"""Virtual-mode simulation speed: simulated operations per wall-second.

For select-one, insert and update on `decoupled` and `event-loop` at 64
clients: simulated ops per wall-second (a timed run, nothing instrumented),
then loop callbacks and timers per simulated operation (a second run that
counts them), then, for every pair, the top functions by own time under
cProfile (a third run; cProfile's overhead is why it never times anything).
The first level of 64 clients is a warm-up; the measurement is the second.

Usage: uv run python bench/simspeed.py [--quick] [--top N]
Last line: `RESULT sim_ops_per_wall_s=… events_per_op=… select_one_el=… insert_dec=… update_dec=…`
(`sim_ops_per_wall_s` and `events_per_op` are select-one on decoupled, the
figure the issue's target is stated in; the others are each pair's ops per
wall-second.)
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.compare.runner import run_pair
from sim.load.config import Config
from sim.runtime.loop import VirtualEventLoop

if TYPE_CHECKING:
    from collections.abc import Iterator

PAIRS = (
    ("select-one", "decoupled", "select_one_dec"),
    ("select-one", "event-loop", "select_one_el"),
    ("insert", "decoupled", "insert_dec"),
    ("insert", "event-loop", "insert_el"),
    ("update", "decoupled", "update_dec"),
    ("update", "event-loop", "update_el"),
)


@dataclass
class Counts:
    callbacks: int = 0
    timers: int = 0


def _config(workload: str, config: str, ops: int) -> Config:
    return Config(
        mode="virtual", configurations=(config,), workloads=(workload,), concurrency=(64, 64),
        ops_per_level=ops, warmup_ops=20, repeat=1,
    )  # fmt: skip


def _measured(workload: str, config: str, ops: int) -> tuple[int, float, float]:
    """(operations, simulated seconds, wall seconds) of the second level."""
    marks: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = run_pair(
            _config(workload, config, ops), config, workload, Path(tmp) / "trace",
            on_level=lambda r: marks.append(time.perf_counter()),
        )  # fmt: skip
    row = out.rows[1]
    return row.ops, row.window_s * row.repeats, marks[1] - marks[0]


@contextmanager
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
    rows.sort(reverse=True)
    whole = sum(r[0] for r in rows)
    return [
        f"    {t / whole:6.1%}  {n / total_ops:8.1f} calls/op  {name}" for t, n, name in rows[:top]
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer operations; one profile (select-one decoupled)")
    p.add_argument("--top", type=int, default=12, help="profile entries per pair")
    args = p.parse_args()
    ops = 40 if args.quick else 250  # at concurrency 1; 64 clients measure 8x as many
    result: dict[str, str] = {}
    for workload, config, key in PAIRS:
        n, simulated, wall = _measured(workload, config, ops)
        callbacks, timers = _per_op(workload, config, ops)
        rate = n / wall
        print(
            f"{workload:<10} {config:<10} c=64: {n} ops in {simulated:.3f} simulated s, {wall:.2f} wall s "
            f"-> {rate:,.0f} simulated ops/wall s; {callbacks:.1f} callbacks/op, {timers:.1f} timers/op",
            flush=True,
        )
        result[key] = f"{rate:.0f}"
        if key == "select_one_dec":
            result["sim_ops_per_wall_s"] = f"{rate:.0f}"
            result["events_per_op"] = f"{callbacks + timers:.1f}"
        if not args.quick or key == "select_one_dec":
            print(f"  profile (own time share, calls per op), {workload} {config}:")
            for line in _profile(workload, config, ops, args.top):
                print(line)
    keys = ["sim_ops_per_wall_s", "events_per_op", "select_one_el", "insert_dec", "update_dec",
            "select_one_dec", "insert_el", "update_el"]  # fmt: skip
    print("RESULT " + " ".join(f"{k}={result[k]}" for k in keys))


if __name__ == "__main__":
    main()
