"""Where coordsim writes: the one rule every command follows (DESIGN.md §9).

coordsim never deletes or overwrites a file it did not create. An output
directory is claimed only if it does not exist, is empty, or holds the marker
file `.coordsim-output` that coordsim writes into every directory it creates;
anything else is refused with one line (exit 2). The marker lists the files
coordsim wrote there, so replacing a previous output removes only those, and
an output that has gained a file of the user's since is refused rather than
replaced. A single output file is replaced only if it carries the writer's
signature. Files are written under a temporary name and renamed, and are
private (0600 in 0700 directories; a stricter umask still applies): a
catalog's contents or a trace is nobody else's business.

Without `-o/--output`, a command keeps history the way Jepsen's `store/`
does: each run gets a new directory `ROOT/<command>-<UTC time>-<id>/` under a
runs root (`coordsim-out/`, or `$COORDSIM_OUTPUT_ROOT`), and `ROOT/latest`
links to the newest, so a quick run never replaces a long one.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sim.runtime.errors import InvalidUsage
from sim.runtime.interrupts import temporary_path

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "LATEST",
    "MARKER",
    "ROOT_ENV",
    "RUNS_ROOT",
    "atomic_write",
    "claim_dir",
    "claim_file",
    "is_coordsim_output",
    "mark_latest",
    "run_dir",
    "runs_root",
    "staged_dir",
]

#: The marker file in every output directory coordsim creates (JSON).
MARKER: Final = ".coordsim-output"
#: Modes of what coordsim creates, before the umask.
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
#: The runs root when neither `-o` nor `$COORDSIM_OUTPUT_ROOT` says otherwise.
RUNS_ROOT: Final = "coordsim-out"
ROOT_ENV: Final = "COORDSIM_OUTPUT_ROOT"
#: The link in a runs root to its newest run directory.
LATEST: Final = "latest"
#: The marker's `command` for a runs root: its run directories are coordsim's
#: (each has its own marker), so the root lists no files of its own.
_ROOT_COMMAND: Final = "runs"


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


def _marker(path: Path) -> dict[str, Any] | None:
    """The marker's contents, or None if `path` holds no valid marker."""
    try:
        data = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("generator") == "coordsim" else None


def is_coordsim_output(path: Path) -> bool:
    """True if `path` is a directory coordsim created (it holds the marker)."""
    return path.is_dir() and _marker(path) is not None


def owning_output(path: Path) -> Path | None:
    """The nearest coordsim output directory holding `path` (itself excluded), or None."""
    for owner in path.absolute().parents:
        if is_coordsim_output(owner):
            return owner
    return None


def list_in_output(owner: Path, target: Path) -> None:
    """Adds `target`, a file coordsim just wrote inside output `owner` (a
    later command's: `check` writing verdict.json into a run's trace), to
    `owner`'s marker, so the output stays replaceable whole: an unlisted file
    would count as the user's. A runs root lists nothing of its own."""
    data = _marker(owner)
    if data is None or data.get("command") == _ROOT_COMMAND:
        return
    rel = str(target.absolute().relative_to(owner.absolute()))
    files = list(data.get("files", []))
    if rel not in files:
        _write_marker(owner, str(data.get("command", "")), sorted([*files, rel]))


def _write_marker(path: Path, command: str, files: list[str]) -> None:
    data = {"generator": "coordsim", "command": command, "written_at": time.time(), "files": files}
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    atomic_write(path / MARKER, lambda p: p.write_text(text, encoding="utf-8"))


def _files_under(path: Path) -> list[str]:
    return sorted(
        str(p.relative_to(path)) for p in path.rglob("*") if not p.is_dir() and p.name != MARKER
    )


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


def claim_dir(path: Path, command: str) -> Path:
    """Makes `path` coordsim's output directory for `command` and returns it:
    created if absent, marked if empty, reused if it is coordsim's already.

    Raises:
        InvalidUsage: `path` is a file, or a non-empty directory coordsim did not write.
    """
    path = path.absolute()
    _refuse_foreign(path, "output directory")
    try:
        if not path.exists():
            _mkdir(path)
        old = _marker(path)
        files = sorted({*(old or {}).get("files", []), *_files_under(path)}) if old else []
        _write_marker(path, command, files)
    except OSError as exc:
        raise InvalidUsage(f"output directory {path} is not writable: {exc.strerror or exc}") from exc
    return path


@contextlib.contextmanager
def staged_dir(output: Path, command: str) -> Iterator[Path]:
    """A fresh staging directory beside `output`, renamed onto it when the
    block succeeds and removed when it fails.

    A previous coordsim output at `output` is replaced atomically, and only if
    every file in it is one coordsim listed there: a file the user added is
    never deleted (the run is refused, before it starts and again before the
    swap).

    Raises:
        InvalidUsage: `output` cannot be claimed (see `claim_dir`) or written.
    """
    output = output.absolute()
    _refuse_foreign(output, "output directory")
    _refuse_unlisted(output)
    stage = output.parent / f".{output.name}.tmp-{os.getpid()}"
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        _mkdir(stage)
    except OSError as exc:
        raise InvalidUsage(f"output directory {output} is not writable: {exc.strerror or exc}") from exc
    with temporary_path(stage):
        try:
            yield stage
            _make_private(stage)
            _write_marker(stage, command, _files_under(stage))
            _refuse_foreign(output, "output directory")
            _refuse_unlisted(output)
            _swap(stage, output)
            if _is_runs_root(output.parent):
                _link_latest(output)
        finally:
            # Ours: created above and never renamed if we get here with it.
            shutil.rmtree(stage, ignore_errors=True)


def _make_private(root: Path) -> None:
    """Whatever wrote into a staging directory (matplotlib, pyarrow, Spark),
    what we publish is private."""
    mask = _umask()
    for p in root.rglob("*"):
        if not p.is_symlink():
            os.chmod(p, (DIR_MODE if p.is_dir() else FILE_MODE) & ~mask)


def _refuse_unlisted(output: Path) -> None:
    marker = _marker(output) if output.is_dir() else None
    if marker is None:
        return
    listed = set(marker.get("files", []))
    extra = [f for f in _files_under(output) if f not in listed]
    if extra:
        shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        raise InvalidUsage(
            f"output directory {output} holds files coordsim did not write ({shown}); "
            "move them or choose another directory"
        )


def _swap(stage: Path, output: Path) -> None:
    if not output.exists():
        os.replace(stage, output)
        return
    if not any(output.iterdir()):
        output.rmdir()  # empty: nothing of anyone's is lost
        os.replace(stage, output)
        return
    old = output.parent / f".{output.name}.old-{os.getpid()}"
    os.replace(output, old)
    with temporary_path(old):
        os.replace(stage, output)
        # `old` holds only files its marker lists (checked just before).
        shutil.rmtree(old, ignore_errors=True)


def claim_file(path: Path, signature: str) -> None:
    """Raises `InvalidUsage` unless `path` is absent or a file coordsim wrote
    (its first 64 KiB contain `signature`), so writing it loses nothing."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file():
        raise InvalidUsage(f"{path} exists and is not a regular file; choose another name")
    try:
        with path.open("rb") as f:
            head = f.read(65536)
    except OSError as exc:
        raise InvalidUsage(f"cannot read {path}: {exc.strerror or exc}") from exc
    if signature.encode() not in head:
        raise InvalidUsage(f"{path} exists and was not written by coordsim; choose another name")


# --- run directories ----------------------------------------------------------------------


def runs_root() -> Path:
    """Where run directories go: `$COORDSIM_OUTPUT_ROOT`, else ./coordsim-out."""
    return Path(os.environ.get(ROOT_ENV) or RUNS_ROOT)


def run_dir(output: Path | str | None, command: str, *, root: Path | None = None) -> Path:
    """The directory a command writing results should stage into (`staged_dir`).

    `output` given: that exact directory (the rule above applies to it). Else a
    new `<command>-<UTC time>-<id>` directory under the runs root, which is
    created and marked if absent; `staged_dir` points the root's `latest` at
    it once the run succeeds. Nothing is created below the root here, so a run
    that fails leaves no empty directory behind.

    Raises:
        InvalidUsage: the runs root exists and is not coordsim's, or cannot be created.
    """
    if output is not None and str(output) != "":
        return Path(output)
    base = (root if root is not None else runs_root()).absolute()
    _claim_root(base)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = "-".join(command.split())
    while True:
        candidate = base / f"{name}-{stamp}-{secrets.token_hex(3)}"
        if not candidate.exists() and not candidate.is_symlink():
            return candidate


def mark_latest(run: Path) -> None:
    """Points the runs root's `latest` at `run` if `run` is one of its run
    directories: for an output written in place (Spark's) rather than through
    `staged_dir`, which does this itself."""
    run = run.absolute()
    if run.is_dir() and _is_runs_root(run.parent):
        _link_latest(run)


def _is_runs_root(path: Path) -> bool:
    marker = _marker(path) if path.is_dir() else None
    return marker is not None and marker.get("command") == _ROOT_COMMAND


def _claim_root(root: Path) -> None:
    """Makes `root` a runs root: created if absent, marked if empty or an
    older coordsim output (whose files its marker keeps listing, so they stay
    coordsim's and nothing is lost); anything else is refused."""
    if _is_runs_root(root):
        return
    _refuse_foreign(root, "runs root")
    old = _marker(root) if root.exists() else None
    try:
        if not root.exists():
            _mkdir(root)
        data = {
            "generator": "coordsim",
            "command": _ROOT_COMMAND,
            "written_at": time.time(),
            "files": list((old or {}).get("files", [])),
        }
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        atomic_write(root / MARKER, lambda p: p.write_text(text, encoding="utf-8"))
    except OSError as exc:
        raise InvalidUsage(f"runs root {root} is not writable: {exc.strerror or exc}") from exc


def _link_latest(run: Path) -> None:
    """Points `latest` beside `run` at it (a relative link, replaced in one
    rename). A `latest` that is not a link is someone else's: left alone."""
    link = run.parent / LATEST
    if link.exists() and not link.is_symlink():
        print(f"coordsim: note: {link} is not a link; left as it is", file=sys.stderr)  # noqa: T201
        return
    tmp = run.parent / f".{LATEST}.tmp-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    try:
        os.symlink(run.name, tmp)
        os.replace(tmp, link)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        print(f"coordsim: note: could not update {link}: {exc.strerror or exc}", file=sys.stderr)  # noqa: T201
