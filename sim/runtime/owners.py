"""Owner files: how coordsim tells, after a SIGKILL, the directories a dead run
of its own left behind from everything else — and never takes anything else.

Every temporary directory coordsim makes (an embedded Postgres's, a file blob
store's, an output's staging directory) holds `.coordsim-owner`: a record of
the process that made it — pid, start time (field 22 of /proc/PID/stat, so a
reused pid is told apart), boot id, pid namespace, host — and of the
directory's own path. A directory made outside TMPDIR also gets a pointer
record in TMPDIR (`coordsim-owner-*.json`), so that start-up finds it.

A directory is a *leftover* iff its record is valid — a regular file of this
user, coordsim's format, naming the very path it is found at — and the process
it names is gone (or its pid now belongs to another process). Everything else
— no record, a record of another user, host or pid namespace, a moved copy, an
owner still alive — is left alone. Only `sim.services.leftovers` removes
leftovers (after stopping any process still running in one).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, final

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "OWNER_FILE",
    "POINTER_PREFIX",
    "TMP_PREFIX",
    "Leftover",
    "Owner",
    "State",
    "claim",
    "make_dir",
    "owned_tmpdir",
    "private_tmpdir",
    "process_start",
    "release",
    "remove",
    "remove_tree",
    "scan",
    "tmp_root",
]

#: The owner record inside every directory coordsim makes for itself.
OWNER_FILE: Final = ".coordsim-owner"
#: Every temporary directory (and pointer record) coordsim makes in TMPDIR starts so.
TMP_PREFIX: Final = "coordsim-"
#: Pointer records in TMPDIR, for owned directories elsewhere.
POINTER_PREFIX: Final = "coordsim-owner-"
_MAGIC: Final = "coordsim-owner"
_VERSION: Final = 1
#: An owner record is a few hundred bytes; anything bigger is not one.
_MAX_RECORD: Final = 4096

#: alive: its owner runs (or may: not judged); dead / reused: a leftover;
#: foreign: made on another host or in another pid namespace (not judged);
#: unowned: no valid owner record (never touched); moved: its record names
#: another path (a copy; never touched).
State = Literal["alive", "dead", "reused", "foreign", "unowned", "moved"]


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot (field 22 of
    /proc/PID/stat), or None if there is no such process or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    fields = data.rpartition(b")")[2].split()
    try:
        return int(fields[19])  # fields[0] is field 3 (the state)
    except (IndexError, ValueError):
        return None


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return False
    return bool(fields) and fields[0] == b"Z"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@final
@dataclass(frozen=True)
class Owner:
    """The process a directory belongs to. `start`, `boot` and `pidns` are
    None where the system does not tell (no /proc)."""

    pid: int
    start: int | None
    boot: str | None
    pidns: str | None
    host: str

    @classmethod
    def current(cls) -> Owner:
        """This process."""
        pid = os.getpid()
        try:
            pidns: str | None = os.readlink("/proc/self/ns/pid")
        except OSError:
            pidns = None
        return cls(pid, process_start(pid), _read_text("/proc/sys/kernel/random/boot_id"),
                   pidns, os.uname().nodename)

    def state(self, here: Owner | None = None) -> State:
        """`alive`, `dead`, `reused` or `foreign`, as seen from `here` (this
        process by default)."""
        here = here or Owner.current()
        if self.host != here.host or (self.pidns and here.pidns and self.pidns != here.pidns):
            return "foreign"  # its pids mean nothing here
        if self.boot and here.boot and self.boot != here.boot:
            return "dead"  # the machine restarted since: every process of then is gone
        if self.pid == here.pid and self.start == here.start:
            return "alive"
        if Path("/proc/self").is_dir():
            start = process_start(self.pid)
            if start is None or _zombie(self.pid):
                return "dead"
            if self.start is not None and start != self.start:
                return "reused"
            return "alive"
        # No /proc: a pid that exists may be ours still; only its absence is proof.
        return "alive" if _exists(self.pid) else "dead"

    def record(self, path: Path, kind: str) -> dict[str, Any]:
        return {"magic": _MAGIC, "version": _VERSION, "kind": kind, "path": str(path),
                "pid": self.pid, "start": self.start, "boot": self.boot,
                "pidns": self.pidns, "host": self.host}


@final
@dataclass(frozen=True)
class _Record:
    owner: Owner
    kind: str
    path: str
    #: (st_dev, st_ino) of the directory when it was made (pointer records).
    inode: tuple[int, int] | None


def _parse(data: bytes) -> _Record | None:
    """The record in `data` if it is a valid one, else None."""
    try:
        r = json.loads(data)
    except ValueError:
        return None
    if not isinstance(r, dict) or r.get("magic") != _MAGIC or r.get("version") != _VERSION:
        return None
    pid, start, kind, path = r.get("pid"), r.get("start"), r.get("kind"), r.get("path")
    boot, pidns, host, inode = r.get("boot"), r.get("pidns"), r.get("host"), r.get("inode")
    if not (isinstance(pid, int) and pid > 0 and isinstance(kind, str) and isinstance(path, str)
            and isinstance(host, str) and (start is None or isinstance(start, int))
            and all(v is None or isinstance(v, str) for v in (boot, pidns))):
        return None
    if inode is not None and not (isinstance(inode, list) and len(inode) == 2
                                  and all(isinstance(i, int) for i in inode)):
        return None
    return _Record(Owner(pid, start, boot, pidns, host), kind, path,
                   None if inode is None else (inode[0], inode[1]))


def _read_record(path: Path) -> _Record | None:
    """The record in file `path` if it is one coordsim wrote as this user: a
    regular file (not a link), owned by us, small, coordsim's format."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > _MAX_RECORD:
            return None
        data = os.read(fd, _MAX_RECORD + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _parse(data)


def _write_record(target: Path, record: dict[str, Any]) -> None:
    """Writes `record` to `target` atomically (a temporary name, then a
    rename), 0600 whatever the umask."""
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{os.urandom(3).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            json.dump(record, f)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def tmp_root() -> Path:
    """TMPDIR as `tempfile` resolves it (where `mkdtemp` makes directories)."""
    return Path(tempfile.gettempdir())


#: Pointer records this process wrote, by the directory they point at (the
#: same path may be made again while an outer user still holds it: a stack).
_POINTERS: dict[str, list[Path]] = {}


def claim(path: Path, kind: str) -> None:
    """Marks directory `path`, just made by this process, as its own (an owner
    record inside it). Call it at once after making the directory: a
    directory without one is never reclaimed."""
    _write_record(path / OWNER_FILE, Owner.current().record(path, kind))


def private_tmpdir(prefix: str, kind: str) -> Path:
    """A new private (0700) directory in TMPDIR named `prefix…` (which must
    start with `coordsim-`), claimed by this process (`claim`); resolved.
    The caller removes it; should this process die first, the next start of
    coordsim does."""
    if not prefix.startswith(TMP_PREFIX) or prefix.startswith(POINTER_PREFIX):
        raise ValueError(f"a coordsim temporary directory's prefix starts with {TMP_PREFIX!r}: {prefix!r}")
    path = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    try:
        claim(path, kind)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # just made by mkdtemp: ours
        raise
    return path


@contextlib.contextmanager
def owned_tmpdir(prefix: str, kind: str) -> Iterator[Path]:
    """`private_tmpdir`, removed when the block ends (tempfile's
    `TemporaryDirectory`, with an owner record)."""
    path = private_tmpdir(prefix, kind)
    try:
        yield path
    finally:
        remove_tree(path)


def make_dir(path: Path, kind: str, *, mode: int = 0o700, inside: bool = True) -> None:
    """Makes directory `path` (anywhere; its parent exists) and claims it: a
    pointer record in TMPDIR naming it (and its inode), and, if `inside`, an
    owner record in it too (`inside=False` for a directory whose every entry
    is published elsewhere, such as a staging directory). The pointer is best
    effort: a TMPDIR that cannot be written only costs the reclaim. Call
    `release(path)` once it is removed.

    Raises:
        OSError: `path` could not be made (it exists, the parent is not writable, …).
    """
    path = path.absolute()
    path.mkdir(mode=mode)
    owner = Owner.current()
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        pointer = tmp_root() / f"{POINTER_PREFIX}{os.urandom(8).hex()}.json"
        _write_record(pointer, {**owner.record(path, kind), "inode": [st.st_dev, st.st_ino]})
        _POINTERS.setdefault(str(path), []).append(pointer)
    if inside:
        try:
            _write_record(path / OWNER_FILE, owner.record(path, kind))
        except BaseException:
            release(path)
            with contextlib.suppress(OSError):
                path.rmdir()  # just made, still empty
            raise


def release(path: Path) -> None:
    """Forgets the latest pointer record of `path` (made by `make_dir`), which
    this process has removed itself. Idempotent."""
    key = str(path.absolute())
    stack = _POINTERS.get(key)
    if not stack:
        return
    pointer = stack.pop()
    if not stack:
        del _POINTERS[key]
    with contextlib.suppress(OSError):
        pointer.unlink()


@final
@dataclass(frozen=True)
class Leftover:
    """A directory of coordsim's found by `scan`, and whether it may go.

    Attributes:
        path: the directory.
        kind: what made it (`postgres`, `blob`, `stage`, …); "" when unowned.
        state: see `State`; only `dead` and `reused` are `reclaimable`.
        owner: the process its record names (None when unowned).
        pointer: the pointer record in TMPDIR that led to it, if any.
    """

    path: Path
    kind: str
    state: State
    owner: Owner | None = None
    pointer: Path | None = None

    @property
    def reclaimable(self) -> bool:
        return self.state in ("dead", "reused")


def _same(a: str, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _judge_dir(path: Path, here: Owner) -> Leftover:
    found = _read_record(path / OWNER_FILE)
    if found is None:
        return Leftover(path, "", "unowned")
    if not _same(found.path, path):
        return Leftover(path, found.kind, "moved", found.owner)
    return Leftover(path, found.kind, found.owner.state(here), found.owner)


def _judge_pointer(pointer: Path, here: Owner) -> Leftover | None:
    found = _read_record(pointer)
    if found is None:
        return None  # not a record of ours: not even listed
    path = Path(found.path)
    return Leftover(path, found.kind, found.owner.state(here), found.owner, pointer)


def scan(root: Path | None = None) -> list[Leftover]:
    """coordsim's directories in TMPDIR (`root`), and those its pointer records
    there name, each judged; sorted by path. Cheap when there are none: one
    listing of `root`."""
    root = root or tmp_root()
    here: Owner | None = None
    found: list[Leftover] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(TMP_PREFIX):
            continue
        here = here or Owner.current()
        try:
            if entry.name.startswith(POINTER_PREFIX) and entry.is_file(follow_symlinks=False):
                judged = _judge_pointer(Path(entry.path), here)
                if judged is not None:
                    found.append(judged)
            elif entry.is_dir(follow_symlinks=False):
                found.append(_judge_dir(Path(entry.path), here))
        except OSError:
            continue
    return sorted(found, key=lambda lo: str(lo.path))


def _is_ours(leftover: Leftover, st: os.stat_result) -> bool:
    """Whether directory `leftover.path` (`st`) is the one its owner made: it
    holds that owner's record for this path, or — found through a pointer
    that names its inode — holds none and is that very inode (not a later
    directory of the same name)."""
    inside = _read_record(leftover.path / OWNER_FILE)
    if inside is not None:
        return inside.owner == leftover.owner and _same(inside.path, leftover.path)
    if leftover.pointer is None:
        return False
    pointed = _read_record(leftover.pointer)
    return pointed is not None and pointed.inode == (st.st_dev, st.st_ino)


def remove_tree(path: Path) -> None:
    """Removes claimed directory `path` (this process's, or a dead owner's),
    its owner record last: should anything be left (something still writing
    in it, an interruption), what is left is still claimed, and reclaimed
    later. Never raises."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.name == OWNER_FILE:
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        if {e.name for e in os.scandir(path)} <= {OWNER_FILE}:
            (path / OWNER_FILE).unlink(missing_ok=True)
            path.rmdir()


def remove(leftover: Leftover) -> bool:
    """Removes a reclaimable leftover: its directory, if it is the one its
    owner made (`_is_ours`; else nothing of it), and its pointer record.
    Processes still running in it must have been stopped first
    (`sim.services.leftovers`).

    Returns:
        Whether nothing of it is left.
    """
    if not leftover.reclaimable:
        raise ValueError(f"{leftover.path} is not reclaimable ({leftover.state})")
    path = leftover.path
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    ours = st is not None and stat.S_ISDIR(st.st_mode) and _is_ours(leftover, st)
    if ours:
        remove_tree(path)
    gone = not os.path.lexists(path)
    # A pointer whose directory is gone, or is not the one it named, proves
    # nothing any more.
    if leftover.pointer is not None and (gone or not ours):
        with contextlib.suppress(FileNotFoundError):
            leftover.pointer.unlink()
    return gone
