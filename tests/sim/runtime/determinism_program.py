"""A seeded concurrent workload on the virtual loop that prints a hash of its event log.

Run in subprocesses by `test_runtime_determinism.py`: the same seed must give the
same log whatever `PYTHONHASHSEED` and memory layout are, so nothing but the seed
may choose an order (DESIGN.md §4).

    python -m tests.sim.runtime.determinism_program --seed 7 [--perturb N] [--dump FILE]

Prints `sha256=<hex> events=<n>`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from sim.runtime.core import Runtime, run
from sim.runtime.latency import LatencyModel, LogNormal, Uniform

if TYPE_CHECKING:
    from sim.runtime.cpu import CorePool

GROUPS = 6
FANOUT = 4
DEPTH = 2
STEPS = 24


class Boom(Exception):
    """A worker's deliberate failure, which cancels its task group's siblings."""


@dataclass
class World:
    rt: Runtime
    pool: CorePool
    lines: list[str] = field(default_factory=list)
    sem: anyio.Semaphore = field(default_factory=lambda: anyio.Semaphore(3))
    events: list[anyio.Event] = field(default_factory=lambda: [anyio.Event() for _ in range(4)])
    queue: asyncio.Queue[tuple[str, int]] = field(default_factory=lambda: asyncio.Queue(8))

    def log(self, who: str, what: str) -> None:
        self.lines.append(f"{self.rt.now_ns()} {who} {what}")


async def _subtask(w: World, rt: Runtime, who: str) -> None:
    """A leaf inside its own cancel scope, so cancelling the enclosing task group must
    walk anyio's child scopes (a set) to reach it."""
    try:
        with anyio.move_on_after(rt.rng.uniform(0.0, 0.2)) as scope:
            await rt.sleep(rt.rng.uniform(0.0, 0.1))
            w.log(who, "sub-slept")
            await rt.sleep(rt.rng.uniform(0.0, 0.1))
        w.log(who, f"sub-done timed_out={scope.cancelled_caught}")
    except anyio.get_cancelled_exc_class():
        w.log(who, "sub-cancelled")
        raise


async def _futures_and_tasks(w: World, rt: Runtime, who: str) -> None:
    """Waits on a set of futures and tasks and logs the order it iterates them in."""
    loop = asyncio.get_running_loop()
    labels: dict[asyncio.Future[None], str] = {}
    handles: list[asyncio.TimerHandle] = []
    async with asyncio.TaskGroup() as atg:
        for j in range(3):
            fut: asyncio.Future[None] = loop.create_future()
            labels[fut] = f"f{j}"
            handles.append(loop.call_later(rt.rng.uniform(0, 0.02), fut.set_result, None))
            labels[atg.create_task(rt.sleep(rt.rng.uniform(0, 0.02)))] = f"t{j}"
        done, pending = await asyncio.wait(
            set(labels), timeout=0.01, return_when=asyncio.FIRST_COMPLETED
        )
        w.log(who, "done=" + ",".join(labels[f] for f in done))
        w.log(who, "pending=" + ",".join(labels[f] for f in pending))
        for f in pending:
            f.cancel()
        for h in handles:
            h.cancel()


async def _step(w: World, rt: Runtime, who: str, i: int) -> None:
    rng = rt.rng
    action = rng.randrange(12)
    if action == 0:
        await rt.sleep(rng.uniform(0.0, 0.05))
        w.log(who, f"slept {i}")
    elif action == 1:
        took = await rt.delay("net.rpc")
        w.log(who, f"rpc {i} {took!r}")
    elif action == 2:
        await rt.cpu(rng.uniform(0.001, 0.01), w.pool)
        w.log(who, f"cpu {i}")
    elif action == 3:
        async with w.sem:
            w.log(who, f"sem-in {i}")
            await rt.sleep(rng.uniform(0.0, 0.01))
        w.log(who, f"sem-out {i}")
    elif action == 4:
        await w.queue.put((who, i))
        w.log(who, f"put {i}")
    elif action == 5:
        k = rng.randrange(len(w.events))
        with anyio.move_on_after(rng.uniform(0.0, 0.05)) as scope:
            await w.events[k].wait()
        w.log(who, f"event{k} {i} timed_out={scope.cancelled_caught}")
    elif action == 6:
        k = rng.randrange(len(w.events))
        w.events[k].set()
        w.events[k] = anyio.Event()
        w.log(who, f"set event{k} {i}")
    elif action == 7:
        try:
            with anyio.fail_after(rng.uniform(0.0, 0.03)):
                await rt.sleep(rng.uniform(0.0, 0.03))
            w.log(who, f"in-time {i}")
        except TimeoutError:
            w.log(who, f"fail_after {i}")
    elif action == 8:
        try:
            async with asyncio.timeout(rng.uniform(0.0, 0.03)):
                await rt.sleep(rng.uniform(0.0, 0.03))
            w.log(who, f"asyncio-in-time {i}")
        except TimeoutError:
            w.log(who, f"asyncio-timeout {i}")
    elif action == 9:
        # A whole task group of scoped leaves, cut short by a deadline.
        with anyio.move_on_after(rng.uniform(0.0, 0.15)) as scope:
            async with anyio.create_task_group() as tg:
                for j in range(rng.randrange(2, 6)):
                    tg.start_soon(_subtask, w, rt.derive(f"s{i}.{j}"), f"{who}.s{i}.{j}")
        w.log(who, f"subgroup {i} cut={scope.cancelled_caught}")
    elif action == 10:
        await _futures_and_tasks(w, rt, f"{who}.w{i}")
    else:
        await anyio.lowlevel.checkpoint()
        w.log(who, f"checkpoint {i}")


async def worker(w: World, rt: Runtime, who: str) -> None:
    w.log(who, "start")
    try:
        for i in range(STEPS):
            await _step(w, rt, who, i)
            if rt.rng.random() < 0.004:
                w.log(who, f"boom {i}")
                raise Boom(who)
    except anyio.get_cancelled_exc_class():
        w.log(who, "cancelled")
        raise
    w.log(who, "end")


async def group(w: World, rt: Runtime, who: str, depth: int) -> None:
    w.log(who, "group-start")
    try:
        async with anyio.create_task_group() as tg:
            for c in range(FANOUT):
                name = f"{who}.{c}"
                if depth < DEPTH and rt.rng.random() < 0.6:
                    tg.start_soon(group, w, rt.derive(name), name, depth + 1)
                else:
                    tg.start_soon(worker, w, rt.derive(name), name)
            if depth > 0 and rt.rng.random() < 0.3:
                await rt.sleep(rt.rng.uniform(0.0, 0.5))
                w.log(who, "cancel-group")
                tg.cancel_scope.cancel()
    except* Boom as eg:
        w.log(who, "caught Boom " + ",".join(sorted(str(e) for e in eg.exceptions)))
    w.log(who, "group-end")


async def consumer(w: World, who: str) -> None:
    while True:
        sender, i = await w.queue.get()
        w.log(who, f"got {sender}:{i}")
        await w.rt.sleep(w.rt.rng.uniform(0.0, 0.004))


async def main(rt: Runtime) -> list[str]:
    w = World(rt, rt.core_pool(2, "cpu"))
    w.log("main", f"start wall={rt.wall_ms()}")
    async with anyio.create_task_group() as outer:
        for c in range(3):
            outer.start_soon(consumer, w, f"consumer{c}")
        async with anyio.create_task_group() as tg:
            for g in range(GROUPS):
                tg.start_soon(group, w, rt.derive(f"g{g}"), f"g{g}", 0)
        while not w.queue.empty():
            await rt.sleep(0.001)
        outer.cancel_scope.cancel()
    stats = w.pool.statistics()
    w.log("main", f"end cpu busy={stats.busy_s!r} waits={stats.wait_s!r} n={stats.acquisitions}")
    return w.lines


LATENCY = LatencyModel(
    {"net": LogNormal(0.002, 0.5), "net.slow": Uniform(0.01, 0.05)}, default=LogNormal(0.001, 1.0)
)


def program(seed: int) -> list[str]:
    return run(main, seed=seed, latency=LATENCY)


def _perturb(n: int) -> list[object]:
    """Allocates `n` objects of assorted sizes, which shifts the addresses of
    everything allocated later (and so any address-based hash)."""
    return [bytearray(17 + (i * 7919) % 300) if i % 3 else object() for i in range(n)]


def cli(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--perturb", type=int, default=0)
    parser.add_argument("--dump", type=Path, default=None)
    args = parser.parse_args(argv)
    junk = _perturb(args.perturb)
    lines = program(args.seed)
    del junk
    text = "\n".join(lines) + "\n"
    if args.dump is not None:
        args.dump.write_text(text)
    print(f"sha256={hashlib.sha256(text.encode()).hexdigest()} events={len(lines)}")


if __name__ == "__main__":
    cli()
