"""Writing a whole output directory: results are staged beside it and moved
in entry by entry under its lock (`staged_dir`), or written in place by a
command that must (`claimed_dir`, Spark's), and the marker then lists what the
run wrote. An interrupted or failed run leaves nothing half-written under the
output's name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from typing import TYPE_CHECKING

from sim.runtime import owners
from sim.runtime.errors import InvalidUsage
from sim.runtime.interrupts import temporary_path
from sim.runtime.output_lock import locked_output
from sim.runtime.outputs import (
    DIR_MODE,
    FILE_MODE,
    LOCK,
    MARKER,
    Entry,
    current_umask,
    digests_under,
    file_matches,
    files_under,
    mkdir_private,
    proven_files,
    read_marker,
    refuse_foreign,
    refuse_foreign_files,
    write_marker,
)
from sim.runtime.run_dirs import is_runs_root, link_latest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["claimed_dir", "in_stage", "staged_dir"]

#: Staging directories this process created: everything in them is its own.
_STAGES: set[Path] = set()


@contextlib.contextmanager
def staged_dir(output: Path, command: str) -> Iterator[Path]:
    """A fresh staging directory beside `output`, whose contents replace
    `output`'s when the block succeeds; removed when it fails.

    `output` is created (marked, locked) before the block runs and stays
    locked until it ends. A previous coordsim output there is replaced only if
    every file in it is one its marker lists with a matching size and hash:
    otherwise the run is refused, before it starts and again before the
    results go in, and nothing is deleted.

    Raises:
        InvalidUsage: `output` is another run's (named by PID), not coordsim's,
            holds a file coordsim may not replace, or cannot be written.
    """
    output = output.absolute()
    with locked_output(output, command):
        refuse_foreign_files(output, "output directory")
        stage = output.parent / f".{output.name}.tmp-{os.getpid()}"
        try:
            owners.make_dir(stage, "stage", mode=DIR_MODE, inside=False)  # reclaimed after a SIGKILL
        except OSError as exc:
            raise InvalidUsage(f"output directory {output} is not writable: {exc.strerror or exc}") from exc
        _STAGES.add(stage)
        with temporary_path(stage):
            try:
                yield stage
                _make_private(stage)
                refuse_foreign(output, "output directory")
                refuse_foreign_files(output, "output directory")
                _publish(stage, output, command)
                if is_runs_root(output.parent):
                    link_latest(output, command)
            finally:
                _STAGES.discard(stage)
                # Ours: created above, emptied if published.
                shutil.rmtree(stage, ignore_errors=True)
                owners.release(stage)


def _make_private(root: Path) -> None:
    """Whatever wrote into a staging directory (matplotlib, pyarrow, Spark),
    what we publish is private."""
    mask = current_umask()
    for p in root.rglob("*"):
        if not p.is_symlink():
            os.chmod(p, (DIR_MODE if p.is_dir() else FILE_MODE) & ~mask)


def _publish(stage: Path, output: Path, command: str) -> None:
    """Moves `stage`'s entries into locked `output` in place of its previous
    (proven) ones. The marker lists old and new while the entries move, so a
    crash in between leaves nothing unprovable."""
    new = digests_under(stage)
    proven = proven_files(read_marker(output))
    old = {rel: es[0] for rel, es in proven.items()}
    write_marker(output, command, new, replacing=old)
    trash = output.parent / f".{output.name}.old-{os.getpid()}"
    mkdir_private(trash)
    with temporary_path(trash):
        for p in sorted(output.iterdir()):
            if p.name not in (MARKER, LOCK):
                os.replace(p, trash / p.name)
        for p in sorted(stage.iterdir()):
            os.replace(p, output / p.name)
        write_marker(output, command, new)
        _delete_proven(trash, proven)


def _delete_proven(root: Path, proven: dict[str, list[Entry]]) -> None:
    """Removes `root` and what is below it, except files `proven` does not
    vouch for (one that appeared after the last check): those stay, reported."""
    kept = []
    for rel in files_under(root):
        p = root / rel
        if rel in proven and file_matches(p, proven[rel]):
            p.unlink()
        else:
            kept.append(p)
    for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)
    if kept:
        print(f"coordsim: note: left alone {len(kept)} file(s) coordsim did not write, in {root}",  # noqa: T201
              file=sys.stderr)


@contextlib.contextmanager
def claimed_dir(path: Path, command: str) -> Iterator[Path]:
    """`path` as coordsim's output directory for a command that writes into it
    in place (Spark's): created if absent, locked for the block, and refused
    if it holds a file coordsim may not replace. When the block succeeds the
    marker lists every file now there (those the run added included).

    Raises:
        InvalidUsage: as `staged_dir`.
    """
    path = path.absolute()
    with locked_output(path, command, "output directory"):
        refuse_foreign_files(path, "output directory")
        yield path
        # What is new is the run's: only it writes here while it holds the
        # lock (a file a user drops in meanwhile cannot be told from Spark's).
        try:
            write_marker(path, command, digests_under(path))
        except OSError as exc:
            raise InvalidUsage(f"output directory {path} is not writable: {exc.strerror or exc}") from exc


def in_stage(path: Path) -> bool:
    return any(s == path or s in path.parents for s in _STAGES)
