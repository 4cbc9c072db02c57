"""Where coordsim writes: the one rule every command follows (DESIGN.md §9).

coordsim never deletes or overwrites a file it did not create, and only one
run writes an output directory at a time.

*Ownership is proved, never guessed.* Every directory coordsim writes holds the
marker `.coordsim-output`, which lists each file coordsim wrote there with its
size and SHA-256. coordsim deletes or replaces a file only if the marker lists
it and it still has that size and hash; any other file in the directory (the
user's, one changed since, or one listed by a marker of the old format, which
had no hashes) is left alone and reported, and the run is refused (exit 2)
rather than half-done. A hand-written marker therefore proves nothing: its
hashes would have to be those of the very bytes coordsim would delete. A single
file written outside such a directory (a profile, a dump, an export) is
recorded the same way in the sidecar `.coordsim-files` of its directory; its
content never counts as proof.

*One writer.* A run holds an exclusive `fcntl.flock` on `.coordsim-lock`
inside its output directory for its whole life (the OS drops it if the process
dies) and writes its PID there; a second run on the same directory is refused
with one line naming that PID. The directory is created, marked and locked
before the run starts, and its inode never changes: results are staged beside
it and moved in entry by entry under the lock, so a lock cannot be lost to a
rename. Files are written under a temporary name and renamed, and are private
(0600 in 0700 directories; a stricter umask still applies).

Without `-o/--output`, a command keeps history the way Jepsen's `store/`
does: each run gets a new directory `ROOT/<command>-<UTC time>-<id>/` under a
runs root (`coordsim-out/`, or `$COORDSIM_OUTPUT_ROOT`), `ROOT/latest`
links to the newest, and `ROOT/latest-<command>` (`latest-compare`,
`latest-anomalies-run`) to the newest of that command, so `compare --baseline
coordsim-out/latest-compare` still names a comparison after a `check` ran. Each
link is made under a temporary name and renamed over the old one, so it is
never missing nor dangling, and a quick run never replaces a long one.

This module holds the foundation: private atomic writes and the proof of
ownership. `sim.runtime.output_lock` keeps one writer per directory,
`sim.runtime.staging` writes a whole directory, `sim.runtime.owned_files` a
single file, and `sim.runtime.run_dirs` chooses run directories and their
`latest` links.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "FORMAT",
    "LOCK",
    "MARKER",
    "RECORD",
    "Entry",
    "atomic_write",
    "current_umask",
    "digest",
    "digests_under",
    "file_matches",
    "files_under",
    "is_coordsim_output",
    "load_record",
    "mkdir_private",
    "output_command",
    "owning_output",
    "proven_files",
    "read_marker",
    "refuse_foreign",
    "refuse_foreign_files",
    "write_marker",
]

#: The marker file in every output directory coordsim creates (JSON).
MARKER: Final = ".coordsim-output"
#: The lock file in every output directory: flock'ed by the run writing it, holding its PID.
LOCK: Final = ".coordsim-lock"
#: The record of single files coordsim wrote into a directory that is not an output of its own.
RECORD: Final = ".coordsim-files"
#: The marker's format: 2 lists files with size and SHA-256; 1 (a plain list of names) proves nothing.
FORMAT: Final = 2
#: Modes of what coordsim creates, before the umask.
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
#: Foreign files named in one refusal.
_SHOWN: Final = 3

Entry = dict[str, Any]


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Calls `write(tmp)` for a temporary sibling of `path`, makes it private,
    then renames it over `path`: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.chmod(tmp, FILE_MODE & ~current_umask())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def current_umask() -> int:
    # The only way to read it is to set it; done once per write, in one thread.
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def mkdir_private(path: Path) -> None:
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=False)


# --- proof of ownership ---------------------------------------------------------------------


def digest(path: Path) -> Entry | None:
    """`{"size", "sha256"}` of regular file `path` (a link is nobody's proof), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        h = hashlib.sha256()
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return {"size": st.st_size, "sha256": h.hexdigest()}


def file_matches(path: Path, entries: list[Entry]) -> bool:
    """True iff `path` is a regular file with the size and hash of one of `entries`."""
    try:
        st = path.lstat()
    except OSError:
        return False
    sizes = {e.get("size") for e in entries}
    if st.st_size not in sizes:  # cheap: most foreign files differ in size already
        return False
    d = digest(path)
    return d is not None and any(e.get("size") == d["size"] and e.get("sha256") == d["sha256"] for e in entries)


def load_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("generator") == "coordsim" else None


def read_marker(path: Path) -> dict[str, Any] | None:
    """The marker's contents, or None if `path` holds no valid marker."""
    return load_record(path / MARKER)


def proven_files(data: dict[str, Any] | None, key: str = "files") -> dict[str, list[Entry]]:
    """The files a marker or record lists with a hash, each with the entries it
    may match. A format-1 list of names proves nothing: {}."""
    out: dict[str, list[Entry]] = {}
    for k in (key, "replacing") if key == "files" else (key,):
        listed = (data or {}).get(k)
        if not isinstance(listed, dict):
            continue
        for rel, e in listed.items():
            if isinstance(e, dict) and isinstance(e.get("sha256"), str) and isinstance(e.get("size"), int):
                out.setdefault(str(rel), []).append(e)
    return out


def output_command(path: Path) -> str | None:
    """The command that wrote output directory `path` (its marker's `command`:
    `compare`, `anomalies run`, …), or None if `path` is not a coordsim output."""
    data = read_marker(path) if path.is_dir() else None
    command = data.get("command") if data is not None else None
    return command if isinstance(command, str) else None


def is_coordsim_output(path: Path) -> bool:
    """True if `path` is a directory coordsim created (it holds the marker)."""
    return path.is_dir() and read_marker(path) is not None


def owning_output(path: Path) -> Path | None:
    """The nearest coordsim output directory holding `path` (itself excluded), or None."""
    for owner in path.absolute().parents:
        if is_coordsim_output(owner):
            return owner
    return None


def files_under(path: Path) -> list[str]:
    """Every file (and link) below `path` but coordsim's own marker and lock."""
    out = []
    for root, dirs, files in os.walk(path):
        r = Path(root)
        out += [str((r / f).relative_to(path)) for f in files if f not in (MARKER, LOCK)]
        out += [str((r / d).relative_to(path)) for d in dirs if (r / d).is_symlink()]
    return sorted(out)


def digests_under(path: Path) -> dict[str, Entry]:
    return {rel: e for rel in files_under(path) if (e := digest(path / rel)) is not None}


def _foreign(path: Path) -> list[str]:
    """The files below output `path` coordsim may not touch, each with why."""
    data = read_marker(path)
    proven = proven_files(data)
    legacy = isinstance((data or {}).get("files"), list)
    out = []
    for rel in files_under(path):
        if rel in proven:
            if not file_matches(path / rel, proven[rel]):
                out.append(f"{rel} (changed since coordsim wrote it)")
        elif legacy and rel in data["files"]:  # type: ignore[index]
            out.append(f"{rel} (listed by an older marker without hashes: not provably coordsim's)")
        else:
            out.append(f"{rel} (not written by coordsim)")
    return out


def refuse_foreign_files(path: Path, what: str) -> None:
    if not path.is_dir():
        return
    bad = _foreign(path)
    if bad:
        shown = ", ".join(bad[:_SHOWN]) + (f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else "")
        raise InvalidUsage(
            f"{what} {path} holds files coordsim may not replace: {shown}; they are left alone: "
            "move them or choose another directory"
        )


def write_marker(path: Path, command: str, files: dict[str, Entry], *,
                  replacing: dict[str, Entry] | None = None) -> None:
    data: dict[str, Any] = {
        "generator": "coordsim", "format": FORMAT, "command": command, "written_at": time.time(), "files": files,
    }
    if replacing:
        data["replacing"] = replacing  # a crash mid-publish leaves files matching either
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    atomic_write(path / MARKER, lambda p: p.write_text(text, encoding="utf-8"))


def refuse_foreign(path: Path, what: str) -> None:
    """Raises unless `path` is absent, an empty directory, or coordsim's."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir():
        raise InvalidUsage(f"{what} {path} exists and is not a directory; choose another")
    if read_marker(path) is None and any(path.iterdir()):
        raise InvalidUsage(
            f"{what} {path} is not empty and was not written by coordsim (no {MARKER}); "
            "choose a new or empty directory"
        )
    cwd = Path.cwd().resolve()
    if path.resolve() in (cwd, *cwd.parents):
        raise InvalidUsage(f"{what} {path} is the working directory or one of its parents")
