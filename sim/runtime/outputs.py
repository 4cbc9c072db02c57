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
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sim.runtime import owners
from sim.runtime.errors import InvalidUsage
from sim.runtime.interrupts import temporary_path

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "LATEST",
    "LOCK",
    "MARKER",
    "RECORD",
    "ROOT_ENV",
    "RUNS_ROOT",
    "atomic_write",
    "claim_file",
    "claimed_dir",
    "digest",
    "is_coordsim_output",
    "latest_name",
    "mark_latest",
    "output_command",
    "run_dir",
    "runs_root",
    "staged_dir",
    "write_owned",
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
#: The runs root when neither `-o` nor `$COORDSIM_OUTPUT_ROOT` says otherwise.
RUNS_ROOT: Final = "coordsim-out"
ROOT_ENV: Final = "COORDSIM_OUTPUT_ROOT"
#: The link in a runs root to its newest run directory; `latest-<command>`
#: (`latest_name`) links to the newest of one command.
LATEST: Final = "latest"
#: The marker's `command` for a runs root: its run directories are coordsim's
#: (each has its own marker), so the root lists no files of its own.
_ROOT_COMMAND: Final = "runs"
#: Foreign files named in one refusal.
_SHOWN: Final = 3

#: Output directories this process holds the lock of: path -> [fd, depth]. A
#: command may stage into its output twice (a failed scenario's partial
#: trace), so the lock is re-entrant within the process.
_HELD: dict[str, list[int]] = {}
#: Staging directories this process created: everything in them is its own.
_STAGES: set[Path] = set()
#: Runs roots `run_dir` chose a directory in: created (and marked) only when a
#: run directory in them is, so a command refusing its input creates nothing.
_ROOTS: set[Path] = set()

Entry = dict[str, Any]


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Calls `write(tmp)` for a temporary sibling of `path`, makes it private,
    then renames it over `path`: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.chmod(tmp, FILE_MODE & ~_umask())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    # The only way to read it is to set it; done once per write, in one thread.
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _mkdir(path: Path) -> None:
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


def _matches(path: Path, entries: list[Entry]) -> bool:
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


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("generator") == "coordsim" else None


def _marker(path: Path) -> dict[str, Any] | None:
    """The marker's contents, or None if `path` holds no valid marker."""
    return _load(path / MARKER)


def _proven(data: dict[str, Any] | None, key: str = "files") -> dict[str, list[Entry]]:
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
    data = _marker(path) if path.is_dir() else None
    command = data.get("command") if data is not None else None
    return command if isinstance(command, str) else None


def is_coordsim_output(path: Path) -> bool:
    """True if `path` is a directory coordsim created (it holds the marker)."""
    return path.is_dir() and _marker(path) is not None


def owning_output(path: Path) -> Path | None:
    """The nearest coordsim output directory holding `path` (itself excluded), or None."""
    for owner in path.absolute().parents:
        if is_coordsim_output(owner):
            return owner
    return None


def _is_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def _files_under(path: Path) -> list[str]:
    """Every file (and link) below `path` but coordsim's own marker and lock."""
    out = []
    for root, dirs, files in os.walk(path):
        r = Path(root)
        out += [str((r / f).relative_to(path)) for f in files if f not in (MARKER, LOCK)]
        out += [str((r / d).relative_to(path)) for d in dirs if (r / d).is_symlink()]
    return sorted(out)


def _listing(path: Path) -> dict[str, Entry]:
    return {rel: e for rel in _files_under(path) if (e := digest(path / rel)) is not None}


def _foreign(path: Path) -> list[str]:
    """The files below output `path` coordsim may not touch, each with why."""
    data = _marker(path)
    proven = _proven(data)
    legacy = isinstance((data or {}).get("files"), list)
    out = []
    for rel in _files_under(path):
        if rel in proven:
            if not _matches(path / rel, proven[rel]):
                out.append(f"{rel} (changed since coordsim wrote it)")
        elif legacy and rel in data["files"]:  # type: ignore[index]
            out.append(f"{rel} (listed by an older marker without hashes: not provably coordsim's)")
        else:
            out.append(f"{rel} (not written by coordsim)")
    return out


def _refuse_foreign_files(path: Path, what: str) -> None:
    if not path.is_dir():
        return
    bad = _foreign(path)
    if bad:
        shown = ", ".join(bad[:_SHOWN]) + (f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else "")
        raise InvalidUsage(
            f"{what} {path} holds files coordsim may not replace: {shown}; they are left alone: "
            "move them or choose another directory"
        )


def _write_marker(path: Path, command: str, files: dict[str, Entry], *,
                  replacing: dict[str, Entry] | None = None) -> None:  # fmt: skip
    data: dict[str, Any] = {
        "generator": "coordsim", "format": FORMAT, "command": command, "written_at": time.time(), "files": files,
    }  # fmt: skip
    if replacing:
        data["replacing"] = replacing  # a crash mid-publish leaves files matching either
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    atomic_write(path / MARKER, lambda p: p.write_text(text, encoding="utf-8"))


def _refuse_foreign(path: Path, what: str) -> None:
    """Raises unless `path` is absent, an empty directory, or coordsim's."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir():
        raise InvalidUsage(f"{what} {path} exists and is not a directory; choose another")
    if _marker(path) is None and any(path.iterdir()):
        raise InvalidUsage(
            f"{what} {path} is not empty and was not written by coordsim (no {MARKER}); "
            "choose a new or empty directory"
        )
    cwd = Path.cwd().resolve()
    if path.resolve() in (cwd, *cwd.parents):
        raise InvalidUsage(f"{what} {path} is the working directory or one of its parents")


# --- one writer per output directory ----------------------------------------------------------


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
def _held(path: Path, what: str) -> Iterator[None]:
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
def _locked_output(path: Path, command: str, what: str = "output directory") -> Iterator[None]:
    """Makes `path` a marked output directory (created if absent) and holds its
    lock for the block. A directory holding a file coordsim may not replace is
    refused before anything is written into it. A block that fails leaves a
    directory this call created or marked as it found it (gone, or empty)."""
    _refuse_foreign(path, what)
    new_root = path.parent in _ROOTS and _claim_root(path.parent)
    created = marked = False
    try:
        path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        try:
            path.mkdir(mode=DIR_MODE)
            created = True
        except FileExistsError:
            pass
        if _marker(path) is None:
            # Empty a moment ago (or another run is creating it): check again, mark it.
            _refuse_foreign(path, what)
            _write_marker(path, command, {})
            marked = True
        elif not (path / LOCK).exists():
            # Refused before a lock file is made in it, so a refusal leaves the
            # directory as it was (under the lock, the caller checks again).
            _refuse_foreign_files(path, what)
    except (OSError, InvalidUsage) as exc:
        if created or marked:
            _remove_bare(path, rmdir=created)
        if new_root:
            _remove_bare(path.parent, rmdir=True)
        if isinstance(exc, InvalidUsage):
            raise
        raise InvalidUsage(f"{what} {path} is not writable: {exc.strerror or exc}") from exc
    with _held(path, what):  # a directory another run holds is that run's: never removed here
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
        if {p.name for p in path.iterdir()} <= {MARKER, LOCK} and not _proven(_marker(path)):
            (path / MARKER).unlink(missing_ok=True)
            (path / LOCK).unlink(missing_ok=True)
            if rmdir:
                path.rmdir()


# --- writing a directory ----------------------------------------------------------------------


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
    with _locked_output(output, command):
        _refuse_foreign_files(output, "output directory")
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
                _refuse_foreign(output, "output directory")
                _refuse_foreign_files(output, "output directory")
                _publish(stage, output, command)
                if _is_runs_root(output.parent):
                    _link_latest(output, command)
            finally:
                _STAGES.discard(stage)
                # Ours: created above, emptied if published.
                shutil.rmtree(stage, ignore_errors=True)
                owners.release(stage)


def _make_private(root: Path) -> None:
    """Whatever wrote into a staging directory (matplotlib, pyarrow, Spark),
    what we publish is private."""
    mask = _umask()
    for p in root.rglob("*"):
        if not p.is_symlink():
            os.chmod(p, (DIR_MODE if p.is_dir() else FILE_MODE) & ~mask)


def _publish(stage: Path, output: Path, command: str) -> None:
    """Moves `stage`'s entries into locked `output` in place of its previous
    (proven) ones. The marker lists old and new while the entries move, so a
    crash in between leaves nothing unprovable."""
    new = _listing(stage)
    proven = _proven(_marker(output))
    old = {rel: es[0] for rel, es in proven.items()}
    _write_marker(output, command, new, replacing=old)
    trash = output.parent / f".{output.name}.old-{os.getpid()}"
    _mkdir(trash)
    with temporary_path(trash):
        for p in sorted(output.iterdir()):
            if p.name not in (MARKER, LOCK):
                os.replace(p, trash / p.name)
        for p in sorted(stage.iterdir()):
            os.replace(p, output / p.name)
        _write_marker(output, command, new)
        _delete_proven(trash, proven)


def _delete_proven(root: Path, proven: dict[str, list[Entry]]) -> None:
    """Removes `root` and what is below it, except files `proven` does not
    vouch for (one that appeared after the last check): those stay, reported."""
    kept = []
    for rel in _files_under(root):
        p = root / rel
        if rel in proven and _matches(p, proven[rel]):
            p.unlink()
        else:
            kept.append(p)
    for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)
    if kept:
        print(f"coordsim: note: left alone {len(kept)} file(s) coordsim did not write, in {root}",  # noqa: T201
              file=sys.stderr)  # fmt: skip


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
    with _locked_output(path, command, "output directory"):
        _refuse_foreign_files(path, "output directory")
        yield path
        # What is new is the run's: only it writes here while it holds the
        # lock (a file a user drops in meanwhile cannot be told from Spark's).
        try:
            _write_marker(path, command, _listing(path))
        except OSError as exc:
            raise InvalidUsage(f"output directory {path} is not writable: {exc.strerror or exc}") from exc


# --- single files ---------------------------------------------------------------------------


def _in_stage(path: Path) -> bool:
    return any(s == path or s in path.parents for s in _STAGES)


def _owner(path: Path) -> Path | None:
    """The coordsim output (not a runs root) whose marker records `path`, if any."""
    owner = owning_output(path)
    return None if owner is None or _is_runs_root(owner) else owner


def claim_file(path: Path) -> None:
    """Raises `InvalidUsage` unless `path` is absent or a file coordsim wrote
    and can prove it: its output's marker, or its directory's `.coordsim-files`,
    records it with the size and SHA-256 it still has. Content proves nothing."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file():
        raise InvalidUsage(f"{path} exists and is not a regular file; choose another name")
    full = path.absolute()
    if _in_stage(full):
        return
    owner = _owner(full)
    if owner is not None:
        entries = _proven(_marker(owner)).get(str(full.relative_to(owner)), [])
    else:
        entries = _proven(_load(full.parent / RECORD)).get(full.name, [])
    if not entries or not _matches(full, entries):
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
    if _in_stage(full):
        atomic_write(full, write)
        return
    owner = _owner(full)
    if owner is not None:
        claim_file(path)  # refused before a lock file is made in someone's directory
        with _held(owner, "output directory"):
            claim_file(path)
            atomic_write(full, write)
            data = _marker(owner) or {}
            listed = data.get("files")
            # A format-1 list of names proved nothing and still does not: dropped.
            files: dict[str, Entry] = dict(listed) if isinstance(listed, dict) else {}
            entry = digest(full)
            if entry is not None:
                files[str(full.relative_to(owner))] = entry
            _write_marker(owner, str(data.get("command", "")), files)
        return
    record_path = full.parent / RECORD
    with _dir_lock(full.parent):
        claim_file(path)
        if (record_path.exists() or record_path.is_symlink()) and _load(record_path) is None:
            raise InvalidUsage(f"{record_path} exists and is not coordsim's record; coordsim will not replace it")
        atomic_write(full, write)
        record = _load(record_path) or {}
        files = {name: es[0] for name, es in _proven(record, "files").items()}
        entry = digest(full)
        if entry is not None:
            files[full.name] = entry
        text = json.dumps({"generator": "coordsim", "format": FORMAT, "files": files}, indent=2, sort_keys=True)
        atomic_write(record_path, lambda p: p.write_text(text + "\n", encoding="utf-8"))


# --- run directories ----------------------------------------------------------------------


def runs_root() -> Path:
    """Where run directories go: `$COORDSIM_OUTPUT_ROOT`, else ./coordsim-out."""
    return Path(os.environ.get(ROOT_ENV) or RUNS_ROOT)


def run_dir(output: Path | str | None, command: str, *, root: Path | None = None) -> Path:
    """The directory a command writing results should stage into (`staged_dir`).

    `output` given: that exact directory (the rule above applies to it). Else a
    new `<command>-<UTC time>-<id>` directory under the runs root, which
    `staged_dir` (or `claimed_dir`) creates and marks if absent when the run
    starts, and whose `latest` it points at the run once it succeeds. A run
    that fails leaves no run directory behind.

    Raises:
        InvalidUsage: the runs root exists and is not coordsim's.
    """
    if output is not None and str(output) != "":
        return Path(output)
    base = (root if root is not None else runs_root()).absolute()
    if not _is_runs_root(base):
        _refuse_foreign(base, "runs root")
    _ROOTS.add(base)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = "-".join(command.split())
    while True:
        candidate = base / f"{name}-{stamp}-{secrets.token_hex(3)}"
        if not candidate.exists() and not candidate.is_symlink():
            return candidate


def latest_name(command: str) -> str:
    """The name of the link to `command`'s newest run directory in a runs
    root: `latest-compare`, `latest-anomalies-run`, `latest-spark-replay`."""
    return f"{LATEST}-{'-'.join(command.split())}"


def mark_latest(run: Path, command: str) -> None:
    """Points the runs root's `latest` and `latest-<command>` at `run` if `run`
    is one of its run directories: for an output written in place (Spark's)
    rather than through `staged_dir`, which does this itself."""
    run = run.absolute()
    if run.is_dir() and _is_runs_root(run.parent):
        _link_latest(run, command)


def _is_runs_root(path: Path) -> bool:
    marker = _marker(path) if path.is_dir() else None
    return marker is not None and marker.get("command") == _ROOT_COMMAND


def _claim_root(root: Path) -> bool:
    """Makes `root` a runs root: created if absent, marked if empty or an
    older coordsim output (whose files its marker keeps listing as they were:
    a runs root never deletes nor replaces anything but its `latest` link);
    anything else is refused. True iff this call created it."""
    if _is_runs_root(root):
        return False
    _refuse_foreign(root, "runs root")
    old = _marker(root) if root.exists() else None
    created = False
    try:
        if not root.exists():
            _mkdir(root)
            created = True
        data = {
            "generator": "coordsim",
            "format": FORMAT,
            "command": _ROOT_COMMAND,
            "written_at": time.time(),
            "files": (old or {}).get("files", {}),
        }
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        atomic_write(root / MARKER, lambda p: p.write_text(text, encoding="utf-8"))
    except OSError as exc:
        raise InvalidUsage(f"runs root {root} is not writable: {exc.strerror or exc}") from exc
    return created


def _link_latest(run: Path, command: str) -> None:
    """Points `latest-<command>`, then `latest`, beside `run` at it."""
    for name in (latest_name(command), LATEST):
        _link(run, name)


def _link(run: Path, name: str) -> None:
    """Points link `name` beside `run` at it: a relative link made under a
    temporary name and renamed over the old one, so the link is never missing
    and never names a directory that does not exist. A `name` that is not a
    link is someone else's: left alone."""
    link = run.parent / name
    if link.exists() and not link.is_symlink():
        print(f"coordsim: note: {link} is not a link; left as it is", file=sys.stderr)  # noqa: T201
        return
    if not _is_dir(run):
        return  # never point it at nothing
    tmp = run.parent / f".{name}.tmp-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        os.symlink(run.name, tmp)
        os.replace(tmp, link)
    except OSError as exc:
        print(f"coordsim: note: could not update {link}: {exc.strerror or exc}", file=sys.stderr)  # noqa: T201
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
