"""The virtual-time event loop: asyncio whose clock jumps to the next timer
whenever nothing is ready, so a seeded program replays the same events."""

from __future__ import annotations

import asyncio
import math
import selectors
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

if TYPE_CHECKING:

    from collections.abc import Callable, Coroutine, Mapping
    pass

__all__ = ['VirtualDeadlock', 'VirtualEventLoop', 'VirtualIOError']

T = TypeVar("T")

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
        self._coordsim_seq = loop._next_seq()
        super().__init__(coro, loop=loop, **kw)

    def __hash__(self) -> int:
        return self._coordsim_seq


class _VirtualFuture(asyncio.Future[Any]):
    """A Future with a deterministic hash, for the same reason as `_VirtualTask`."""

    def __init__(self, *, loop: VirtualEventLoop):
        self._coordsim_seq = loop._next_seq()
        super().__init__(loop=loop)

    def __hash__(self) -> int:
        return self._coordsim_seq


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
        # An infinite timer (`anyio.sleep_forever()` is `asyncio.sleep(math.inf)`) can
        # never fire: waiting on it is a deadlock, not an endless run of capped jumps.
        if timeout is None or (timeout > 0 and math.isinf(loop._scheduled[0]._when)):  # type: ignore[attr-defined]
            raise VirtualDeadlock(
                "virtual-time deadlock: every task is waiting and no timer is scheduled "
                f"that could wake one ({len(asyncio.all_tasks(loop))} tasks alive)"
            )
        if timeout > 0:
            # _run_once already removed cancelled timers from the head of the heap,
            # so the head is the next event. Jump exactly onto it (float-safe), even
            # past asyncio's select cap: capped steps never reach a far-off timer.
            when: float = loop._scheduled[0]._when  # type: ignore[attr-defined]
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


class _InsertionOrderedSet(dict[Any, None]):
    """The set operations anyio's cancel scope uses on its child scopes, iterating in
    insertion order."""

    def add(self, item: Any) -> None:
        self[item] = None

    def remove(self, item: Any) -> None:
        del self[item]

    def discard(self, item: Any) -> None:
        self.pop(item, None)


_anyio_patched = False


def _patch_anyio() -> None:
    """Makes anyio's asyncio backend deterministic on the virtual loop (only there).

    1. anyio delivers a cancellation by iterating a `set` of child `CancelScope`s,
       which hash by memory address, so the order in which cancelled tasks wake
       would change from run to run. Child scopes are kept in entry order instead;
       `_InsertionOrderedSet` has the operations anyio uses.
    2. `anyio.to_thread.run_sync` runs a real thread whose result lands at whatever
       virtual time the loop has reached by then; it raises `VirtualIOError` instead,
       like `loop.run_in_executor`.

    If anyio's internals change, this does nothing, and tests/sim/test_runtime.py and
    test_runtime_determinism.py fail.
    """
    global _anyio_patched
    if _anyio_patched:
        return
    _anyio_patched = True
    try:
        from anyio._backends import _asyncio as anyio_asyncio
    except ImportError:
        return

    def on_virtual_loop() -> bool:
        return isinstance(asyncio.events._get_running_loop(), VirtualEventLoop)

    scope_cls: Any = getattr(anyio_asyncio, "CancelScope", None)
    if scope_cls is not None and hasattr(scope_cls, "_child_scopes"):
        original_init = scope_cls.__init__

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, *args, **kwargs)
            if on_virtual_loop():
                self._child_scopes = _InsertionOrderedSet()

        scope_cls.__init__ = __init__

    backend_cls: Any = getattr(anyio_asyncio, "AsyncIOBackend", None)
    original_run_sync = getattr(backend_cls, "run_sync_in_worker_thread", None)
    if original_run_sync is not None:

        async def run_sync_in_worker_thread(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if on_virtual_loop():
                raise VirtualIOError(
                    "anyio.to_thread.run_sync() runs a real thread, which is not allowed on "
                    "the virtual-time loop; virtual mode must use the in-memory backends"
                )
            return await original_run_sync(*args, **kwargs)

        backend_cls.run_sync_in_worker_thread = classmethod(run_sync_in_worker_thread)


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """A deterministic asyncio loop whose `time()` is virtual.

    When no callback is ready, time jumps to the next scheduled timer instead of
    waiting, so simulated seconds cost microseconds. Timers, task groups, anyio
    cancel scopes, `asyncio.timeout` all work unchanged. Real I/O raises
    `VirtualIOError`; waiting forever raises `VirtualDeadlock`.

    Determinism: callbacks run in asyncio's FIFO order and timers in heap order,
    both of which depend only on the program; tasks and futures hash by creation
    number so set iteration cannot depend on memory addresses.
    """

    def __init__(self, *, epoch_ms: int = VIRTUAL_EPOCH_MS) -> None:
        _patch_anyio()
        self._virtual_now = 0.0
        self._seq = 0
        self.epoch_ms = epoch_ms
        selector = _VirtualSelector()
        super().__init__(selector)
        selector._loop = self

    # asyncio runs the timers due before time() + _clock_resolution. A fixed 1e-9 s
    # vanishes in float rounding once virtual time passes 2**24 s (~194 days): a due
    # timer would never run and the loop would spin. One ulp always counts.
    @property
    def _clock_resolution(self) -> float:
        return max(1e-9, math.ulp(self._virtual_now))

    @_clock_resolution.setter
    def _clock_resolution(self, value: float) -> None:
        pass  # BaseEventLoop.__init__ stores the real clock's resolution; not ours.

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def time(self) -> float:
        return self._virtual_now

    def create_task(  # type: ignore[override]
        self, coro: Coroutine[Any, Any, T], *, name: str | None = None, **kwargs: Any
    ) -> asyncio.Task[T]:
        self._check_closed()  # type: ignore[attr-defined]
        task = _VirtualTask(coro, loop=self, name=name, **kwargs)
        return task

    def create_future(self) -> asyncio.Future[Any]:
        return _VirtualFuture(loop=self)

    # No self-pipe: nothing outside the loop's own thread may wake it.
    def _make_self_pipe(self) -> None:
        pass

    def _close_self_pipe(self) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def _process_events(self, event_list: list[Any]) -> None:
        pass

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


