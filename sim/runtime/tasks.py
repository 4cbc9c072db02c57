"""Owning background tasks, so none outlives its owner or hides its failure."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, Final, Generic, Self, TypeVar, final

from sim.runtime.patches import current_task, get_running_loop

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

    from anyio.abc import TaskGroup

__all__ = ['DONE', 'AsyncExitStack', 'Ready', 'TaskOwner', 'concurrently', 'started_after']

A = TypeVar("A")
B = TypeVar("B")


@final
class Ready(Generic[A]):
    """An awaitable that is already done: `await Ready(x)` is `x`, without
    yielding to the loop. What a function that returns an awaitable (instead
    of being a coroutine: one layer less for its awaiting caller to pass on
    each suspension, issue 20) returns when it has its answer at once."""

    __slots__ = ("_value",)

    def __init__(self, value: A) -> None:
        self._value = value

    def __await__(self) -> Generator[Any, None, A]:
        yield from ()  # a generator that returns at once
        return self._value


#: `Ready(None)`: nothing to wait for.
DONE: Final[Ready[None]] = Ready(None)


async def concurrently(first: Callable[[], Awaitable[A]], second: Callable[[], Awaitable[B]]) -> tuple[A, B]:
    """Runs `first()` in the calling task and `second()` beside it in a task of
    its own, and returns both results; the first to fail cancels the other and
    is raised as itself, not in an exception group.

    `asyncio.TaskGroup`'s algorithm for a body (`first`) and one task
    (`second`), step for step — the same futures, callbacks and cancellations
    in the same order — without its generic entry and exit. It runs on every
    peek: issue 20 measured the group itself at a sixth of the call, and a
    second task at 2.5 more loop callbacks per peek (18.8 against 16.3) than
    running `first` in the caller. Cancellation from an enclosing anyio scope reaches both, as
    with a task group.
    """
    loop = get_running_loop()
    parent = current_task(loop)
    if parent is None:
        raise RuntimeError("concurrently() cannot determine the parent task")
    group = _Group(loop, parent)
    b = group.start(_coroutine(second()))
    try:
        a = await first()
    except BaseException as exc:
        await group.join(exc)
        raise
    await group.join(None)
    return a, b.result()


def _coroutine(awaitable: Awaitable[A]) -> Coroutine[Any, Any, A]:
    return awaitable if isinstance(awaitable, Coroutine) else _awaited(awaitable)


async def _awaited(awaitable: Awaitable[A]) -> A:
    return await awaitable


class _Group:
    """The state and steps of an `asyncio.TaskGroup` (CPython 3.11.7's
    `taskgroups.py`): `start` is its `create_task`, `join` its `__aexit__`,
    given the exception the body raised (or None). Where the group would raise
    an exception group, `join` raises the group's first exception."""

    __slots__ = ("_aborting", "_base_error", "_errors", "_loop", "_on_completed_fut",
                 "_parent_cancel_requested", "_parent_task", "_tasks")

    def __init__(self, loop: asyncio.AbstractEventLoop, parent: asyncio.Task[Any]) -> None:
        self._loop = loop
        self._parent_task = parent
        self._aborting = False
        self._parent_cancel_requested = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._errors: list[BaseException] = []
        self._base_error: BaseException | None = None
        self._on_completed_fut: asyncio.Future[bool] | None = None

    def start(self, coro: Coroutine[Any, Any, A]) -> asyncio.Task[A]:
        task = self._loop.create_task(coro)
        task.add_done_callback(self._on_task_done)
        self._tasks.add(task)
        return task

    async def join(self, exc: BaseException | None) -> None:
        """Waits for the tasks; raises what the group would (its first
        exception), or returns when the body's own exception (if any) is to
        propagate unchanged."""
        if exc is not None and _is_base_error(exc) and self._base_error is None:
            self._base_error = exc
        propagate = exc if isinstance(exc, asyncio.CancelledError) else None
        if self._parent_cancel_requested and self._parent_task.uncancel() == 0:
            propagate = None
        if exc is not None and not self._aborting:
            self._abort()
        while self._tasks:
            if self._on_completed_fut is None:
                self._on_completed_fut = self._loop.create_future()
            try:
                await self._on_completed_fut
            except asyncio.CancelledError as ex:
                if not self._aborting:
                    propagate = ex
                    self._abort()
            self._on_completed_fut = None
        if self._base_error is not None:
            raise self._base_error
        if propagate is not None and not self._errors:
            raise propagate
        if exc is not None and not isinstance(exc, asyncio.CancelledError):
            self._errors.append(exc)
        if self._errors:
            raise self._errors[0] from None

    def cancel_tasks(self) -> None:
        """Cancels the tasks still running (as an enclosing cancel scope would),
        without aborting the group: a failure is still the group's."""
        for t in self._tasks:
            if not t.done():
                t.cancel()

    def _abort(self) -> None:
        self._aborting = True
        for t in self._tasks:
            if not t.done():
                t.cancel()

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if self._on_completed_fut is not None and not self._tasks and not self._on_completed_fut.done():
            self._on_completed_fut.set_result(True)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        self._errors.append(exc)
        if _is_base_error(exc) and self._base_error is None:
            self._base_error = exc
        if self._parent_task.done():
            self._loop.call_exception_handler(
                {
                    "message": f"Task {task!r} has errored out but its parent task {self._parent_task} is already completed",
                    "exception": exc,
                    "task": task,
                }
            )
            return
        if not self._aborting and not self._parent_cancel_requested:
            self._abort()
            self._parent_cancel_requested = True
            self._parent_task.cancel()


class started_after:
    """`async with started_after(seconds, fn):` runs `fn()` beside the block in
    a task of its own, started only once `seconds` have passed — never, if the
    block ends first. The block's end cancels the task and waits for it; its
    failure cancels the block and is raised, as in a task group.

    For a guard that is rarely due (a lease renewal during a read that almost
    always ends within one period): starting and cancelling a task group's
    task on every fast-path peek instead cost about 9 % of an update (issue 20).
    """

    __slots__ = ("_fn", "_group", "_seconds", "_timer")

    def __init__(self, seconds: float, fn: Callable[[], Coroutine[Any, Any, object]]) -> None:
        self._seconds = seconds
        self._fn = fn
        self._group: _Group | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> None:
        loop = get_running_loop()
        parent = current_task(loop)
        if parent is None:
            raise RuntimeError("started_after() cannot determine the parent task")
        self._group = _Group(loop, parent)
        self._timer = loop.call_at(loop.time() + self._seconds, self._due)

    def _due(self) -> None:
        assert self._group is not None
        self._group.start(self._fn())

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        group, timer = self._group, self._timer
        assert group is not None, "__aexit__ without __aenter__"
        assert timer is not None
        timer.cancel()
        group.cancel_tasks()
        await group.join(exc)


def _is_base_error(exc: BaseException) -> bool:
    """`TaskGroup._is_base_error`: SystemExit and KeyboardInterrupt."""
    return isinstance(exc, SystemExit | KeyboardInterrupt)


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


