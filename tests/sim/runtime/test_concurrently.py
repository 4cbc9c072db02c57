"""`sim.runtime.tasks.concurrently` against the `asyncio.TaskGroup` it
stands for (`first` awaited in the group's body, `second` in its one task):
the same results, errors and order of events, step by step, in every
outcome (issue 20 made it TaskGroup's algorithm without the group)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from sim.runtime.core import Runtime, run
from sim.runtime.tasks import concurrently

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


async def _reference(first: Callable[[], Awaitable[Any]], second: Callable[[], Awaitable[Any]]) -> tuple[Any, Any]:
    """The same with `asyncio.TaskGroup`."""

    async def awaited(fn: Callable[[], Awaitable[Any]]) -> Any:
        return await fn()

    try:
        async with asyncio.TaskGroup() as tg:
            b = tg.create_task(awaited(second))
            a = await first()
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    return a, b.result()


Step = tuple[str, float, Any]


def _child(log: list[Step], rt: Runtime, name: str, plan: list[Any]) -> Callable[[], Awaitable[str]]:
    """A child that sleeps each float of `plan` in turn and raises any
    exception in it; logs every step."""

    async def child() -> str:
        try:
            for item in plan:
                if isinstance(item, BaseException):
                    log.append((f"{name} raises", rt.now(), type(item).__name__))
                    raise item
                await rt.sleep(item)
                log.append((f"{name} woke", rt.now(), None))
        except asyncio.CancelledError:
            log.append((f"{name} cancelled", rt.now(), None))
            raise
        return name

    return child


CASES: dict[str, tuple[list[Any], list[Any], float | None]] = {
    "both-ok": ([0.002, 0.001], [0.001], None),
    "both-ok-same-instant": ([0.001], [0.001], None),
    "first-fails-later": ([0.001, 0.002, ValueError("a")], [0.001, 0.01], None),
    "second-fails-at-once": ([0.005], [ValueError("b")], None),
    "first-fails-at-once": ([ValueError("a")], [0.001], None),
    "second-fails-later": ([0.001, 0.001, 0.001], [0.002, ValueError("b")], None),
    "both-fail": ([0.001, KeyError("a")], [0.001, ValueError("b")], None),
    "fails-while-other-sleeps-in-finally": ([ValueError("a")], [0.0, 0.0, 0.003], None),
    "parent-cancelled": ([0.002, 0.004], [0.003], 0.0025),
    "parent-cancelled-after-failure": ([0.001, ValueError("a")], [0.005], 0.001),
}


def _trace(impl: Any, case: str) -> list[Any]:
    plan_a, plan_b, cancel_after = CASES[case]

    async def main(rt: Runtime) -> list[Any]:
        log: list[Any] = []

        async def call() -> None:
            try:
                out = await impl(_child(log, rt, "a", plan_a), _child(log, rt, "b", plan_b))
                log.append(("returned", rt.now(), out))
            except BaseException as exc:
                # anyio names its scope by address: not part of the behaviour.
                log.append(("raised", rt.now(), type(exc).__name__, re.sub("[0-9a-f]{12}", "…", str(exc))))
                raise
            finally:
                task = asyncio.current_task()
                assert task is not None
                log.append(("cancelling", task.cancelling()))

        with anyio.move_on_after(1.0 if cancel_after is None else cancel_after) as scope:
            with contextlib.suppress(ValueError, KeyError):
                await call()
        log.append(("scope cancelled", scope.cancelled_caught, rt.now()))
        return log

    return run(main, seed=1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_steps_as_asyncio_taskgroup(case: str) -> None:
    assert _trace(concurrently, case) == _trace(_reference, case)


def test_outcomes() -> None:
    assert ("returned", 0.003, ("a", "b")) in _trace(concurrently, "both-ok")
    raised = [s for s in _trace(concurrently, "first-fails-later") if s[0] == "raised"]
    assert raised == [("raised", 0.003, "ValueError", "a")]
