"""Progress for a step that has no measure of its own (issue 37: every command
that can run over 5 s shows progress): a spinner on a terminal, otherwise a
line every few seconds saying what runs and for how long."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterator

    from rich.console import Console

__all__ = ["EVERY_S", "heartbeat"]

#: Seconds between two lines off a terminal.
EVERY_S: Final = 5.0


@contextlib.contextmanager
def heartbeat(console: Console, what: str, *, every: float = EVERY_S) -> Iterator[None]:
    """Shows that `what` is running for the block, on `console` (stderr's):
    a spinner on a terminal, else `what, N s` every `every` seconds from a
    thread the block starts and joins."""
    if console.is_terminal:
        with console.status(what):
            yield
        return
    stop = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not stop.wait(every):
            console.print(f"{what}, {time.monotonic() - t0:.0f} s", markup=False, highlight=False, soft_wrap=True)

    thread = threading.Thread(target=beat, name="coordsim-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
