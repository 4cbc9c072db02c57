"""`sim.runtime.tasks.started_after`: a task beside a block, started only once
its delay has passed, with a task group's guarantees — the block's end
cancels it and waits for it, its failure cancels the block and is raised."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from sim.runtime.core import Runtime, run
from sim.runtime.tasks import started_after

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

Log = list[tuple[str, float]]


def _beside(rt: Runtime, log: Log, *, fail_after: int | None = None) -> Callable[[], Coroutine[Any, Any, None]]:
    """Logs a tick every 0.01 s from its start; raises on tick `fail_after`."""

    async def beside() -> None:
        log.append(("started", rt.now()))
        try:
            for tick in range(1000):
                if tick == fail_after:
                    raise ValueError("beside failed")
                log.append(("tick", rt.now()))
                await rt.sleep(0.01)
        except asyncio.CancelledError:
            log.append(("cancelled", rt.now()))
            raise

    return beside


def _run(body: Callable[[Runtime, Log], Coroutine[Any, Any, None]]) -> Log:
    async def main(rt: Runtime) -> Log:
        log: Log = []
        await body(rt, log)
        log.append(("after", rt.now()))
        # Nothing was left behind: only this task runs.
        assert len(asyncio.all_tasks()) == 1
        return [(what, round(t, 9)) for what, t in log]  # virtual sums of float steps

    return run(main, seed=0)


def test_a_block_shorter_than_the_delay_never_starts_the_task() -> None:
    async def body(rt: Runtime, log: Log) -> None:
        async with started_after(0.05, _beside(rt, log)):
            await rt.sleep(0.04)
        await rt.sleep(0.1)  # past the delay: the timer was cancelled

    assert _run(body) == [("after", 0.14)]


def test_the_task_starts_at_the_delay_and_is_cancelled_at_the_blocks_end() -> None:
    async def body(rt: Runtime, log: Log) -> None:
        async with started_after(0.05, _beside(rt, log)):
            await rt.sleep(0.075)
            log.append(("block ends", rt.now()))

    assert _run(body) == [
        ("started", 0.05),
        ("tick", 0.05),
        ("tick", 0.06),
        ("tick", 0.07),
        ("block ends", 0.075),
        ("cancelled", 0.075),
        ("after", 0.075),
    ]


def test_the_tasks_failure_cancels_the_block_and_is_raised_as_itself() -> None:
    async def body(rt: Runtime, log: Log) -> None:
        async def block() -> None:
            async with started_after(0.05, _beside(rt, log, fail_after=2)):
                try:
                    await rt.sleep(1.0)
                except asyncio.CancelledError:
                    log.append(("block cancelled", rt.now()))
                    raise

        with pytest.raises(ValueError, match="beside failed"):
            await block()

    assert _run(body) == [
        ("started", 0.05),
        ("tick", 0.05),
        ("tick", 0.06),
        ("block cancelled", 0.07),
        ("after", 0.07),
    ]


def test_the_blocks_failure_cancels_the_task_first() -> None:
    async def body(rt: Runtime, log: Log) -> None:
        async def block() -> None:
            async with started_after(0.01, _beside(rt, log)):
                await rt.sleep(0.015)
                raise KeyError("block failed")

        with pytest.raises(KeyError):
            await block()

    assert _run(body) == [
        ("started", 0.01),
        ("tick", 0.01),
        ("cancelled", 0.015),
        ("after", 0.015),
    ]


def test_an_enclosing_cancel_scope_cancels_both() -> None:
    async def body(rt: Runtime, log: Log) -> None:
        with anyio.move_on_after(0.025) as scope:
            async with started_after(0.01, _beside(rt, log)):
                await rt.sleep(1.0)
        log.append(("caught" if scope.cancelled_caught else "not caught", rt.now()))

    assert _run(body) == [
        ("started", 0.01),
        ("tick", 0.01),
        ("tick", 0.02),
        ("cancelled", 0.025),
        ("caught", 0.025),
        ("after", 0.025),
    ]
