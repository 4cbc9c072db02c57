"""Single files coordsim writes outside an output directory of its own (a
profile, a dump, an export) or into one: written only over a file coordsim
provably wrote, and recorded (size and SHA-256) in the output's marker or in
the sidecar `.coordsim-files` of their directory. Content never counts as proof.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import TYPE_CHECKING

from sim.runtime.errors import InvalidUsage
from sim.runtime.output_lock import held
from sim.runtime.outputs import (
    FORMAT,
    RECORD,
    Entry,
    atomic_write,
    digest,
    file_matches,
    load_record,
    owning_output,
    proven_files,
    read_marker,
    write_marker,
)
from sim.runtime.run_dirs import is_runs_root
from sim.runtime.staging import in_stage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

__all__ = ["claim_file", "write_owned"]


def _owner(path: Path) -> Path | None:
    """The coordsim output (not a runs root) whose marker records `path`, if any."""
    owner = owning_output(path)
    return None if owner is None or is_runs_root(owner) else owner


def claim_file(path: Path) -> None:
    """Raises `InvalidUsage` unless `path` is absent or a file coordsim wrote
    and can prove it: its output's marker, or its directory's `.coordsim-files`,
    records it with the size and SHA-256 it still has. Content proves nothing."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file():
        raise InvalidUsage(f"{path} exists and is not a regular file; choose another name")
    full = path.absolute()
    if in_stage(full):
        return
    owner = _owner(full)
    if owner is not None:
        entries = proven_files(read_marker(owner)).get(str(full.relative_to(owner)), [])
    else:
        entries = proven_files(load_record(full.parent / RECORD)).get(full.name, [])
    if not entries or not file_matches(full, entries):
        why = "coordsim has no record of writing it" if not entries else "it changed since coordsim wrote it"
        raise InvalidUsage(f"{path} exists and was not written by coordsim ({why}); choose another name")


@contextlib.contextmanager
def _dir_lock(directory: Path) -> Iterator[None]:
    """A short exclusive flock on `directory` itself, for a read-modify-write of its record."""
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_owned(path: Path, write: Callable[[Path], object]) -> None:
    """Writes the single file `path` as `atomic_write` does, if `claim_file`
    allows, and records it (size and SHA-256) where the next claim will look:
    its output's marker (under that output's lock), else its directory's
    `.coordsim-files`.

    Raises:
        InvalidUsage: `path` is not provably coordsim's, its output is another
            run's, or the record is a file of someone else's.
        OSError: the write failed.
    """
    full = path.absolute()
    if in_stage(full):
        atomic_write(full, write)
        return
    owner = _owner(full)
    if owner is not None:
        claim_file(path)  # refused before a lock file is made in someone's directory
        with held(owner, "output directory"):
            claim_file(path)
            atomic_write(full, write)
            data = read_marker(owner) or {}
            listed = data.get("files")
            # A format-1 list of names proved nothing and still does not: dropped.
            files: dict[str, Entry] = dict(listed) if isinstance(listed, dict) else {}
            entry = digest(full)
            if entry is not None:
                files[str(full.relative_to(owner))] = entry
            write_marker(owner, str(data.get("command", "")), files)
        return
    record_path = full.parent / RECORD
    with _dir_lock(full.parent):
        claim_file(path)
        if (record_path.exists() or record_path.is_symlink()) and load_record(record_path) is None:
            raise InvalidUsage(f"{record_path} exists and is not coordsim's record; coordsim will not replace it")
        atomic_write(full, write)
        record = load_record(record_path) or {}
        files = {name: es[0] for name, es in proven_files(record, "files").items()}
        entry = digest(full)
        if entry is not None:
            files[full.name] = entry
        text = json.dumps({"generator": "coordsim", "format": FORMAT, "files": files}, indent=2, sort_keys=True)
        atomic_write(record_path, lambda p: p.write_text(text + "\n", encoding="utf-8"))
