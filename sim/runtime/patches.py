"""Every use of asyncio's and anyio's private internals, in one place.

The virtual-time loop (`sim.runtime.loop`) needs seven; each is documented below
with why it is needed, what breaks without it and the versions it was verified
against. Missing internals raise `UnverifiedInternals` when a loop is built, and
tests/sim/test_patches.py has a test per patched behaviour, so a library upgrade
shows up as a failing test, not as a flaky trace.

Verified against CPython 3.11 (3.11.7) and anyio 4.16 (4.16.0).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import inspect
import math
import threading
from typing import TYPE_CHECKING, Any, Final

from anyio._backends import _asyncio as anyio_asyncio

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "VERIFIED_ANYIO",
    "VERIFIED_PYTHON",
    "InsertionOrderedSet",
    "PatchedSelectorEventLoop",
    "UnverifiedInternals",
    "check_asyncio",
    "check_cancel_scope",
    "check_worker_threads",
    "current_task",
    "get_running_loop",
    "handle_callback",
    "next_timer",
    "patch_anyio",
    "replace_ready_queue",
    "running",
    "schedule_timer",
]

#: (major, minor) of the CPython versions the asyncio patches were verified on.
VERIFIED_PYTHON: Final = ((3, 11),)
#: (major, minor) of the anyio versions the anyio patches were verified on;
#: pyproject.toml pins anyio to these.
VERIFIED_ANYIO: Final = ((4, 16),)


class UnverifiedInternals(RuntimeError):
    """A private internal a patch relies on is gone or changed: the installed
    asyncio or anyio is not one the patches were verified against."""


def _unverified(what: str) -> UnverifiedInternals:
    return UnverifiedInternals(
        f"{what}; sim/runtime/patches.py was verified on CPython "
        f"{', '.join(f'{a}.{b}' for a, b in VERIFIED_PYTHON)} and anyio "
        f"{', '.join(f'{a}.{b}' for a, b in VERIFIED_ANYIO)}: re-verify it "
        "(tests/sim/test_patches.py) before running virtual-time simulations"
    )


# --- asyncio ----------------------------------------------------------------------------

#: The private hooks of asyncio's selector loop that `PatchedSelectorEventLoop`
#: overrides; each must exist, or the override is dead code.
_ASYNCIO_HOOKS: Final = ("_make_self_pipe", "_close_self_pipe", "_write_to_self")

_asyncio_checked = False


def check_asyncio() -> None:
    """Raises `UnverifiedInternals` unless asyncio still has the names that
    `PatchedSelectorEventLoop`, `schedule_timer` and `next_timer` use (a cheap
    structural check; tests/sim/test_patches.py checks the behaviour)."""
    global _asyncio_checked
    if _asyncio_checked:
        return
    for name in _ASYNCIO_HOOKS:
        if not callable(getattr(asyncio.SelectorEventLoop, name, None)):
            raise _unverified(f"asyncio.SelectorEventLoop has no method {name}()")
    if "_callback" not in asyncio.Handle.__slots__:
        raise _unverified("asyncio.Handle has no _callback slot")
    if "_scheduled" not in asyncio.TimerHandle.__slots__:
        raise _unverified("asyncio.TimerHandle has no _scheduled slot")
    _asyncio_checked = True


class PatchedSelectorEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop with the private hooks the virtual loop overrides
    (patches 1 and 2), for a selector that never blocks and refuses every
    registration, such as the virtual loop's."""

    # Patch 1: the clock resolution.
    @property
    def _clock_resolution(self) -> float:
        """One unit of `time()` at the current time, at least asyncio's 1 ns.

        Why: `BaseEventLoop._run_once` runs the timers due before
        `time() + _clock_resolution`, with the resolution of the real monotonic
        clock (1e-9 s). The virtual clock jumps exactly onto a timer's deadline;
        once it passes 2**24 s (~194 days) `time() + 1e-9 == time()` in floats.
        Without it: a timer that is due never runs, and the loop spins forever
        at that instant (tests/sim/test_runtime.py::test_far_future_timers_still_fire).
        Verified: CPython 3.11.7, where `BaseEventLoop.__init__` assigns the
        attribute (ignored by the setter below) and `_run_once` reads it.
        """
        return max(1e-9, math.ulp(self.time()))

    @_clock_resolution.setter
    def _clock_resolution(self, value: float) -> None:
        pass  # BaseEventLoop.__init__ stores the real clock's resolution: not ours.

    # Patch 2: no self-pipe.
    def _make_self_pipe(self) -> None:
        """Creates no self-pipe.

        Why: `BaseSelectorEventLoop.__init__` makes a socket pair and registers
        it with the selector, so that `call_soon_threadsafe` (and signals) can
        wake a loop blocked in `select`. The virtual loop's selector never
        blocks and refuses every registration, since real I/O cannot happen in
        virtual time. Without it: building the loop raises `VirtualIOError`;
        without the other two hooks, `call_soon_threadsafe` and `close()` fail
        on the missing sockets. Verified: CPython 3.11.7 (`selector_events.py`).
        """

    def _close_self_pipe(self) -> None:
        """Closes nothing: see `_make_self_pipe`."""

    def _write_to_self(self) -> None:
        """Wakes nothing: the selector never blocks, so the next loop iteration
        sees the callback `call_soon_threadsafe` queued. See `_make_self_pipe`."""


# Patch 3: the timer heap.
def schedule_timer(loop: asyncio.AbstractEventLoop, timer: asyncio.TimerHandle) -> None:
    """Pushes `timer` onto `loop`'s timer heap, as `BaseEventLoop.call_at` does
    with the `TimerHandle` it builds itself.

    Why: `call_at` cannot be told which handle class to build, and asyncio's
    `TimerHandle` compares by deadline only, so timers due at the same instant
    leave the heap in an order that depends on the heap's shape, not on the
    order they were scheduled in. The virtual loop's `call_at` builds a handle
    ordered by (deadline, sequence number) and pushes it here. Without it:
    ties fire in heap order (0, 2, 6, 5, 9, … for ten ties). Verified: CPython
    3.11.7, where `_run_once` pops due timers off `loop._scheduled` with heapq,
    and `_scheduled` on the handle marks it as counted in the heap (for the
    bulk removal of cancelled timers).
    """
    heapq.heappush(loop._scheduled, timer)  # type: ignore[attr-defined]
    timer._scheduled = True  # type: ignore[attr-defined]


def next_timer(loop: asyncio.AbstractEventLoop) -> asyncio.TimerHandle | None:
    """The head of `loop`'s timer heap (the next timer to fire), or None.

    Why: the virtual selector jumps the clock exactly onto the next deadline;
    the timeout `select` is given is `deadline - time()` (not float-exact) and
    capped at one day. Without it: timers fire a rounding error off their
    deadline, and a far-off timer takes one capped step per day. Verified:
    CPython 3.11.7, where `_run_once` removes cancelled timers from the head
    before it calls `select`, so the head is the next timer that will fire.
    """
    heap: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
    return heap[0] if heap else None


# Patch 6: the ready queue (only for a scheduling policy other than fifo).
def replace_ready_queue(loop: asyncio.AbstractEventLoop, queue: Any) -> None:
    """Makes `queue` the ready queue of `loop` (a fresh loop, nothing ready yet).

    Why: `BaseEventLoop._run_once` takes the next callback with
    `self._ready.popleft()` and asyncio offers no hook to choose another; a
    scheduling policy (`sim.runtime.schedule`) replaces the deque with an
    object doing the operations the loop uses on it (append, popleft, len,
    truth, clear) and picking which ready callback `popleft` returns. Without
    it: every seed runs its ready callbacks in FIFO order, so interleavings
    that the latencies do not produce are never explored. Verified: CPython
    3.11.7, where `_ready` is a `collections.deque` that `_call_soon`,
    `_add_callback` and `_run_once` (due timers) append to, `_run_once` pops
    from the left and tests for emptiness, and `close` clears.

    Raises:
        UnverifiedInternals: `loop._ready` is not the deque described.
        InvalidUsage: callbacks are already queued (they would be lost).
    """
    ready = getattr(loop, "_ready", None)
    if type(ready) is not collections.deque:
        raise _unverified("the event loop keeps no collections.deque in _ready")
    if ready:
        raise InvalidUsage("the ready queue can only be replaced before anything is scheduled")
    loop._ready = queue  # type: ignore[attr-defined]


def handle_callback(handle: asyncio.Handle) -> Any:
    """The callable `handle` will run (asyncio's `Handle._callback`).

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


def current_task(loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task[Any] | None:
    """`asyncio.current_task(loop)`, its loop from `get_running_loop` above."""
    return _current_task(loop if loop is not None else get_running_loop())


def _patch_running_loop_lookups() -> None:
    """Patch 7: the running-loop lookups of asyncio's Python code and of
    anyio's backend go through `get_running_loop`/`current_task` above.

    Why: CPython 3.11's `get_running_loop` calls getpid() on every call (it
    checks the loop was not inherited across a fork), and asyncio's Python
    code (`current_task`, `sleep`, locks) and anyio's cancel scopes and task
    groups ask for the running loop dozens of times per simulated statement:
    a system call each, about a tenth of a virtual run (issue 20). While a
    virtual loop runs in this thread the answer is that loop (a thread-local);
    otherwise the originals answer, unchanged. Without it: the same results,
    slower. Verified: CPython 3.11.7 (`asyncio.events.get_running_loop`, which
    `asyncio.tasks.current_task`, `tasks.sleep` and `mixins._LoopBoundMixin`
    look up at call time) and anyio 4.16.0 (`anyio._backends._asyncio` binds
    `get_running_loop` and `current_task` at import).
    """
    uses = (getattr(anyio_asyncio, "get_running_loop", None), getattr(anyio_asyncio, "current_task", None))
    if uses != (_get_running_loop, _current_task):
        raise _unverified(f"{anyio_asyncio.__name__} does not use asyncio's get_running_loop and current_task")
    asyncio.events.get_running_loop = get_running_loop
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
    (tests/sim/test_runtime_determinism.py).
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
        try:
            return isinstance(get_running_loop(), loop_type)
        except RuntimeError:  # no running loop
            return False

    _patch_child_scopes(applies)
    _patch_worker_threads(applies, thread_error)
    _patch_running_loop_lookups()
    _anyio_patched_for = loop_type
