"""One test per patch of asyncio's and anyio's internals (sim/runtime/patches.py).

Each checks that the internal is still there and still behaves as the patch
assumes, and, where it can be shown in one process, that the behaviour the patch
fixes is still what the library does without it. A library upgrade that moves
the ground under a patch fails here, by name, instead of in a flaky trace.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import inspect
import os
import sys
import threading
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from anyio._backends import _asyncio as anyio_asyncio

from sim.runtime import patches
from sim.runtime.core import Runtime, run
from sim.runtime.loop import VirtualEventLoop, VirtualIOError

if TYPE_CHECKING:
    from collections.abc import Coroutine

REPO = Path(__file__).resolve().parents[3]


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_versions_are_the_verified_ones() -> None:
    # A new Python or anyio minor may change any internal below: verify the
    # patches on it, then add it to VERIFIED_* and widen the pin.
    assert sys.implementation.name == "cpython"
    assert sys.version_info[:2] in patches.VERIFIED_PYTHON
    assert _minor(importlib.metadata.version("anyio")) in patches.VERIFIED_ANYIO
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.startswith("anyio")]
    (low_major, low_minor) = min(patches.VERIFIED_ANYIO)
    (high_major, high_minor) = max(patches.VERIFIED_ANYIO)
    assert pins == [f"anyio>={low_major}.{low_minor},<{high_major}.{high_minor + 1}"]
    # requires-python declares exactly the verified CPython minors.
    (py_low_major, py_low_minor) = min(patches.VERIFIED_PYTHON)
    (py_high_major, py_high_minor) = max(patches.VERIFIED_PYTHON)
    assert pyproject["project"]["requires-python"] == (
        f">={py_low_major}.{py_low_minor},<{py_high_major}.{py_high_minor + 1}"
    )


def test_coordsim_refuses_an_untested_interpreter_in_one_line() -> None:
    """As if this interpreter were not among the verified ones: the entry
    point says so in one line and exits 2, before it loads the CLI."""
    import subprocess

    program = ("import sim.runtime.verified as v; v.VERIFIED_PYTHON = ((3, 99),); "
               "from sim.cli.entry import main; main()")
    proc = subprocess.run([sys.executable, "-c", program, "--help"], capture_output=True, text=True, cwd=REPO,
                          timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"Python {sys.version_info.major}.{sys.version_info.minor} is untested" in lines[0]
    assert "3.99" in lines[0]
    assert proc.stdout == ""


def test_structural_checks_pass_and_name_what_is_missing() -> None:
    patches.check_asyncio()
    patches.check_cancel_scope(anyio_asyncio.CancelScope)
    patches.check_worker_threads(anyio_asyncio.AsyncIOBackend)

    class Scope:
        pass

    class Backend:
        async def run_sync_in_worker_thread(self) -> None:
            pass

    with pytest.raises(patches.UnverifiedInternals, match=r"_child_scopes.*re-verify"):
        patches.check_cancel_scope(Scope)
    with pytest.raises(patches.UnverifiedInternals, match="no classmethod"):
        patches.check_worker_threads(Backend)
    VirtualEventLoop().close()  # the patches are applied for this loop type only
    with pytest.raises(ValueError, match="already patched"):
        patches.patch_anyio(asyncio.SelectorEventLoop, RuntimeError)


# --- Patch 1: the loop's own turn -----------------------------------------------------------


def _timer_due_now_runs(now: float) -> bool:
    loop = VirtualEventLoop()
    try:
        loop._virtual_now = now  # the clock as a jump onto a timer at `now` leaves it
        fired: list[bool] = []
        loop.call_at(now, fired.append, True)

        async def spin() -> None:  # keeps callbacks ready, so the clock stays at `now`
            for _ in range(10):
                await asyncio.sleep(0)

        loop.run_until_complete(spin())
        return fired == [True]
    finally:
        loop.close()


def test_due_timers_run_at_any_clock_value() -> None:
    # asyncio's 1 ns clock resolution is below one float step past 2**24 s
    # (2**30 + 1e-9 == 2**30): a due timer must still run there.
    assert 2.0**30 + 1e-9 == 2.0**30
    for now in (1.0, 2.0**23 + 0.5, 2.0**30, 2.0**60):
        assert _timer_due_now_runs(now)


def test_run_forever_still_drives_the_loop_through_run_once() -> None:
    # Patch 1 replaces `_run_once`; asyncio's `run_forever` must still call it
    # and stop once `_stopping` is set.
    turns: list[int] = []

    class Counting(VirtualEventLoop):
        def _run_once(self) -> None:
            turns.append(1)
            super()._run_once()

    loop = Counting()
    try:
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert turns == [1]
        assert loop.run_until_complete(asyncio.sleep(5, result="done")) == "done"
        assert loop.time() == 5.0
    finally:
        loop.close()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_virtual_loop_opens_no_self_pipe_and_takes_callbacks_from_threads() -> None:
    before = _open_fds()
    loop = VirtualEventLoop()
    try:
        assert _open_fds() == before
        ran: list[int] = []
        _call_from_another_thread(loop, ran.append, 1)
        loop.run_until_complete(asyncio.sleep(0))
        assert ran == [1]
    finally:
        loop.close()
    assert _open_fds() == before


def _call_from_another_thread(loop: asyncio.AbstractEventLoop, fn: Any, arg: object) -> None:
    thread = threading.Thread(target=loop.call_soon_threadsafe, args=(fn, arg))
    thread.start()
    thread.join()


def _fire_order(loop: asyncio.AbstractEventLoop, whens: list[float]) -> list[int]:
    fired: list[int] = []
    for i, when in enumerate(whens):
        loop.call_at(when, fired.append, i)
    loop.run_until_complete(asyncio.sleep(max(whens) - loop.time() + 1))
    return fired


def test_stock_asyncio_breaks_timer_ties_by_heap_shape() -> None:
    # Why the loop keeps a heap of its own: ten timers due at one instant,
    # scheduled 0..9, fire in the order asyncio's heap shape gives. If this
    # starts passing, asyncio breaks ties by itself.
    loop = asyncio.new_event_loop()
    try:
        order = _fire_order(loop, [loop.time() - 1] * 10)
    finally:
        loop.close()
    assert sorted(order) == list(range(10))
    assert order != list(range(10))


def test_timers_fire_by_deadline_then_scheduling_order() -> None:
    loop = VirtualEventLoop()
    try:
        assert loop.next_timer() is None
        late = loop.call_at(5.0, lambda: None)
        early = loop.call_at(2.0, lambda: None)
        head = loop.next_timer()
        assert head is early
        assert head.when() == 2.0
        early.cancel()
        assert loop.next_timer() is late
        late.cancel()

        # Ties fire in scheduling order, other timers by deadline.
        whens = [float(1 + i % 3) for i in range(30)]
        assert _fire_order(loop, whens) == sorted(range(30), key=lambda i: whens[i])

        # Also after the bulk removal of cancelled timers rebuilds the heap
        # (more than 100 timers, more than half of them cancelled).
        start = loop.time()
        fired: list[int] = []
        timers = [loop.call_at(start + 1.0, fired.append, i) for i in range(300)]
        for i, timer in enumerate(timers):
            if i % 3:
                timer.cancel()
        loop.run_until_complete(asyncio.sleep(2.0))
        assert fired == list(range(0, 300, 3))
        assert loop._timer_cancelled_count == 0
    finally:
        loop.close()


def test_a_turn_runs_what_was_ready_at_its_start_then_due_timers_join_the_tail() -> None:
    """asyncio's turn structure, which the traces depend on: a callback
    scheduled during a turn runs in the next one, after the timers that fall
    due by then have joined the queue behind the callbacks already ready."""

    def order(loop: asyncio.AbstractEventLoop) -> list[str]:
        seen: list[str] = []

        def first() -> None:
            seen.append("first")
            loop.call_soon(seen.append, "soon-from-first")
            loop.call_later(0, seen.append, "timer-from-first")

        loop.call_soon(first)
        loop.call_soon(seen.append, "second")
        loop.call_later(0, seen.append, "timer")
        loop.run_until_complete(asyncio.sleep(0.01))
        return seen

    stock = asyncio.new_event_loop()
    virtual = VirtualEventLoop()
    try:
        assert order(virtual) == order(stock)
    finally:
        stock.close()
        virtual.close()


def test_callback_exceptions_reach_the_exception_handler() -> None:
    loop = VirtualEventLoop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:

        def boom() -> None:
            raise ValueError("boom")

        loop.call_soon(boom)
        loop.run_until_complete(asyncio.sleep(0))
        [context] = seen
        assert isinstance(context["exception"], ValueError)
        assert "boom" in context["message"]
    finally:
        loop.close()


# --- Patch 4: anyio's child cancel scopes in entry order -----------------------------------


def _child_scope_uses() -> set[str]:
    """How anyio's asyncio backend uses `CancelScope._child_scopes`."""
    tree = ast.parse(inspect.getsource(anyio_asyncio))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    uses = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr == "_child_scopes"):
            continue
        parent = parents[node]
        if isinstance(parent, ast.Attribute) and isinstance(parents[parent], ast.Call):
            uses.add(f"{parent.attr}()")
        elif isinstance(parent, ast.For) and parent.iter is node:
            uses.add("iterate")
        elif isinstance(parent, ast.AnnAssign) and parent.target is node:
            uses.add("assign")
        else:
            uses.add(ast.unparse(parent))
    return uses


def test_anyio_uses_only_what_the_ordered_set_has() -> None:
    assert _child_scope_uses() <= {"add()", "remove()", "discard()", "iterate", "assign"}
    assert "iterate" in _child_scope_uses()  # the order the patch fixes
    elsewhere = [
        path.relative_to(Path(anyio.__file__).parent)
        for path in Path(anyio.__file__).parent.rglob("*.py")
        if "_child_scopes" in path.read_text() and path != Path(anyio_asyncio.__file__)
    ]
    assert elsewhere == []
    ordered = patches.InsertionOrderedSet()
    for item in (3, 1, 2):
        ordered.add(item)
    ordered.remove(1)
    ordered.discard(1)
    assert list(ordered) == [3, 2]
    with pytest.raises(KeyError):
        ordered.remove(1)


async def _cancellation_order(n: int) -> tuple[list[int], list[int]]:
    """(entry order, cancellation order) of `n` child tasks of one task group,
    each inside a cancel scope of its own, when the group is cancelled."""
    entered: list[int] = []
    cancelled: list[int] = []

    async def hold(i: int) -> None:
        with anyio.CancelScope():
            entered.append(i)
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(hold, i)
        while len(entered) < n:
            await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    return entered, cancelled


def _run(program: Coroutine[Any, Any, Any], *, virtual: bool) -> Any:
    async def main(rt: Runtime) -> Any:
        return await program

    return run(main, virtual=virtual)


def test_child_scope_patch() -> None:
    entered, cancelled = _run(_cancellation_order(40), virtual=True)
    assert entered == list(range(40))
    assert cancelled == entered
    # Without the patch (the stock loop), cancellation follows a set of scopes
    # that hash by address: not entry order (the chance of 40 addresses landing
    # in entry order is nil). If this starts failing, anyio orders child scopes
    # by itself and the patch can go.
    entered, cancelled = _run(_cancellation_order(40), virtual=False)
    assert entered == list(range(40))
    assert sorted(cancelled) == entered
    assert cancelled != entered


def test_child_scope_patch_applies_only_on_the_virtual_loop() -> None:
    async def kind() -> type[Any]:
        return type(anyio.CancelScope()._child_scopes)  # type: ignore[attr-defined]

    assert _run(kind(), virtual=True) is patches.InsertionOrderedSet
    assert _run(kind(), virtual=False) is set


# --- Patch 5: no worker threads ------------------------------------------------------------


def test_worker_thread_patch() -> None:
    threads = threading.active_count()
    with pytest.raises(VirtualIOError, match=r"to_thread\.run_sync\(\) runs a real thread"):
        _run(anyio.to_thread.run_sync(sum, [1, 2]), virtual=True)
    assert threading.active_count() == threads  # refused before a thread started
    assert _run(anyio.to_thread.run_sync(sum, [1, 2]), virtual=False) == 3


# --- Patch 7: running-loop lookups --------------------------------------------------------


def test_running_loop_lookups_answer_the_running_loop() -> None:
    """While a virtual loop runs, the patched lookups name it; a stock loop
    running in another thread meanwhile still gets its own; with no loop
    running they raise as asyncio's do."""
    seen: dict[str, Any] = {}

    def other_thread() -> None:
        async def probe() -> None:
            loop = asyncio.get_running_loop()
            seen["thread"] = (asyncio.events.get_running_loop() is loop, anyio_asyncio.current_task() is not None,  # type: ignore[attr-defined]
                              type(loop).__name__)

        asyncio.run(probe())

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        assert asyncio.events.get_running_loop() is loop
        assert anyio_asyncio.get_running_loop() is loop  # type: ignore[attr-defined]
        assert anyio_asyncio.current_task() is asyncio.tasks._current_tasks.get(loop)  # type: ignore[attr-defined]
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()

    loop = VirtualEventLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert seen["thread"] == (True, True, "_UnixSelectorEventLoop")
    with pytest.raises(RuntimeError, match="no running event loop"):
        asyncio.events.get_running_loop()
    with pytest.raises(RuntimeError, match="no running event loop"):
        anyio_asyncio.current_task()  # type: ignore[attr-defined]
