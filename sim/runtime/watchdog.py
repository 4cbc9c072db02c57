"""A watchdog for code that never gives the event loop back.

A stuck limit (`anyio.move_on_after`) only fires when the loop turns: a
scenario script that spins (`while True: pass`) or blocks the thread
(`time.sleep(10**9)`) holds the loop, so its run would hang for ever. This
watchdog, a thread, samples the loop's progress every `POLL_S` of wall time;
after `limit_s` without progress it interrupts the main thread with a signal
whose handler raises `LoopStalled` in whatever code is running there.

Progress is read without touching the loop in virtual mode (the virtual loop's
callback count: a thread's callback would change the schedule a seed fixes);
in real mode the thread posts a beat through `call_soon_threadsafe` and checks
that the loop ran it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import FrameType

__all__ = ["POLL_S", "LoopStalled", "loop_watchdog"]

#: How often the watchdog samples the loop, in wall seconds.
POLL_S: Final = 0.5
#: The signal that carries the interrupt into the main thread: one nothing
#: else of coordsim (nor pytest-timeout, which uses SIGALRM) handles.
_SIGNAL: Final = signal.SIGUSR2


class LoopStalled(BaseException):
    """The loop made no progress for the watchdog's limit: the code running in
    the main thread never yielded. A BaseException, so a script's `except
    Exception` does not swallow it."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(f"the event loop made no progress for {limit_s:g} s of wall time: "
                         "the scenario never yielded (a loop without `await`, or a blocking call)")
        self.limit_s = limit_s


def _progress_of(loop: asyncio.AbstractEventLoop) -> Callable[[], int] | None:
    """The virtual loop's progress, read without touching it; None for a real
    loop, whose progress the watchdog's beats show."""
    from sim.runtime.loop import VirtualEventLoop

    if isinstance(loop, VirtualEventLoop):
        return lambda: loop.statistics().callbacks
    return None


@contextlib.contextmanager
def loop_watchdog(limit_s: float) -> Iterator[None]:
    """Raises `LoopStalled` in the main thread should the running loop make no
    progress for `limit_s` wall seconds while the block runs. Call it from a
    coroutine on the main thread's loop; elsewhere (a worker thread, which
    cannot take signals) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    read = _progress_of(loop)
    stop = threading.Event()
    stalled = [False]
    beat = [0]

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stalled[0]:
            stalled[0] = False
            raise LoopStalled(limit_s)

    def ticked() -> None:
        beat[0] += 1

    def watch() -> None:
        last, since = -1, time.monotonic()
        while not stop.wait(POLL_S):
            if read is None:
                with contextlib.suppress(RuntimeError):  # the loop closed
                    loop.call_soon_threadsafe(ticked)
                now_value = beat[0]
            else:
                now_value = read()
            if now_value != last:
                last, since = now_value, time.monotonic()
            elif time.monotonic() - since >= limit_s:
                stalled[0] = True
                signal.pthread_kill(threading.main_thread().ident or 0, _SIGNAL)
                since = time.monotonic()  # once per limit, should it be swallowed

    previous = signal.signal(_SIGNAL, on_signal)
    thread = threading.Thread(target=watch, name="coordsim-loop-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        signal.signal(_SIGNAL, previous)
