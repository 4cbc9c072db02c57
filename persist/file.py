"""FileBlob: a Blob in a directory of the local filesystem (`file:///path`).

`set` is atomic and durable: write a temp file, fsync it, rename it over the
target, fsync the directory. A crash leaves either the old value or the new one.
File I/O blocks, so every call runs in a worker thread (real mode only: the
virtual-time loop forbids threads). A store's data is private whatever the
umask: every directory it creates is 0700 and every file 0600 (directories
that existed before, the root's parents among them, are left as they are).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import final
from urllib.parse import quote, unquote

import anyio.to_thread

from persist.location import Blob, check_blob_key
from sim.runtime.errors import Determinate, Indeterminate, InvalidUsage

__all__ = ["FileBlob"]

# Keys map to nested directories by "/"; each segment is percent-encoded and a
# value file gets this suffix, so key "a" (file a.blob) and key "a/b" (directory
# a/) never collide. Temp files lack the suffix and so never show in listings.
_SUFFIX = ".blob"
_EMPTY_SEGMENT = "%"  # quote() never produces a lone "%"
_MAX_SEGMENT = 240
_DIR_MODE = 0o700
_FILE_MODE = 0o600


def _encode_segment(segment: str) -> str:
    if not segment:
        return _EMPTY_SEGMENT
    encoded = quote(segment, safe="-_~")
    if segment.startswith("."):
        encoded = "%2E" + encoded[1:]
    return encoded


def _decode_segment(name: str) -> str:
    return "" if name == _EMPTY_SEGMENT else unquote(name)


@final
class FileBlob(Blob):
    """A Blob rooted at a directory; keys are stored as files beneath it.

    Limit beyond the Blob contract: one "/"-separated key segment may be at most
    ~80 characters of non-ASCII text (240 bytes once encoded), a filesystem limit.
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self._fsync = fsync
        _make_dirs(self.root)

    def _path(self, key: str) -> Path:
        check_blob_key(key)
        segments = [_encode_segment(s) for s in key.split("/")]
        for s in segments:
            if len(s) > _MAX_SEGMENT:
                raise InvalidUsage(f"file blob: key segment too long once encoded: {key!r}")
        segments[-1] += _SUFFIX
        return self.root.joinpath(*segments)

    # Errors: a local OSError before the rename means nothing changed (Determinate);
    # only a failure to fsync the directory after it leaves the outcome open.

    async def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            return await anyio.to_thread.run_sync(_read, path)
        except OSError as exc:
            raise Determinate(f"file blob get {key!r} failed: {exc}") from exc

    async def set(self, key: str, value: bytes) -> None:
        path = self._path(key)
        await anyio.to_thread.run_sync(_write_atomic, path, bytes(value), self._fsync)

    async def delete(self, key: str) -> bool:
        path = self._path(key)
        try:
            return await anyio.to_thread.run_sync(_unlink, path)
        except OSError as exc:
            raise Determinate(f"file blob delete {key!r} failed: {exc}") from exc

    async def list_keys(self, prefix: str = "") -> list[str]:
        try:
            return await anyio.to_thread.run_sync(self._list, prefix)
        except OSError as exc:
            raise Determinate(f"file blob list {prefix!r} failed: {exc}") from exc

    def _list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for dirpath, _dirs, files in os.walk(self.root):
            rel = Path(dirpath).relative_to(self.root)
            parents = [] if rel == Path(".") else [_decode_segment(p) for p in rel.parts]
            for name in files:
                if not name.endswith(_SUFFIX):
                    continue
                key = "/".join([*parents, _decode_segment(name[: -len(_SUFFIX)])])
                if key.startswith(prefix):
                    keys.append(key)
        keys.sort()
        return keys


def _make_dirs(path: Path) -> None:
    """Creates `path` and its missing parents, each exactly 0700 whatever the
    umask (`mkdir(parents=True)` gives the parents the umask's mode, 0755 as
    a rule). Directories that exist are left alone: not ours to change."""
    missing: list[Path] = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, _DIR_MODE)
        except FileExistsError:
            if d.is_dir():
                continue  # made meanwhile by another writer, which sets its mode
            raise
        # Through a descriptor of the directory itself, so a swap for a link
        # between the two calls changes nothing elsewhere.
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, _DIR_MODE)
        finally:
            os.close(fd)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _write_atomic(path: Path, value: bytes, fsync: bool) -> None:
    tmp = path.parent / f".tmp-{uuid.uuid4().hex}"
    try:
        _make_dirs(path.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _FILE_MODE)
        with open(fd, "wb") as f:
            os.fchmod(fd, _FILE_MODE)  # a stricter umask took bits away: exactly 0600
            f.write(value)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise Determinate(f"file blob set {path} failed: {exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        try:
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise Indeterminate(f"file blob set {path}: directory fsync failed: {exc}") from exc


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
