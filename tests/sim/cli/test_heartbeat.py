"""A step with no measure of its own still shows progress (sim/cli/heartbeat.py):
a line every few seconds off a terminal, a spinner on one."""

from __future__ import annotations

import io
import re
import threading

from rich.console import Console

from sim.cli.heartbeat import heartbeat


def test_off_a_terminal_it_is_a_line_every_few_seconds() -> None:
    shown = io.StringIO()
    console = Console(file=shown, force_terminal=False, width=200)
    seen = threading.Event()
    with heartbeat(console, "calibrate: measuring", every=0.01):
        # The block runs until the heartbeat has spoken twice (bounded: a hung
        # thread fails the wait, not the suite).
        for _ in range(500):
            if shown.getvalue().count("\n") >= 2:
                seen.set()
                break
            seen.wait(0.01)
    assert seen.is_set(), shown.getvalue()
    lines = shown.getvalue().splitlines()
    assert all(re.fullmatch(r"calibrate: measuring, \d+\.\d s", line) for line in lines), lines
    after = shown.getvalue()
    seen.wait(0.05)
    assert shown.getvalue() == after  # the thread ended with the block


def test_on_a_terminal_it_is_a_spinner_and_no_line() -> None:
    shown = io.StringIO()
    console = Console(file=shown, force_terminal=True, width=200)
    with heartbeat(console, "calibrate: measuring", every=0.01):
        pass
    assert ", 0 s" not in shown.getvalue()


def _beats(shown: io.StringIO, n: int) -> None:
    """Waits (bounded) until `shown` holds `n` lines: the block runs until the
    heartbeat has spoken, however fast the machine."""
    seen = threading.Event()
    for _ in range(500):
        if shown.getvalue().count("\n") >= n:
            return
        seen.wait(0.01)
    raise AssertionError(shown.getvalue())


def test_a_status_says_how_far_the_block_got() -> None:
    shown = io.StringIO()
    console = Console(file=shown, force_terminal=False, width=200)
    done = [0]

    def status() -> str:
        done[0] += 1
        return f"{done[0]} operations done"

    with heartbeat(console, "run s on decoupled", every=0.01, status=status):
        _beats(shown, 2)
    lines = shown.getvalue().splitlines()
    assert all(re.fullmatch(r"run s on decoupled, \d+\.\d s, \d+ operations done", line) for line in lines), lines
    assert lines[0].endswith(", 1 operations done")


def test_an_empty_status_adds_nothing() -> None:
    shown = io.StringIO()
    with heartbeat(Console(file=shown, force_terminal=False, width=200), "check x", every=0.01, status=str):
        _beats(shown, 1)
    assert all(re.fullmatch(r"check x, \d+\.\d s", line) for line in shown.getvalue().splitlines())


def test_on_a_terminal_a_status_updates_the_spinner_and_prints_no_line() -> None:
    shown = io.StringIO()
    console = Console(file=shown, force_terminal=True, width=200)
    asked = threading.Event()

    def status() -> str:
        asked.set()
        return "3 operations done"

    with heartbeat(console, "run s", every=0.01, status=status):
        assert asked.wait(5)
    # The spinner's own text said it (rich redraws, then erases the spinner),
    # and no plain line did.
    drawn = [line for line in shown.getvalue().splitlines() if "3 operations done" in line]
    assert drawn, shown.getvalue()
    assert all("\x1b[" in line for line in drawn), drawn


def test_the_virtual_status_is_the_running_simulations_time() -> None:
    from sim.cli.heartbeat import virtual_status
    from sim.runtime.core import Runtime, run, running_virtual_time

    async def main(rt: Runtime) -> str:
        await rt.sleep(2.5)
        return virtual_status()

    assert running_virtual_time() is None
    assert virtual_status() == ""
    assert run(main) == "virtual time 2.500 s"
    assert running_virtual_time() is None  # the run is over
