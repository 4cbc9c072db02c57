"""`sim.runtime.watchdog`: code that holds the loop is interrupted in the
main thread, on the real loop (the watchdog's beats) and on the virtual one
(its callback count); code that yields is left alone."""

from __future__ import annotations

import time

import anyio
import pytest

from sim.runtime.core import Runtime, run
from sim.runtime.watchdog import LoopStalled, loop_watchdog


@pytest.mark.parametrize("virtual", [False, True], ids=["real", "virtual"])
def test_a_blocked_loop_is_interrupted(virtual: bool) -> None:
    async def main(rt: Runtime) -> float:
        t0 = time.monotonic()
        with pytest.raises(LoopStalled) as e, loop_watchdog(1.0):
            time.sleep(30)  # noqa: ASYNC251 - holds the loop on purpose: no await
        assert e.value.limit_s == 1.0
        return time.monotonic() - t0

    took = run(main, virtual=virtual)
    assert 1.0 <= took < 5.0


@pytest.mark.parametrize("virtual", [False, True], ids=["real", "virtual"])
def test_a_loop_that_turns_is_left_alone(virtual: bool) -> None:
    async def main(rt: Runtime) -> int:
        turns = 0
        with loop_watchdog(1.0):
            t0 = time.monotonic()
            while time.monotonic() - t0 < 2.5:  # 2.5 s of wall time, yielding often
                time.sleep(0.05)  # noqa: ASYNC251 - wall time passes, the loop still turns
                await anyio.sleep(0.01)
                turns += 1
        return turns

    assert run(main, virtual=virtual) > 10
