"""Every use of asyncio's and anyio's private internals, in one place.

The virtual-time loop (`sim.runtime.loop`) needs five: 1 (the loop's own
turn), 4, 5, 6 (the ready queue) and 7; patches 2 and 3 (the selector loop's
self-pipe and timer heap) went when patch 1 became a scheduler of its own
(issue 20). Each is documented below with why it is needed, what breaks without
it and the versions it was verified against. Missing internals raise `UnverifiedInternals` when a loop is built, and
tests/sim/runtime/test_patches.py has a test per patched behaviour, so a library upgrade
shows up as a failing test, not as a flaky trace.

Verified against CPython 3.11 (3.11.7) and anyio 4.16 (4.16.0).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import threading
from typing import TYPE_CHECKING, Any, Final

from anyio._backends import _asyncio as anyio_asyncio

from sim.runtime.errors import InvalidUsage
from sim.runtime.verified import VERIFIED_ANYIO, VERIFIED_PYTHON

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "VERIFIED_ANYIO",
    "VERIFIED_PYTHON",
    "InsertionOrderedSet",
    "UnverifiedInternals",
    "check_asyncio",
    "check_cancel_scope",
    "check_worker_threads",
    "current_task",
    "get_running_loop",
    "get_running_loop_or_none",
    "handle_callback",
    "patch_anyio",
    "running",
]



class UnverifiedInternals(RuntimeError):
    """A private internal a patch relies on is gone or changed: the installed
    asyncio or anyio is not one the patches were verified against."""


def _unverified(what: str) -> UnverifiedInternals:
    return UnverifiedInternals(
        f"{what}; sim/runtime/patches.py was verified on CPython "
        f"{', '.join(f'{a}.{b}' for a, b in VERIFIED_PYTHON)} and anyio "
        f"{', '.join(f'{a}.{b}' for a, b in VERIFIED_ANYIO)}: re-verify it "
        "(tests/sim/runtime/test_patches.py) before running virtual-time simulations"
    )


# --- asyncio ----------------------------------------------------------------------------

#: What `sim.runtime.loop.VirtualEventLoop` (patch 1) builds on: the private
#: attributes of asyncio's `BaseEventLoop` it reads or sets, and the slots of
#: `Handle`/`TimerHandle` it fills without their constructors.
_LOOP_ATTRIBUTES: Final = ("_ready", "_stopping", "_closed", "_debug", "_timer_cancelled_count")
_HANDLE_SLOTS: Final = ("_callback", "_args", "_cancelled", "_loop", "_source_traceback", "_repr", "_context")
_TIMER_SLOTS: Final = ("_scheduled", "_when")

_asyncio_checked = False


def check_asyncio() -> None:
    """Raises `UnverifiedInternals` unless asyncio still has what patch 1
    relies on (a cheap structural check; tests/sim/runtime/test_patches.py and
    tests/sim/test_loop.py check the behaviour).

    Patch 1: the virtual loop's turn. `VirtualEventLoop` subclasses
    `asyncio.BaseEventLoop` and replaces `_run_once` (which
    `BaseEventLoop.run_forever` calls until `_stopping`) with a scheduler of
    its own: no selector, no self-pipe, a `(deadline, sequence)` timer heap,
    handles built without their constructors. Why: asyncio's selector loop
    costs a selector call and a Python `TimerHandle.__lt__` per timer, and a
    constructor frame and a debug-flag call per callback, which is most of a
    virtual run's loop overhead (issue 20); and it breaks timer ties by heap
    shape. Without it: the same order of events, 20-30 % slower. Verified:
    CPython 3.11.7 (`base_events.py`: `run_forever` calls `_run_once` and
    checks `_stopping`; `__init__` makes `_ready`, `_closed`, `_debug`,
    `_timer_cancelled_count`; `close` clears `_ready`; `call_soon_threadsafe`
    appends to `_ready` and calls `_write_to_self`; `events.py`: the slots).
    """
    global _asyncio_checked
    if _asyncio_checked:
        return
    probe = asyncio.BaseEventLoop()
    try:
        for name in _LOOP_ATTRIBUTES:
            if not hasattr(probe, name):
                raise _unverified(f"asyncio.BaseEventLoop has no attribute {name}")
        if type(probe._ready) is not collections.deque:  # type: ignore[attr-defined]
            raise _unverified("asyncio.BaseEventLoop keeps no collections.deque in _ready")
    finally:
        probe.close()
    for name in ("_run_once", "_write_to_self", "_process_events"):
        if not callable(getattr(asyncio.BaseEventLoop, name, None)):
            raise _unverified(f"asyncio.BaseEventLoop has no method {name}()")
    for cls, slots in ((asyncio.Handle, _HANDLE_SLOTS), (asyncio.TimerHandle, _TIMER_SLOTS)):
        missing = [name for name in slots if name not in cls.__slots__]
        if missing:
            raise _unverified(f"asyncio.{cls.__name__} has no slot {missing[0]}")
    _asyncio_checked = True


def handle_callback(handle: asyncio.Handle) -> Any:
    """The callable `handle` will run (asyncio's `Handle._callback`).

    Part of patch 6, the ready queue: a scheduling policy
    (`sim.runtime.schedule`) is the loop's ready queue instead of a deque.
    Why: a scheduling policy keeps each task's steps in order, and tells a
    task's step from other callbacks by the callback's `__self__` (the task,
    for `Task.__step`'s and `Task.__wakeup`'s wrappers); `Handle` has no public
    accessor. Verified: CPython 3.11.7, `events.Handle.__slots__`.
    """
    return handle._callback  # type: ignore[attr-defined]


# Patch 7: running-loop lookups without a system call.
class _RunningVirtualLoop(threading.local):
    """The virtual loop running in this thread, if any (set by its `run_forever`)."""

    loop: asyncio.AbstractEventLoop | None = None


_RUNNING: Final = _RunningVirtualLoop()
_get_running_loop: Final = asyncio.events.get_running_loop
_get_running_loop_or_none: Final = asyncio.events._get_running_loop
_current_task: Final = asyncio.tasks.current_task


@contextlib.contextmanager
def running(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Marks `loop` as the virtual loop running in this thread for the block
    (`VirtualEventLoop.run_forever` wraps itself in it)."""
    previous, _RUNNING.loop = _RUNNING.loop, loop
    try:
        yield
    finally:
        _RUNNING.loop = previous


def get_running_loop() -> asyncio.AbstractEventLoop:
    """`asyncio.get_running_loop()`, answered from `_RUNNING` while a virtual
    loop runs in this thread (patch 7)."""
    loop = _RUNNING.loop
    return loop if loop is not None else _get_running_loop()


def get_running_loop_or_none() -> asyncio.AbstractEventLoop | None:
    """`asyncio.events._get_running_loop()` (None when no loop runs), answered
    like `get_running_loop` (patch 7)."""
    loop = _RUNNING.loop
    return loop if loop is not None else _get_running_loop_or_none()


def current_task(loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task[Any] | None:
    """`asyncio.current_task(loop)`, its loop from `get_running_loop` above."""
    return _current_task(loop if loop is not None else get_running_loop())


def _patch_running_loop_lookups() -> None:
    """Patch 7: the running-loop lookups of asyncio's Python code and of
    anyio's backend go through `get_running_loop`/`current_task` above.

    Why: CPython 3.11's `get_running_loop` and `_get_running_loop` call
    getpid() on every call (they check the loop was not inherited across a
    fork), and asyncio's Python code (`current_task`, `sleep`, and every
    `Event`, `Lock` and `Semaphore` through `mixins._LoopBoundMixin._get_loop`)
    and anyio's cancel scopes and task groups ask for the running loop dozens
    of times per simulated statement:
    a system call each, about a tenth of a virtual run (issue 20). While a
    virtual loop runs in this thread the answer is that loop (a thread-local);
    otherwise the originals answer, unchanged. Without it: the same results,
    slower. Verified: CPython 3.11.7 (`asyncio.events.get_running_loop`, which
    `asyncio.tasks.current_task` and `tasks.sleep` look up at call time, and
    `asyncio.events._get_running_loop`, which `mixins._LoopBoundMixin` does) and anyio 4.16.0 (`anyio._backends._asyncio` binds
    `get_running_loop` and `current_task` at import).
    """
    uses = (getattr(anyio_asyncio, "get_running_loop", None), getattr(anyio_asyncio, "current_task", None))
    if uses != (_get_running_loop, _current_task):
        raise _unverified(f"{anyio_asyncio.__name__} does not use asyncio's get_running_loop and current_task")
    asyncio.events.get_running_loop = get_running_loop
    asyncio.events._get_running_loop = get_running_loop_or_none
    anyio_asyncio.get_running_loop = get_running_loop  # type: ignore[attr-defined]
    anyio_asyncio.current_task = current_task  # type: ignore[attr-defined]


# --- anyio ------------------------------------------------------------------------------


class InsertionOrderedSet(dict[Any, None]):
    """The set operations anyio's cancel scope uses on its child scopes
    (`add`, `remove`, `discard`, iteration), iterating in insertion order."""

    def add(self, item: Any) -> None:
        self[item] = None

    def remove(self, item: Any) -> None:
        del self[item]

    def discard(self, item: Any) -> None:
        self.pop(item, None)


def check_cancel_scope(scope_cls: Any) -> None:
    """Raises `UnverifiedInternals` unless a fresh `scope_cls()` keeps its child
    scopes in a plain `set` named `_child_scopes` (what patch 4 replaces)."""
    probe = scope_cls()
    if type(getattr(probe, "_child_scopes", None)) is not set:
        raise _unverified(f"{scope_cls.__qualname__} keeps no set of child scopes in _child_scopes")


def check_worker_threads(backend_cls: Any) -> None:
    """Raises `UnverifiedInternals` unless `backend_cls.run_sync_in_worker_thread`
    is the classmethod patch 5 wraps."""
    method = inspect.getattr_static(backend_cls, "run_sync_in_worker_thread", None)
    if not isinstance(method, classmethod):
        raise _unverified(f"{backend_cls.__qualname__}.run_sync_in_worker_thread is no classmethod")


def _patch_child_scopes(applies: Callable[[], bool]) -> None:
    """Patch 4: a cancel scope keeps its child scopes in entry order.

    Why: anyio delivers a cancellation by iterating the `set` of child
    `CancelScope`s, which hash by memory address, so the order in which the
    cancelled tasks wake would depend on where the allocator put the scopes.
    Without it: same seed, different traces from one process to the next
    (tests/sim/runtime/test_runtime_determinism.py).
    Only scopes created while `applies()` get the ordered set. Verified: anyio
    4.16.0, `anyio._backends._asyncio.CancelScope` (add on enter and reparent,
    remove on exit, discard on reparent, iterated by `_deliver_cancellation`).
    """
    scope_cls: Any = anyio_asyncio.CancelScope
    original_init = scope_cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if applies():
            self._child_scopes = InsertionOrderedSet()

    scope_cls.__init__ = __init__


def _patch_worker_threads(applies: Callable[[], bool], error: Callable[[], Exception]) -> None:
    """Patch 5: `anyio.to_thread.run_sync` raises `error()` instead of starting
    a thread while `applies()`.

    Why: a real thread's result lands at whatever virtual time the loop has
    reached by then, or the loop finds no timer and declares a deadlock while
    the thread still runs. anyio starts its own worker threads (not through
    `loop.run_in_executor`, which the virtual loop refuses), and offers no hook
    to refuse them. Without it: `to_thread.run_sync` works, fails with
    `VirtualDeadlock` or jumps time, depending on thread scheduling. Verified:
    anyio 4.16.0, where `to_thread.run_sync` calls the asyncio backend's
    classmethod `AsyncIOBackend.run_sync_in_worker_thread`.
    """
    backend_cls: Any = anyio_asyncio.AsyncIOBackend
    original = backend_cls.run_sync_in_worker_thread  # bound to the class

    async def run_sync_in_worker_thread(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if applies():
            raise error()
        return await original(*args, **kwargs)

    backend_cls.run_sync_in_worker_thread = classmethod(run_sync_in_worker_thread)


_anyio_patched_for: type[asyncio.AbstractEventLoop] | None = None


def patch_anyio(
    loop_type: type[asyncio.AbstractEventLoop], thread_error: Callable[[], Exception]
) -> None:
    """Applies patches 4 and 5 to anyio's asyncio backend, process-wide but in
    effect only while the running loop is a `loop_type`; idempotent.

    Args:
        loop_type: the loop class the patches are for.
        thread_error: builds the exception `to_thread.run_sync` raises there.

    Raises:
        UnverifiedInternals: anyio lacks an internal a patch relies on.
        InvalidUsage: already applied for another loop type.
    """
    global _anyio_patched_for
    if _anyio_patched_for is not None:
        if _anyio_patched_for is not loop_type:
            raise InvalidUsage(f"anyio is already patched for {_anyio_patched_for.__qualname__}")
        return

    check_cancel_scope(anyio_asyncio.CancelScope)
    check_worker_threads(anyio_asyncio.AsyncIOBackend)

    def applies() -> bool:
        # Only a virtual loop marks itself running in `_RUNNING` (patch 7):
        # no lookup of the running loop per cancel scope.
        return isinstance(_RUNNING.loop, loop_type)

    _patch_child_scopes(applies)
    _patch_worker_threads(applies, thread_error)
    _patch_running_loop_lookups()
    _anyio_patched_for = loop_type
