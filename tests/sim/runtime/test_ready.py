"""`sim.runtime.tasks.Ready`: an awaitable that is already done — awaiting it
gives its value and never yields to the loop, so a function returning either
it or a coroutine schedules exactly what an `async def` would."""

from __future__ import annotations

import asyncio

from sim.runtime.core import Runtime, run
from sim.runtime.tasks import DONE, Ready


def test_awaiting_gives_the_value_without_a_loop_turn() -> None:
    async def main(rt: Runtime) -> list[str]:
        log: list[str] = []

        async def other() -> None:
            log.append("other ran")

        task = asyncio.get_running_loop().create_task(other())
        log.append(f"got {await Ready(5)}")
        await DONE
        log.append("still before the other task")
        await task
        return log

    assert run(main, seed=0) == ["got 5", "still before the other task", "other ran"]


def test_it_can_be_awaited_again() -> None:
    async def main(rt: Runtime) -> tuple[str, str]:
        ready = Ready("x")
        return await ready, await ready

    assert run(main, seed=0) == ("x", "x")
