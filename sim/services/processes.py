"""Child processes of the services (embedded PostgreSQL, local S3): a free
loopback port to start one on, commands run as a process group that is killed
whole, and bounded waits, so that no child outlives the wait that owns it —
nor, on Linux, coordsim itself: a command gets SIGTERM when coordsim dies,
even by SIGKILL (`prctl(PR_SET_PDEATHSIG)`), so that no `cp` or `initdb`
goes on writing into a directory the watchdog has just deleted.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

__all__ = ["COMMAND_TIMEOUT_S", "free_port", "run_group", "wait_or_kill"]

#: How long `run_group` lets a command (initdb, pg_ctl, cp, ...) run by default.
COMMAND_TIMEOUT_S: Final = 120.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at `host` now. Another process may take it
    before the caller's child binds it: callers retry on a fresh port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


#: prctl(2)'s option: the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG: Final = 1


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's `prctl`, looked up before any fork (the child only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return fn


def _dies_with_us() -> Callable[[], None] | None:
    """A `preexec_fn` that has the child get SIGTERM when its parent — this
    thread of this process — dies: SIGTERM, not SIGKILL, so that `runuser`
    passes it on to the command it runs and initdb removes what it made.
    None where the system cannot (no Linux). Only a foreign function call
    runs in the child between fork and exec: nothing that takes a lock."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the call: too late for it
            os._exit(1)

    return child


def run_group(
    cmd: Sequence[str],
    *,
    timeout: float = COMMAND_TIMEOUT_S,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` in a process group of its own that is killed whole if
    we are interrupted or time out: killing only `runuser` would leave the
    initdb it started writing into a directory we are about to delete. Should
    coordsim die meanwhile, the command gets SIGTERM (`_dies_with_us`)."""
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, text=True, start_new_session=True, preexec_fn=_dies_with_us(),
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def wait_or_kill(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Waits up to `timeout` seconds for `proc` to exit, then SIGKILLs and reaps it."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
