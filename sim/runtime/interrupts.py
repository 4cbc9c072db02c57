"""SIGINT, SIGTERM and SIGHUP: one behaviour for all three, in every command.

The first signal cancels the running simulation through an anyio cancel scope
(level-triggered: unlike asyncio's `Task.cancel()`, which the runner's stock
SIGINT handler uses, an inner scope cannot swallow it, so a run can never
ignore Ctrl-C), lets every `finally` and `__aexit__` clean up (the embedded
Postgres, temporary directories, staging output), then raises `Interrupted`.
Outside a running loop the first signal raises `Interrupted` at once. A second
signal exits at once, after removing the temporary directories registered
here; an embedded Postgres then dies with its watchdog. Should the cleanup
itself hang (a driver call on a stalled server, a shielded cleanup retrying a
dead one), the process exits that way anyway `GRACE_S` after the first signal.

A dependency that dies under the run (`fail`, e.g. the embedded postmaster's
watcher) stops it the same way, from any thread: the run is cancelled, no
retry starts while stopping (`stopping`), and `guard` raises the failure
instead of `Interrupted`; past `GRACE_S` its one line is printed and the
process exits 1.

Signal dispositions are per process, so the little state this keeps is too
(one `_State` object, touched only from the main thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterator
    from pathlib import Path
    from types import FrameType

__all__ = [
    "GRACE_S",
    "SIGNALS",
    "Interrupted",
    "clear_failure",
    "exit_code",
    "fail",
    "failure",
    "guard",
    "install",
    "received",
    "stopping",
    "temporary_path",
]

T = TypeVar("T")

#: The signals that stop a command; all three behave exactly like Ctrl-C.
SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Seconds a stopping process has to clean up before it exits at once (its
#: temporary directories removed, an embedded Postgres left to its watchdog):
#: a stop is promised within 5 s, whatever the run was waiting on.
GRACE_S: Final = 3.5


class Interrupted(KeyboardInterrupt):
    """The run was stopped by `signum` after cleaning up. A `KeyboardInterrupt`,
    so code that already treats Ctrl-C as "stop now" treats SIGTERM alike."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(signum: int) -> int:
    """The shell's convention: 128 + the signal's number (130 for SIGINT)."""
    return 128 + signum


@dataclass
class _State:
    installed: bool = False
    deferring: bool = False
    #: Between os.fork's before- and after-hooks (`_fork_begins`).
    forking: bool = False
    received: int | None = None
    #: The cancel scope of the loop now running in the main thread, and its loop.
    active: tuple[anyio.CancelScope, asyncio.AbstractEventLoop] | None = None
    #: Paths this process created and removes itself; removed on a second signal.
    temporary: dict[Path, None] = field(default_factory=dict)
    #: A dependency's death that is stopping the run (`fail`), and the line
    #: (and exit code) that reports it should the cleanup not finish in time.
    failure: BaseException | None = None
    failure_line: str = ""
    failure_code: int = 1
    #: The `GRACE_S` timer started by the first signal or failure.
    timer: threading.Timer | None = None


_STATE: Final = _State()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _STATE.received is not None:
        _exit_now(signum)
    _STATE.received = signum
    if _STATE.deferring:
        return
    _start_grace(lambda: _exit_now(signum, late=True))
    if _STATE.forking:
        # Inside fork's hooks (logging's lock release, say) an exception is
        # printed with its traceback and dropped: recorded only, the next
        # `guard` or `install()` raises it (the grace timer stops us if none does).
        return
    active = _STATE.active
    if active is None:
        if not _loop_running():
            raise Interrupted(signum)
        # A loop is running but not (or no longer) under `guard`: raising here
        # would tear through whatever callback it is in. The next `guard` to
        # start, or the one now finishing, raises instead.
        return
    scope, loop = active
    # Scheduled, not called: a signal handler runs between two bytecodes of
    # whatever the loop was doing. call_soon_threadsafe also wakes a loop that
    # is blocked in its selector.
    loop.call_soon_threadsafe(scope.cancel)


def _exit_now(signum: int, *, late: bool = False) -> None:
    """The second signal (or a cleanup past `GRACE_S`): remove what we created, and go."""
    name = signal.Signals(signum).name
    why = f"stopped by {name}; cleanup took over {GRACE_S:g} s" if late else f"{name} again"
    _remove_temporary()
    with contextlib.suppress(OSError):
        os.write(2, f"coordsim: {why}: stopped at once\n".encode())
    os._exit(exit_code(signum))


def _remove_temporary() -> None:
    for path in list(_STATE.temporary):
        shutil.rmtree(path, ignore_errors=True)


def _start_grace(then: Callable[[], None]) -> None:
    """Runs `then` (which exits the process) `GRACE_S` from now, unless the
    process exits first. Once: the first stop's deadline holds."""
    if _STATE.timer is not None:
        return
    timer = threading.Timer(GRACE_S, then)
    timer.daemon = True  # never keeps a finished process alive
    _STATE.timer = timer
    timer.start()


def _exit_failed() -> None:
    """A failure's cleanup outlived `GRACE_S`: its line, and go."""
    if _STATE.received is not None:  # a signal came meanwhile: it decides
        _exit_now(_STATE.received, late=True)
    _remove_temporary()
    with contextlib.suppress(OSError):
        sys.stderr.flush()
        os.write(2, f"{_STATE.failure_line}\n".encode())
    os._exit(_STATE.failure_code)


def fail(exc: BaseException, *, line: str, code: int = 1) -> None:
    """Stops the run because a dependency failed (callable from any thread):
    the running `guard` is cancelled and raises `exc` once unwound; a `guard`
    started later raises it at once. Should the cleanup take more than
    `GRACE_S`, the process prints `line` to stderr and exits with `code`.
    The first failure wins. Without `install()` (a library caller) only the
    record is kept (`failure`) and nothing is cancelled."""
    if _STATE.failure is not None:
        return
    _STATE.failure, _STATE.failure_line, _STATE.failure_code = exc, line, code
    if not _STATE.installed:
        return
    _start_grace(_exit_failed)
    active = _STATE.active
    if active is not None:
        scope, loop = active
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(scope.cancel)


def failure() -> BaseException | None:
    """The failure `fail` recorded, if any."""
    return _STATE.failure


def clear_failure() -> None:
    """Forgets a recorded failure once its owner has reported it (a library
    caller or a test may start another run in this process)."""
    _STATE.failure = None
    _STATE.failure_line = ""


def stopping() -> bool:
    """A signal or a dependency's failure is stopping this process: retrying
    an external operation now would only delay the stop."""
    return _STATE.received is not None or (_STATE.installed and _STATE.failure is not None)


def _fork_begins() -> None:
    _STATE.forking = True


def _fork_ends() -> None:
    _STATE.forking = False


def install(*, defer: bool = False) -> None:
    """Routes SIGINT, SIGTERM and SIGHUP through this module. Off the main
    thread it does nothing.

    `defer=True` is for the executable's first line, before the heavy imports:
    a signal then is only recorded (an exception raised inside an import may
    be swallowed by a library's fallback and the run would go on), and the
    next `install()` raises `Interrupted` for it.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    _STATE.deferring = defer
    if not _STATE.installed:
        for sig in SIGNALS:
            signal.signal(sig, _on_signal)
        # After logging's own hooks (asyncio, imported above, imports logging): ours run first
        # before a fork and last after it, around logging's lock.
        os.register_at_fork(before=_fork_begins, after_in_parent=_fork_ends, after_in_child=_fork_ends)
        _STATE.installed = True
    if not defer and _STATE.received is not None:
        raise Interrupted(_STATE.received)


async def guard(coro: Coroutine[Any, Any, T]) -> T:
    """Runs `coro` in a cancel scope that the first signal cancels; raises
    `Interrupted` once it has unwound. Without `install()` (a library caller,
    a test) or off the main thread it just awaits `coro`, leaving the loop's
    stock SIGINT behaviour in place."""
    if not _STATE.installed or threading.current_thread() is not threading.main_thread():
        return await coro
    if _STATE.received is not None:
        coro.close()
        raise Interrupted(_STATE.received)
    if _STATE.failure is not None:
        coro.close()
        raise _STATE.failure
    scope = anyio.CancelScope()
    outer, _STATE.active = _STATE.active, (scope, asyncio.get_running_loop())
    try:
        with scope:
            if received() is not None or _STATE.failure is not None:
                # It came while this guard was starting (the handler saw no
                # active scope): cancel now, or nothing ever would.
                scope.cancel()
            return await coro
    finally:
        _STATE.active = outer
        if _STATE.received is not None:
            # Raised from `finally` on purpose: whatever unwinding produced
            # (a cancellation, an error raised while closing), the process
            # is stopping because of the signal.
            raise Interrupted(_STATE.received)
        if _STATE.failure is not None:
            # Likewise: a dependency died, and the errors its death caused
            # while unwinding are consequences, not the news.
            raise _STATE.failure
    # Only a signal or a failure cancels `scope`, and then `finally` raised.
    raise AssertionError("the run's cancel scope ended the run without a signal")


@contextlib.contextmanager
def temporary_path(path: Path) -> Iterator[Path]:
    """Registers `path` (created by this process) for removal should a second
    signal end the process before the caller's own cleanup runs."""
    _STATE.temporary[path] = None
    try:
        yield path
    finally:
        _STATE.temporary.pop(path, None)


def received() -> int | None:
    """The signal that is stopping the process, if any."""
    return _STATE.received
