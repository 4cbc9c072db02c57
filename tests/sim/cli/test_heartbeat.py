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
    assert all(re.fullmatch(r"calibrate: measuring, \d+ s", line) for line in lines), lines
    after = shown.getvalue()
    seen.wait(0.05)
    assert shown.getvalue() == after  # the thread ended with the block


def test_on_a_terminal_it_is_a_spinner_and_no_line() -> None:
    shown = io.StringIO()
    console = Console(file=shown, force_terminal=True, width=200)
    with heartbeat(console, "calibrate: measuring", every=0.01):
        pass
    assert ", 0 s" not in shown.getvalue()
