"""`CorePool.hold_then` (loop callbacks) against `CorePool.hold` (a task per
hold): the same grants in the same order at the same virtual times, the same
statistics, and every cancellation path giving its core back."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from sim.runtime.core import Runtime, run

if TYPE_CHECKING:
    from sim.runtime.cpu import CorePool, CorePoolStatistics

#: (name, start time, seconds held); some start while the cores are busy.
REQUESTS = [("a", 0.0, 0.003), ("b", 0.0, 0.002), ("c", 0.001, 0.0), ("d", 0.001, 0.004), ("e", 0.0025, 0.001)]


def _with_tasks(cores: int) -> tuple[list[tuple[str, float]], CorePoolStatistics]:
    async def main(rt: Runtime) -> tuple[list[tuple[str, float]], CorePoolStatistics]:
        pool = rt.core_pool(cores, "p")
        done: list[tuple[str, float]] = []

        async def user(name: str, at: float, seconds: float) -> None:
            await rt.sleep(at)
            await pool.hold(seconds)
            done.append((name, round(rt.now(), 9)))

        async with asyncio.TaskGroup() as tg:
            for r in REQUESTS:
                tg.create_task(user(*r))
        return done, pool.statistics()

    return run(main, seed=0)


def _with_callbacks(cores: int) -> tuple[list[tuple[str, float]], CorePoolStatistics]:
    async def main(rt: Runtime) -> tuple[list[tuple[str, float]], CorePoolStatistics]:
        pool = rt.core_pool(cores, "p")
        done: list[tuple[str, float]] = []
        finished = asyncio.Event()

        def start(name: str, seconds: float) -> None:
            def then() -> None:
                done.append((name, round(rt.now(), 9)))
                if len(done) == len(REQUESTS):
                    finished.set()

            pool.hold_then(seconds, then)

        for name, at, seconds in REQUESTS:
            rt.call_after(at, start, name, seconds)
        await finished.wait()
        return done, pool.statistics()

    return run(main, seed=0)


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_same_grants_and_statistics_as_hold(cores: int) -> None:
    tasks, callbacks = _with_tasks(cores), _with_callbacks(cores)
    assert callbacks[0] == tasks[0]
    assert _rounded(callbacks[1]) == _rounded(tasks[1])


def _rounded(s: CorePoolStatistics) -> tuple[Any, ...]:
    return (s.cores, s.acquisitions, round(s.busy_s, 9), round(s.wait_s, 9))


def test_cancelling_gives_the_core_back_in_every_state() -> None:
    async def main(rt: Runtime) -> list[tuple[str, float]]:
        pool = rt.core_pool(1, "p")
        log: list[tuple[str, float]] = []

        def then(name: str) -> Any:
            return lambda: log.append((name, round(rt.now(), 9)))

        holding = pool.hold_then(0.010, then("holding"))  # has the core
        waiting = pool.hold_then(0.001, then("waiting"))  # in line
        pool.hold_then(0.002, then("last"))  # in line behind it
        await rt.sleep(0.004)
        waiting.cancel()  # leaves the line
        holding.cancel()  # gives the core back at 0.004: "last" gets it
        await rt.sleep(0.01)
        # Cancelled in the instant it took a free core: the next in line gets
        # it then (0.014), not when it would have ended.
        held = pool.hold_then(0.001, then("held"))
        pool.hold_then(0.001, then("after"))
        held.cancel()
        await rt.sleep(0.01)
        s = pool.statistics()
        log.append(("acquisitions", s.acquisitions))
        log.append(("busy", round(s.busy_s, 9)))
        return log

    assert run(main, seed=0) == [
        ("last", 0.006),
        ("after", 0.015),
        ("acquisitions", 4),
        ("busy", 0.004 + 0.002 + 0.001),
    ]


def test_a_granted_hold_cancelled_before_its_callback_passes_the_core_on() -> None:
    async def main(rt: Runtime) -> list[tuple[str, float]]:
        pool = rt.core_pool(1, "p")
        log: list[tuple[str, float]] = []
        first = pool.hold_then(0.001, lambda: log.append(("first", round(rt.now(), 9))))
        second = pool.hold_then(0.001, lambda: log.append(("second", round(rt.now(), 9))))
        pool.hold_then(0.001, lambda: log.append(("third", round(rt.now(), 9))))

        def cancel_second() -> None:
            # "first" released the core and granted it to "second", whose
            # callback has not run yet.
            second.cancel()

        # Runs in the same turn as "first"'s release, just after it.
        rt.call_after(0.001, cancel_second)
        await rt.sleep(0.01)
        assert first is not second
        return log

    assert run(main, seed=0) == [("first", 0.001), ("third", 0.002)]


def test_zero_seconds_still_takes_a_turn() -> None:
    async def main(rt: Runtime) -> list[str]:
        pool: CorePool = rt.core_pool(1, "p")
        log: list[str] = []
        pool.hold_then(0.0, lambda: log.append("held"))
        log.append("returned")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return log

    assert run(main, seed=0) == ["returned", "held"]


def test_owed_holds_sleep_only_once_a_quantum_is_owed() -> None:
    """`owed=True` (what `Runtime.cpu_then` passes on the stock loop) holds a
    core for `CorePool.owe`'s answer: nothing until a millisecond is owed,
    then all of it. Costs of 2**-12 s keep the sums exact."""
    cost = 2.0**-12

    async def main(rt: Runtime) -> list[float]:
        pool = rt.core_pool(1, "p")
        times: list[float] = []
        finished = asyncio.Event()

        def step(i: int) -> None:
            times.append(rt.now())
            if i < 12:
                pool.hold_then(cost, lambda: step(i + 1), owed=True)
            else:
                finished.set()

        step(0)
        await finished.wait()
        assert pool.owed_s == 2 * cost
        return times

    assert run(main, seed=0) == [0.0] * 5 + [5 * cost] * 5 + [10 * cost] * 3
