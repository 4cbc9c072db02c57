"""Owning background tasks, so none outlives its owner or hides its failure."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Self, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

    from anyio.abc import TaskGroup

__all__ = ['AsyncExitStack', 'TaskOwner', 'concurrently']

A = TypeVar("A")
B = TypeVar("B")


async def concurrently(first: Callable[[], Awaitable[A]], second: Callable[[], Awaitable[B]]) -> tuple[A, B]:
    """Runs `first()` and `second()` as two tasks (started in that order) and
    returns both results; the first to fail cancels the other and is raised
    as itself, not in an exception group.

    An `asyncio.TaskGroup`, not anyio's: per call it costs about a third
    (18 vs 55 µs for two tasks, bench notes in issue 20), and this runs on
    every peek. Cancellation from an enclosing anyio scope reaches both
    tasks through the group, as with anyio's.
    """
    try:
        async with asyncio.TaskGroup() as tg:
            a = tg.create_task(_awaited(first))
            b = tg.create_task(_awaited(second))
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    return a.result(), b.result()


async def _awaited(fn: Callable[[], Awaitable[A]]) -> A:
    return await fn()

# --- Owning background tasks -----------------------------------------------------------


class AsyncExitStack(contextlib.AsyncExitStack):
    """`contextlib.AsyncExitStack`, except that an exit callback that re-raises
    the very exception it was handed counts as "did not suppress it".

    Why: anyio's `TaskGroup.__aexit__` re-raises the exception it is given.
    When an earlier callback of the same stack has raised a new exception N
    (whose `__context__` is the frame's exception), contextlib's
    `_fix_exception_context(N, N)` walks to N's context, finds the frame's
    exception and sets `N.__context__ = N`. The next walk of that chain never
    ends: a Ctrl-C during a real-mode run spun at 100 % CPU (issue 16). Every
    stack in the product is this one.
    """

    def _push_exit_callback(self, callback: Callable[..., Any], is_sync: bool = True) -> None:
        if is_sync:

            def sync_exit(et: Any, exc: BaseException | None, tb: Any) -> Any:
                try:
                    return callback(et, exc, tb)
                except BaseException as raised:
                    if exc is not None and raised is exc:
                        return False
                    raise

            super()._push_exit_callback(sync_exit, True)  # type: ignore[misc]
            return

        async def async_exit(et: Any, exc: BaseException | None, tb: Any) -> Any:
            try:
                return await callback(et, exc, tb)
            except BaseException as raised:
                if exc is not None and raised is exc:
                    return False
                raise

        super()._push_exit_callback(async_exit, False)  # type: ignore[misc]


class TaskOwner:
    """A component that owns background tasks for the span of its `async with`
    (structured concurrency: leaving the block cancels them and waits for them).

    Subclasses start their long-running tasks in `_start_background` and may
    spawn more into `self._tg` while running.
    """

    _tg: TaskGroup | None = None

    def _start_background(self, tg: TaskGroup) -> None:
        """Starts the component's own tasks (none by default)."""

    async def __aenter__(self) -> Self:
        import anyio

        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._start_background(tg)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg, self._tg = self._tg, None
        assert tg is not None, "__aexit__ without __aenter__"
        tg.cancel_scope.cancel()
        return await tg.__aexit__(et, e, tb)


