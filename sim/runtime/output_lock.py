"""One writer per output directory: a run holds an exclusive `fcntl.flock` on
`.coordsim-lock` inside its output directory for its whole life (the OS drops
it if the process dies) and writes its PID there; a second run on the same
directory is refused with one line naming that PID.

The directory is created, marked and locked before the run starts, and its
inode never changes, so a lock cannot be lost to a rename
(`sim.runtime.staging` moves results in entry by entry).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from typing import TYPE_CHECKING

from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import (
    DIR_MODE,
    FILE_MODE,
    LOCK,
    MARKER,
    proven_files,
    read_marker,
    refuse_foreign,
    refuse_foreign_files,
    write_marker,
)
from sim.runtime.run_dirs import claim_chosen_root

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["held", "locked_output"]

#: Output directories this process holds the lock of: path -> [fd, depth]. A
#: command may stage into its output twice (a failed scenario's partial
#: trace), so the lock is re-entrant within the process.
_HELD: dict[str, list[int]] = {}


def _lock_holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return f"pid {text}"
    return "pid unknown"


def _take_lock(path: Path, what: str) -> int:
    """An fd on `path`/LOCK holding an exclusive flock, with our PID written in it.

    Raises:
        InvalidUsage: another process holds it (named by its PID), or it cannot be made.
    """
    try:
        fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        raise InvalidUsage(f"{what} {path} is not writable: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _lock_holder(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise InvalidUsage(
                f"{what} {path} is being written by another coordsim run ({holder}); "
                "wait for it to end or choose another directory"
            ) from exc
        raise InvalidUsage(f"cannot lock {what} {path}: {exc.strerror or exc}") from exc
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise InvalidUsage(f"{what} {path} is not writable: {exc.strerror or exc}") from exc
    return fd


@contextlib.contextmanager
def held(path: Path, what: str) -> Iterator[None]:
    """The lock of existing output directory `path`, for the block (re-entrant)."""
    key = str(path)
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    fd = _take_lock(path, what)
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        os.close(fd)  # releases the flock; the file (and its PID) stays, coordsim's


@contextlib.contextmanager
def locked_output(path: Path, command: str, what: str = "output directory") -> Iterator[None]:
    """Makes `path` a marked output directory (created if absent) and holds its
    lock for the block. A directory holding a file coordsim may not replace is
    refused before anything is written into it. A block that fails leaves a
    directory this call created or marked as it found it (gone, or empty)."""
    refuse_foreign(path, what)
    new_root = claim_chosen_root(path.parent)
    created = marked = False
    try:
        path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        try:
            path.mkdir(mode=DIR_MODE)
            created = True
        except FileExistsError:
            pass
        if read_marker(path) is None:
            # Empty a moment ago (or another run is creating it): check again, mark it.
            refuse_foreign(path, what)
            write_marker(path, command, {})
            marked = True
        elif not (path / LOCK).exists():
            # Refused before a lock file is made in it, so a refusal leaves the
            # directory as it was (under the lock, the caller checks again).
            refuse_foreign_files(path, what)
    except (OSError, InvalidUsage) as exc:
        if created or marked:
            _remove_bare(path, rmdir=created)
        if new_root:
            _remove_bare(path.parent, rmdir=True)
        if isinstance(exc, InvalidUsage):
            raise
        raise InvalidUsage(f"{what} {path} is not writable: {exc.strerror or exc}") from exc
    with held(path, what):  # a directory another run holds is that run's: never removed here
        ok = False
        try:
            yield
            ok = True
        finally:
            if not ok and (created or marked):
                _remove_bare(path, rmdir=created)
            if not ok and new_root:
                _remove_bare(path.parent, rmdir=True)  # a runs root this failed run made


def _remove_bare(path: Path, *, rmdir: bool) -> None:
    """Removes coordsim's marker (listing nothing) and lock from output `path`
    if they are all it holds, and then `path` itself if `rmdir`."""
    with contextlib.suppress(OSError):
        if {p.name for p in path.iterdir()} <= {MARKER, LOCK} and not proven_files(read_marker(path)):
            (path / MARKER).unlink(missing_ok=True)
            (path / LOCK).unlink(missing_ok=True)
            if rmdir:
                path.rmdir()
