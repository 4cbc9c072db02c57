"""The virtual-time event loop: asyncio whose clock jumps to the next timer
whenever nothing is ready, so a seeded program replays the same events.

The loop is a scheduler of its own on `asyncio.BaseEventLoop` (patch 1 of
`sim.runtime.patches`, which lists and checks the private attributes it uses);
every other private internal of asyncio or anyio is patched there."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import heapq
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar, TypeVarTuple, final

from sim.runtime import patches
from sim.runtime.schedule import ready_queue

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from contextvars import Context

__all__ = ["VIRTUAL_EPOCH_MS", "LoopStatistics", "VirtualDeadlock", "VirtualEventLoop", "VirtualIOError", "wake"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: Where virtual time starts on the wall clock: 2026-01-01T00:00:00Z. A fixed
#: value, so virtual runs (and their traces) are identical whenever they run.
VIRTUAL_EPOCH_MS: Final = 1_767_225_600_000

# --- The virtual-time event loop --------------------------------------------------------


class VirtualIOError(RuntimeError):
    """Real I/O (a socket, a thread, a subprocess) was attempted on the virtual loop.

    Virtual time cannot wait for the outside world: a real query would look like
    an instant timeout. Use the in-memory backends in virtual mode.
    """


class VirtualDeadlock(RuntimeError):
    """Every task waits, and no timer is scheduled that could ever wake one."""


@final
@dataclass(frozen=True)
class LoopStatistics:
    """Counts since the loop was made.

    Attributes:
        turns: turns of the loop (a turn runs what was ready at its start).
        callbacks: callbacks dequeued to run, fired timers included (a
            cancelled one is skipped but counted).
        timers: timers scheduled.
        tasks_and_futures: tasks and futures created through the loop.
    """

    turns: int
    callbacks: int
    timers: int
    tasks_and_futures: int


class _VirtualTask(asyncio.Task[Any]):
    """A Task whose hash is its creation number instead of its memory address.

    anyio keeps tasks in sets and cancels them by iterating those sets; with
    address-based hashes that order (and so the order of events) would change
    from run to run under address-space randomization. `create_task` sets the
    number before asyncio's own init, which already puts the task in a WeakSet.
    """

    _coordsim_seq: int

    def __hash__(self) -> int:
        return self._coordsim_seq

    def __repr__(self) -> str:
        # asyncio's repr formats the coroutine's frame and arguments; anyio
        # puts the current task's repr into every cancel reason, so a cancel
        # scope's exit paid for it once per statement (issue 20).
        state = "done" if self.done() else "cancelling" if self.cancelling() else "pending"
        coro = self.get_coro()
        name = getattr(coro, "__qualname__", type(coro).__name__)
        return f"<Task #{self._coordsim_seq} {self.get_name()!r} {state} coro={name}>"


class _VirtualFuture(asyncio.Future[Any]):
    """A Future with a deterministic hash, for the same reason as `_VirtualTask`."""

    _coordsim_seq: int

    def __hash__(self) -> int:
        return self._coordsim_seq


class _Handle(asyncio.Handle):
    """asyncio's `Handle`, built by `call_soon` without a constructor call and
    cancelled without asking for the debug flag (the loop's hot path)."""

    __slots__ = ()

    def cancel(self) -> None:
        if self._loop._debug:  # type: ignore[attr-defined]
            super().cancel()
            return
        self._cancelled = True
        self._callback = None
        self._args = None  # type: ignore[assignment]


class _Timer(asyncio.TimerHandle):
    """asyncio's `TimerHandle`, kept on the loop's heap as `(deadline, sequence
    number, timer)`: ties fire in scheduling order, and the heap compares
    tuples in C instead of calling a Python `__lt__`. Hashes and compares as
    an object (asyncio's compares by deadline alone)."""

    __slots__ = ()

    __hash__ = object.__hash__
    __eq__ = object.__eq__

    def cancel(self) -> None:
        if self._cancelled:
            return
        loop: VirtualEventLoop = self._loop  # type: ignore[attr-defined]
        if self._scheduled:  # type: ignore[attr-defined]
            loop._timer_cancelled_count += 1
        if loop._debug:  # type: ignore[attr-defined]
            self._repr = repr(self)
        self._cancelled = True
        self._callback = None
        self._args = None  # type: ignore[assignment]


_new: Final = object.__new__
_copy_context: Final = contextvars.copy_context
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop
_ulp: Final = math.ulp
_inf: Final = math.inf

#: Below this many scheduled timers the heap is never swept of cancelled
#: ones; above it, once more than half are cancelled (asyncio's rule).
_MIN_SWEPT_TIMERS: Final = 100
#: The clock value below which one float step is under asyncio's 1 ns
#: resolution (2**23 s, about 97 days): due means `when < now + ulp(now)`.
_NS_EXACT_UNTIL: Final = 2.0**23


def _forbidden(name: str) -> Callable[..., NoReturn]:
    def method(self: VirtualEventLoop, *args: object, **kwargs: object) -> NoReturn:
        raise VirtualIOError(
            f"loop.{name}() is real I/O and is not allowed on the virtual-time loop; "
            "virtual mode must use the in-memory backends"
        )

    method.__name__ = name
    return method


def _thread_refused() -> VirtualIOError:
    return VirtualIOError(
        "anyio.to_thread.run_sync() runs a real thread, which is not allowed on "
        "the virtual-time loop; virtual mode must use the in-memory backends"
    )


class VirtualEventLoop(asyncio.BaseEventLoop):
    """A deterministic asyncio loop whose `time()` is virtual.

    When no callback is ready, time jumps to the next scheduled timer instead of
    waiting, so simulated seconds cost microseconds. Timers, task groups, anyio
    cancel scopes, `asyncio.timeout` all work unchanged. Real I/O raises
    `VirtualIOError`; waiting forever raises `VirtualDeadlock`.

    Its own scheduler, not a selector loop's: it never touches a selector or
    a self-pipe, keeps its ready callbacks in a deque and its timers in a
    `(deadline, sequence number)` heap of its own, and runs each turn exactly
    as asyncio's `_run_once` does (timers due by `now` join the ready queue's
    tail, then the callbacks ready at the turn's start run), so programs see
    asyncio's order, only faster (issue 20).

    Determinism: callbacks run in asyncio's FIFO order, or in the order a
    seeded scheduling policy picks (`schedule`, see `sim.runtime.schedule`);
    timers in (deadline, scheduling order); tasks and futures hash by creation
    number so set iteration cannot depend on memory addresses; anyio's cancel
    scopes deliver cancellation in entry order (`patches`).

    Args:
        epoch_ms: where virtual time starts on the wall clock.
        schedule: `fifo` (asyncio's order), `random` or `pct`.
        seed: the run's seed, which the policy draws its own stream from.
    """

    def __init__(self, *, epoch_ms: int = VIRTUAL_EPOCH_MS, schedule: str = "fifo", seed: int = 0) -> None:
        patches.check_asyncio()
        patches.patch_anyio(VirtualEventLoop, _thread_refused)
        super().__init__()
        self._virtual_now = 0.0
        self._seq = 0  # tasks and futures
        self._timer_seq = 0  # timers: a stream of its own, so task hashes stay put
        #: The timer heap: (deadline, sequence number, timer).
        self._timers: list[tuple[float, int, _Timer]] = []
        self._turn_count = 0
        self._callback_count = 0
        self.epoch_ms = epoch_ms
        queue = ready_queue(schedule, seed, self)
        # fifo keeps a plain deque: not one instruction more per callback.
        self._ready: Any = collections.deque() if queue is None else queue
        self.schedule = "fifo" if queue is None else schedule

    def _deadlock(self) -> VirtualDeadlock:
        return VirtualDeadlock(
            "virtual-time deadlock: every task is waiting and no timer is scheduled "
            f"that could wake one ({len(asyncio.all_tasks(self))} tasks alive)"
        )

    def time(self) -> float:
        return self._virtual_now

    def next_timer(self) -> asyncio.TimerHandle | None:
        """The next timer that can fire (cancelled ones at the head are
        dropped first), or None."""
        timers = self._timers
        while timers and timers[0][2]._cancelled:
            _heappop(timers)[2]._scheduled = False  # type: ignore[attr-defined]
            self._timer_cancelled_count -= 1
        return timers[0][2] if timers else None

    def _sweep_timers(self) -> None:
        """Drops every cancelled timer and rebuilds the heap (as asyncio does
        once most of a large heap is cancelled)."""
        kept = []
        for entry in self._timers:
            if entry[2]._cancelled:
                entry[2]._scheduled = False  # type: ignore[attr-defined]
            else:
                kept.append(entry)
        heapq.heapify(kept)
        self._timers = kept
        self._timer_cancelled_count = 0

    def _run_once(self) -> None:
        """Runs turns until the loop is asked to stop (`BaseEventLoop.run_forever`
        calls this, then checks `_stopping`): each turn moves the timers due by
        now (after a jump to the next deadline if nothing is ready) to the
        ready queue's tail, then runs the callbacks ready at its start, as
        asyncio's `_run_once` does for one turn."""
        with patches.running(self):  # patch 7: lookups of the running loop
            self._turns()

    def _turns(self) -> None:
        ready = self._ready
        popleft = ready.popleft
        append = ready.append
        while True:
            timers = self._timers
            n = len(timers)
            if n > _MIN_SWEPT_TIMERS and 2 * self._timer_cancelled_count > n:
                self._sweep_timers()
                timers = self._timers
            else:
                while timers and timers[0][2]._cancelled:
                    _heappop(timers)[2]._scheduled = False  # type: ignore[attr-defined]
                    self._timer_cancelled_count -= 1
            now = self._virtual_now
            if not ready and not self._stopping:  # type: ignore[attr-defined]
                if not timers:
                    raise self._deadlock()
                when = timers[0][0]
                # An infinite timer (`anyio.sleep_forever()` is `asyncio.sleep(math.inf)`)
                # can never fire: waiting on it is a deadlock, not endless jumps.
                if when == _inf:
                    raise self._deadlock()
                if when > now:
                    self._virtual_now = now = when
            # Due: before now plus one unit of the clock (asyncio's 1 ns; past
            # 2**23 s a float step is larger, and past 2**24 s now + 1e-9 == now).
            end = now + (1e-9 if now < _NS_EXACT_UNTIL else max(1e-9, _ulp(now)))
            while timers and timers[0][0] < end:
                timer = _heappop(timers)[2]
                timer._scheduled = False  # type: ignore[attr-defined]
                append(timer)
            n = len(ready)
            self._turn_count += 1
            self._callback_count += n
            for _ in range(n):
                handle = popleft()
                if handle._cancelled:
                    continue
                try:
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self._report(handle, exc)
            if self._stopping:  # type: ignore[attr-defined]
                return

    def statistics(self) -> LoopStatistics:
        """What the loop has done so far (for benchmarks: the cost per
        simulated operation is mostly callbacks and timers)."""
        return LoopStatistics(self._turn_count, self._callback_count, self._timer_seq, self._seq)

    def _report(self, handle: asyncio.Handle, exc: BaseException) -> None:
        """What `Handle._run` does with a callback's exception."""
        self.call_exception_handler(
            {
                "message": f"Exception in callback {handle._callback!r}",  # type: ignore[attr-defined]
                "exception": exc,
                "handle": handle,
            }
        )

    def _process_events(self, event_list: list[Any]) -> None:
        pass  # no selector: nothing ever becomes ready from outside

    def _write_to_self(self) -> None:
        """Wakes nothing: the loop never blocks, so its next turn sees what
        `call_soon_threadsafe` queued."""

    def call_soon(
        self, callback: Callable[[*Ts], object], *args: *Ts, context: Context | None = None
    ) -> asyncio.Handle:
        if self._debug:  # type: ignore[attr-defined]
            return super().call_soon(callback, *args, context=context)
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        handle: Any = _new(_Handle)
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._loop = self
        handle._source_traceback = None
        handle._repr = None
        handle._context = _copy_context() if context is None else context
        self._ready.append(handle)
        return handle  # type: ignore[no-any-return]

    def call_at(
        self,
        when: float,
        callback: Callable[[*Ts], object],
        *args: *Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        """`BaseEventLoop.call_at` (which `call_later`, `asyncio.sleep`, timeouts and
        anyio's deadlines all go through), with ties broken by scheduling order."""
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        if when is None:
            raise TypeError("when cannot be None")
        # The same fields `call_soon` sets, inline on purpose: a shared helper
        # would cost a frame per callback, the cost this loop exists to save.
        timer: Any = _new(_Timer)
        timer._callback = callback
        timer._args = args
        timer._cancelled = False
        timer._loop = self
        timer._source_traceback = None
        timer._repr = None
        timer._context = _copy_context() if context is None else context
        timer._when = when
        timer._scheduled = True
        self._timer_seq += 1
        _heappush(self._timers, (when, self._timer_seq, timer))
        return timer  # type: ignore[no-any-return]

    def call_later(
        self, delay: float, callback: Callable[[*Ts], object], *args: *Ts, context: Context | None = None
    ) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._virtual_now + delay, callback, *args, context=context)

    def create_task(  # type: ignore[override]
        self, coro: Coroutine[Any, Any, T], *, name: str | None = None, **kwargs: Any
    ) -> asyncio.Task[T]:
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        self._seq += 1
        task: Any = _VirtualTask.__new__(_VirtualTask)
        task._coordsim_seq = self._seq
        task.__init__(coro, loop=self, name=name, **kwargs)
        return task  # type: ignore[no-any-return]

    def create_future(self) -> asyncio.Future[Any]:
        self._seq += 1
        future = _VirtualFuture(loop=self)
        future._coordsim_seq = self._seq
        return future

    def close(self) -> None:
        super().close()
        self._timers.clear()

    run_in_executor = _forbidden("run_in_executor")  # type: ignore[assignment]
    getaddrinfo = _forbidden("getaddrinfo")
    getnameinfo = _forbidden("getnameinfo")
    create_connection = _forbidden("create_connection")
    create_server = _forbidden("create_server")
    create_unix_connection = _forbidden("create_unix_connection")
    create_unix_server = _forbidden("create_unix_server")
    create_datagram_endpoint = _forbidden("create_datagram_endpoint")
    connect_accepted_socket = _forbidden("connect_accepted_socket")
    connect_read_pipe = _forbidden("connect_read_pipe")
    connect_write_pipe = _forbidden("connect_write_pipe")
    subprocess_exec = _forbidden("subprocess_exec")
    subprocess_shell = _forbidden("subprocess_shell")
    add_reader = _forbidden("add_reader")  # type: ignore[assignment]
    add_writer = _forbidden("add_writer")  # type: ignore[assignment]
    sock_recv = _forbidden("sock_recv")
    sock_recv_into = _forbidden("sock_recv_into")
    sock_recvfrom = _forbidden("sock_recvfrom")
    sock_recvfrom_into = _forbidden("sock_recvfrom_into")
    sock_sendall = _forbidden("sock_sendall")
    sock_sendto = _forbidden("sock_sendto")
    sock_connect = _forbidden("sock_connect")
    sock_accept = _forbidden("sock_accept")
    sock_sendfile = _forbidden("sock_sendfile")
    add_signal_handler = _forbidden("add_signal_handler")  # type: ignore[assignment]


def wake(future: asyncio.Future[None]) -> None:
    """A sleep's timer: `asyncio.sleep`'s `_set_result_unless_cancelled`."""
    if not future.cancelled():
        future.set_result(None)
