"""Progress for a step that has no measure of its own (issue 37: every command
that can run over 5 s shows progress): a spinner on a terminal, otherwise a
line every few seconds saying what runs, for how long and, when the caller
can tell, how far it got (`status`: a running simulation's virtual time and
operations done, say).

It is the one helper every such command uses (`coordsim run` of a Python
scenario, `validate`, `calibrate`, `anomalies run`, `shrink`, `anomalies
matrix`, `check` of one history, `export`, `synth-trace`, each `isolation`
run); the commands that do have a measure (compare's levels, a sweep's
seeds, Spark's tasks) show a bar of their own. Everything goes to the console given, stderr's: stdout
stays the command's result.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from rich.console import Console

__all__ = ["EVERY_S", "heartbeat", "virtual_status"]

#: Seconds between two lines off a terminal.
EVERY_S: Final = 5.0
#: Seconds between two updates of the spinner's text on a terminal.
_SPIN_S: Final = 0.5


@contextlib.contextmanager
def heartbeat(
    console: Console, what: str, *, every: float | None = None, status: Callable[[], str] | None = None
) -> Iterator[None]:
    """Shows that `what` is running for the block, on `console` (stderr's):
    a spinner on a terminal, else `what, N s[, status()]` every `every`
    seconds (default `EVERY_S`), from a thread the block starts and joins.

    Args:
        status: what the block has done so far, read from that thread (it
            must not block, and may read what another thread writes: a
            progress line may be a little stale, never wrong in kind).
    """
    period = EVERY_S if every is None else every
    digits = 0 if period >= 1 else 1  # lines less than a second apart tell tenths
    t0 = time.monotonic()

    def text() -> str:
        line = f"{what}, {time.monotonic() - t0:.{digits}f} s"
        extra = status() if status is not None else ""
        return f"{line}, {extra}" if extra else line

    stop = threading.Event()
    if console.is_terminal:
        with console.status(what) as spinner:
            if status is None:
                yield
                return

            def spin() -> None:
                while not stop.wait(min(period, _SPIN_S)):
                    spinner.update(text())

            with _thread(spin, stop):
                yield
        return

    def beat() -> None:
        while not stop.wait(period):
            console.print(text(), markup=False, highlight=False, soft_wrap=True)

    with _thread(beat, stop):
        yield


@contextlib.contextmanager
def _thread(target: Callable[[], None], stop: threading.Event) -> Iterator[None]:
    """`target` on a thread of its own for the block, stopped and joined after it."""
    thread = threading.Thread(target=target, name="coordsim-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def virtual_status() -> str:
    """The virtual time of the simulation this process runs, if one runs
    (`sim.runtime.core.running_virtual_time`): a status for `heartbeat`."""
    from sim.runtime.core import running_virtual_time

    vt = running_virtual_time()
    return "" if vt is None else f"virtual time {vt:.3f} s"
