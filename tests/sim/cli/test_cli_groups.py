"""A task group's error reaches the CLI wrapped in an ExceptionGroup; the
CLI reports its first coordsim error as one line with that error's exit
code, and lets anything else through as the bug it is."""

from __future__ import annotations

import asyncio

from sim.cli.main import _first_coordsim_error
from sim.runtime.errors import Indeterminate, InvalidUsage


def test_the_first_coordsim_error_of_a_nested_group_is_the_story() -> None:
    first = Indeterminate("adapter process 2 exited")
    group = BaseExceptionGroup("tg", [asyncio.CancelledError(), ExceptionGroup("inner", [first, InvalidUsage("x")])])
    assert _first_coordsim_error(group) is first
    assert _first_coordsim_error(first) is first


def test_a_group_holding_anything_else_is_not_reported_as_input() -> None:
    assert _first_coordsim_error(ExceptionGroup("tg", [Indeterminate("a"), KeyError("bug")])) is None
    assert _first_coordsim_error(KeyError("bug")) is None


def test_a_group_of_cancellations_alone_is_not_an_error() -> None:
    assert _first_coordsim_error(BaseExceptionGroup("tg", [asyncio.CancelledError()])) is None
