"""Stopping: the exception-chain cycle that made Ctrl-C spin forever, and the
level-triggered cancellation every signal goes through (sim/runtime/interrupts.py).
The real-mode signal trials are in test_signals.py."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from sim.runtime.tasks import AsyncExitStack

if TYPE_CHECKING:
    from types import TracebackType


class _Reraise:
    """Re-raises the exception it is handed, as anyio's TaskGroup.__aexit__ does."""

    async def __aenter__(self) -> _Reraise:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool:
        assert e is not None
        raise e


class _RaiseNew:
    async def __aenter__(self) -> _RaiseNew:
        return self

    async def __aexit__(self, *exc: object) -> bool:
        raise ValueError("raised while closing")


def _chain_has_cycle(exc: BaseException) -> bool:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None:
        if id(e) in seen:
            return True
        seen.add(id(e))
        e = e.__context__
    return False


async def _unwind(stack: contextlib.AsyncExitStack) -> BaseException:
    await stack.enter_async_context(_Reraise())
    await stack.enter_async_context(_RaiseNew())
    try:
        raise KeyError("the body's error")
    except KeyError as body:
        try:
            await stack.__aexit__(type(body), body, body.__traceback__)
        except ValueError as got:
            return got
    raise AssertionError("the stack swallowed the error")


def test_contextlib_makes_the_cycle_that_hung_ctrl_c() -> None:
    """The mechanism, pinned: with contextlib's stack, an exit callback that
    re-raises a newer exception makes that exception its own context — the
    chain contextlib then walks forever on the next exit."""
    got = asyncio.run(_unwind(contextlib.AsyncExitStack()))
    assert got.__context__ is got


def test_our_exit_stack_keeps_the_chain_acyclic() -> None:
    got = asyncio.run(_unwind(AsyncExitStack()))
    assert not _chain_has_cycle(got)
    assert isinstance(got.__context__, KeyError)


def _raise(exc: BaseException) -> None:
    raise exc


def test_our_exit_stack_still_propagates_and_suppresses() -> None:
    class Suppress:
        async def __aenter__(self) -> None:
            return None

        async def __aexit__(self, *exc: Any) -> bool:
            return True

    async def body(cm: Any) -> str:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(cm)
            _raise(KeyError("from the body"))
        return "suppressed"

    assert asyncio.run(body(Suppress())) == "suppressed"
    with pytest.raises(KeyError):
        asyncio.run(body(_Reraise()))


# A program whose run ignores asyncio's one-shot Task.cancel(): an inner anyio
# scope swallows it (what the anomaly runs did), so only a level-triggered
# cancellation stops it. It prints READY, then is signalled by the test.
_PROGRAM = textwrap.dedent(
    """
    import asyncio, sys
    import anyio
    from sim.runtime import interrupts
    from sim.runtime.core import run

    async def main(rt):
        try:
            async with anyio.create_task_group() as tg:
                async def spin():
                    while True:
                        with anyio.CancelScope() as inner:
                            inner.cancel()
                            await asyncio.sleep(0.001)
                        await asyncio.sleep(0.001)
                tg.start_soon(spin)
                print("READY", flush=True)
                await anyio.sleep_forever()
        finally:
            print("CLEANED", flush=True)

    interrupts.install()
    try:
        run(main, virtual=sys.argv[1] == "virtual")
    except interrupts.Interrupted as exc:
        print("INTERRUPTED", exc.signum, flush=True)
        sys.exit(interrupts.exit_code(exc.signum))
    """
)


@pytest.mark.parametrize("mode", ["real", "virtual"])
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_every_stop_signal_cancels_and_cleans_up(mode: str, signame: str) -> None:
    import signal

    with subprocess.Popen(
        [sys.executable, "-c", _PROGRAM, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(getattr(signal, signame))
        try:
            out, err = proc.communicate(timeout=10)
        finally:
            proc.kill()
    signum = getattr(signal, signame).value
    assert "CLEANED" in out, (out, err)
    assert f"INTERRUPTED {signum}" in out, (out, err)
    assert proc.returncode == 128 + signum
    assert "Traceback" not in err


def test_a_second_signal_exits_at_once() -> None:
    import signal

    program = _PROGRAM.replace(
        'print("CLEANED", flush=True)', 'print("CLEANED", flush=True); import time; time.sleep(60)'
    )
    with subprocess.Popen(
        [sys.executable, "-c", program, "real"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline().strip() == "CLEANED"  # now stuck in cleanup
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=5)
        finally:
            proc.kill()
    assert proc.returncode == 130
    assert "stopped at once" in err


_FORK_PROGRAM = textwrap.dedent(
    """
    import os, signal, sys
    from sim.runtime import interrupts

    # Stands for logging's lock release, which os.fork runs after forking: a
    # hook registered before ours, so it runs inside our fork window.
    os.register_at_fork(after_in_parent=lambda: signal.raise_signal(signal.SIGINT))
    interrupts.install()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("FORKED", flush=True)
    try:
        interrupts.install()
    except interrupts.Interrupted as exc:
        print("INTERRUPTED", exc.signum, flush=True)
        sys.exit(interrupts.exit_code(exc.signum))
    """
)


def test_a_signal_inside_forks_hooks_is_raised_after_not_printed_and_dropped() -> None:
    """Found by test_signals.py's random point: SIGINT landed in logging's
    at-fork lock release, where Python prints an exception's traceback and
    drops it. Inside the fork's hooks the signal is now only recorded, and the
    next `install()` (or `guard`) raises it."""
    proc = subprocess.run([sys.executable, "-c", _FORK_PROGRAM], capture_output=True, text=True, timeout=30)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["FORKED", "INTERRUPTED", "2"], (proc.stdout, proc.stderr)
    assert proc.returncode == 130
