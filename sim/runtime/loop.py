"""The virtual-time event loop: asyncio whose clock jumps to the next timer
whenever nothing is ready, so a seeded program replays the same events.

Every private internal of asyncio or anyio it needs is in `sim.runtime.patches`."""

from __future__ import annotations

import asyncio
import math
import selectors
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar, TypeVarTuple

from sim.runtime import patches
from sim.runtime.schedule import ready_queue

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping
    from contextvars import Context

__all__ = ["VIRTUAL_EPOCH_MS", "VirtualDeadlock", "VirtualEventLoop", "VirtualIOError"]

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


class _VirtualTask(asyncio.Task[Any]):
    """A Task whose hash is its creation number instead of its memory address.

    anyio keeps tasks in sets and cancels them by iterating those sets; with
    address-based hashes that order (and so the order of events) would change
    from run to run under address-space randomization.
    """

    def __init__(self, coro: Coroutine[Any, Any, Any], *, loop: VirtualEventLoop, **kw: Any):
        # Set before the base init, which already puts the task in a WeakSet.
        loop._seq += 1
        self._coordsim_seq = loop._seq
        super().__init__(coro, loop=loop, **kw)

    def __hash__(self) -> int:
        return self._coordsim_seq


class _VirtualFuture(asyncio.Future[Any]):
    """A Future with a deterministic hash, for the same reason as `_VirtualTask`."""

    def __init__(self, *, loop: VirtualEventLoop):
        loop._seq += 1
        self._coordsim_seq = loop._seq
        super().__init__(loop=loop)

    def __hash__(self) -> int:
        return self._coordsim_seq


class _SequencedTimer(asyncio.TimerHandle):
    """A timer ordered by (deadline, sequence number).

    asyncio's `TimerHandle` compares by deadline alone, so timers due at the
    same instant would fire in whatever order the heap's shape gives. Here the
    one scheduled first fires first, as SimPy breaks ties. Equal only to
    itself; hashes by its key, not by its address.
    """

    __slots__ = ("_coordsim_key",)

    # Set by `VirtualEventLoop.call_at` (a constructor of its own would cost a
    # frame per timer): (deadline, sequence number).
    _coordsim_key: tuple[float, int]

    def __hash__(self) -> int:
        return hash(self._coordsim_key)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _SequencedTimer):
            return self._coordsim_key == other._coordsim_key
        return NotImplemented

    def __lt__(self, other: asyncio.TimerHandle) -> bool:
        # The heap's comparison, so the common case comes first: every timer
        # on a virtual loop is one of these.
        try:
            return self._coordsim_key < other._coordsim_key  # type: ignore[attr-defined, no-any-return]
        except AttributeError:
            return NotImplemented

    def __le__(self, other: asyncio.TimerHandle) -> bool:
        if isinstance(other, _SequencedTimer):
            return self._coordsim_key <= other._coordsim_key
        return NotImplemented

    def __gt__(self, other: asyncio.TimerHandle) -> bool:
        if isinstance(other, _SequencedTimer):
            return self._coordsim_key > other._coordsim_key
        return NotImplemented

    def __ge__(self, other: asyncio.TimerHandle) -> bool:
        if isinstance(other, _SequencedTimer):
            return self._coordsim_key >= other._coordsim_key
        return NotImplemented


class _VirtualSelector(selectors.BaseSelector):
    """A selector that never waits: it advances the loop's clock to the next timer."""

    def __init__(self) -> None:
        self._loop: VirtualEventLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> NoReturn:
        raise VirtualIOError(
            f"real I/O on the virtual-time loop (tried to watch {fileobj!r}); "
            "virtual mode must use the in-memory backends"
        )

    def unregister(self, fileobj: Any) -> NoReturn:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self._loop
        assert loop is not None
        if timeout is None:  # nothing ready, no timer
            raise loop._deadlock()
        if timeout > 0:
            # Jump exactly onto the next deadline (float-safe), even past asyncio's
            # one-day select cap: capped steps never reach a far-off timer.
            head = patches.next_timer(loop)
            assert head is not None
            when = head.when()
            # An infinite timer (`anyio.sleep_forever()` is `asyncio.sleep(math.inf)`)
            # can never fire: waiting on it is a deadlock, not endless capped jumps.
            if math.isinf(when):
                raise loop._deadlock()
            loop._virtual_now = max(loop._virtual_now, when)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return {}

    def close(self) -> None:
        pass


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


class VirtualEventLoop(patches.PatchedSelectorEventLoop):
    """A deterministic asyncio loop whose `time()` is virtual.

    When no callback is ready, time jumps to the next scheduled timer instead of
    waiting, so simulated seconds cost microseconds. Timers, task groups, anyio
    cancel scopes, `asyncio.timeout` all work unchanged. Real I/O raises
    `VirtualIOError`; waiting forever raises `VirtualDeadlock`.

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
        self._virtual_now = 0.0
        self._seq = 0  # tasks and futures
        self._timer_seq = 0  # timers: a stream of its own, so task hashes stay put
        self.epoch_ms = epoch_ms
        selector = _VirtualSelector()
        super().__init__(selector)
        selector._loop = self
        queue = ready_queue(schedule, seed, self)
        # fifo keeps asyncio's deque: not one instruction more per callback.
        if queue is not None:
            patches.replace_ready_queue(self, queue)
        self.schedule = "fifo" if queue is None else schedule

    def _deadlock(self) -> VirtualDeadlock:
        return VirtualDeadlock(
            "virtual-time deadlock: every task is waiting and no timer is scheduled "
            f"that could wake one ({len(asyncio.all_tasks(self))} tasks alive)"
        )

    def time(self) -> float:
        return self._virtual_now

    def run_forever(self) -> None:
        with patches.running(self):  # patch 7: lookups of the running loop
            super().run_forever()

    def create_task(  # type: ignore[override]
        self, coro: Coroutine[Any, Any, T], *, name: str | None = None, **kwargs: Any
    ) -> asyncio.Task[T]:
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        return _VirtualTask(coro, loop=self, name=name, **kwargs)

    def create_future(self) -> asyncio.Future[Any]:
        return _VirtualFuture(loop=self)

    def call_at(
        self,
        when: float,
        callback: Callable[[*Ts], object],
        *args: *Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        """`BaseEventLoop.call_at` (which `call_later`, `asyncio.sleep`, timeouts and
        anyio's deadlines all go through), with ties broken by scheduling order."""
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        self._timer_seq += 1
        timer = _SequencedTimer(when, callback, args, self, context)
        timer._coordsim_key = (when, self._timer_seq)
        patches.schedule_timer(self, timer)
        return timer

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
