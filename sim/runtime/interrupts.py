"""SIGINT, SIGTERM and SIGHUP: one behaviour for all three, in every command.

The first signal cancels the running simulation through an anyio cancel scope
(level-triggered: unlike asyncio's `Task.cancel()`, which the runner's stock
SIGINT handler uses, an inner scope cannot swallow it, so a run can never
ignore Ctrl-C), lets every `finally` and `__aexit__` clean up (the embedded
Postgres, temporary directories, staging output), then raises `Interrupted`.
Outside a running loop the first signal raises `Interrupted` at once. A second
signal exits at once, after removing the temporary directories registered
here; an embedded Postgres then dies with its watchdog.

Signal dispositions are per process, so the little state this keeps is too
(one `_State` object, touched only from the main thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio

if TYPE_CHECKING:
    from collections.abc import Coroutine, Iterator
    from pathlib import Path
    from types import FrameType

__all__ = [
    "SIGNALS",
    "Interrupted",
    "exit_code",
    "guard",
    "install",
    "received",
    "temporary_path",
]

T = TypeVar("T")

#: The signals that stop a command; all three behave exactly like Ctrl-C.
SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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
    received: int | None = None
    #: The cancel scope of the loop now running in the main thread, and its loop.
    active: tuple[anyio.CancelScope, asyncio.AbstractEventLoop] | None = None
    #: Paths this process created and removes itself; removed on a second signal.
    temporary: dict[Path, None] = field(default_factory=dict)


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


def _exit_now(signum: int) -> None:
    """The second signal: remove what we created, and go."""
    for path in list(_STATE.temporary):
        shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.write(2, f"coordsim: {signal.Signals(signum).name} again: stopped at once\n".encode())
    os._exit(exit_code(signum))


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
    scope = anyio.CancelScope()
    outer, _STATE.active = _STATE.active, (scope, asyncio.get_running_loop())
    try:
        with scope:
            if received() is not None:
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
    # Only a signal cancels `scope`, and then `finally` raised.
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
