"""Benchmark of the virtual-time loop: timer events per wall-second.

N tasks each sleep M times. On `VirtualEventLoop` every sleep is a random
0-10 ms duration drawn from `rt.rng`, so each one is a real timer the clock jumps
to; the stock asyncio loop runs the same program with the durations scaled to
zero (`sleep(0)`, a bare yield), which is the floor any loop pays per task switch.
The middle row (virtual loop, zero delays) separates the cost of timers from the
cost of the loop's tasks.

    uv run python bench/runtime.py [--quick] [--tasks N] [--sleeps M] [--seed S]

Last line: `RESULT virtual_events_per_s=… stock_events_per_s=… ratio=…`
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio

from sim.runtime.core import Runtime, run

MAX_SLEEP_S = 0.010

Program = Callable[[Runtime], Coroutine[Any, Any, tuple[float, float, int]]]


@dataclass(frozen=True)
class Row:
    name: str
    events: int
    wall_s: float
    simulated_s: float

    @property
    def per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else 0.0


def _program(tasks: int, sleeps: int, scale: float) -> Program:
    """The benchmark as a `run` main; it returns `(wall s, loop s, events)`."""

    async def sleeper(rt: Runtime, counter: list[int]) -> None:
        rng = rt.rng
        for _ in range(sleeps):
            await rt.sleep(rng.uniform(0.0, MAX_SLEEP_S) * scale)
            counter[0] += 1

    async def main(rt: Runtime) -> tuple[float, float, int]:
        counter = [0]
        started, loop_start = time.perf_counter(), rt.now()
        async with anyio.create_task_group() as tg:
            for _ in range(tasks):
                tg.start_soon(sleeper, rt, counter)
        return time.perf_counter() - started, rt.now() - loop_start, counter[0]

    return main


def measure(name: str, *, tasks: int, sleeps: int, seed: int, virtual: bool, scale: float) -> Row:
    main = _program(tasks, sleeps, scale)
    wall_s, loop_s, events = run(main, seed=seed, virtual=virtual)
    assert events == tasks * sleeps, (events, tasks * sleeps)
    return Row(name, events, wall_s, loop_s if virtual else 0.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1,000 tasks x 100 sleeps")
    parser.add_argument(
        "--tasks", type=int, default=None, help="default 10,000 (1,000 with --quick)"
    )
    parser.add_argument("--sleeps", type=int, default=100, help="sleeps per task (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tasks = args.tasks if args.tasks is not None else (1_000 if args.quick else 10_000)
    sleeps = args.sleeps
    if tasks < 1 or sleeps < 1:
        parser.error("--tasks and --sleeps must be >= 1")

    common = {"tasks": tasks, "sleeps": sleeps, "seed": args.seed}
    rows = [
        measure("virtual, random sleeps", virtual=True, scale=1.0, **common),
        measure("virtual, zero delays", virtual=True, scale=0.0, **common),
        measure("stock, zero delays", virtual=False, scale=0.0, **common),
    ]

    print(f"{tasks:,} tasks x {sleeps} sleeps = {tasks * sleeps:,} events, seed {args.seed}")
    print(f"{'loop':<24} {'wall s':>8} {'events/s':>12} {'simulated s':>12}")
    for row in rows:
        print(f"{row.name:<24} {row.wall_s:>8.2f} {row.per_s:>12,.0f} {row.simulated_s:>12.3f}")
    virtual, _, stock = rows
    ratio = virtual.per_s / stock.per_s if stock.per_s > 0 else 0.0
    print(
        f"RESULT virtual_events_per_s={virtual.per_s:.0f} stock_events_per_s={stock.per_s:.0f} "
        f"ratio={ratio:.2f}"
    )


if __name__ == "__main__":
    main()
