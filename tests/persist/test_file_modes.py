"""File-backed storage is private whatever the umask (issue 38, item 6): every
directory `FileBlob` creates — the root, its missing parents, a key's nested
directories — is exactly 0700 and every file exactly 0600; a directory that
existed before is left as it was."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import anyio
import pytest

from persist.file import FileBlob
from persist.open import open_blob

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture(params=[0o000, 0o022, 0o077, 0o277], ids=lambda m: f"umask-{m:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Permissive, usual, strict, and one that takes the owner's write bit."""
    mask: int = request.param
    old = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(old)


def test_every_directory_and_file_is_private(tmp_path: Path, umask: int) -> None:
    tmp_path.chmod(0o755)
    root = tmp_path / "a" / "b" / "store"

    async def main() -> None:
        blob = FileBlob(root, fsync=False)
        await blob.set("k", b"v")
        await blob.set("x/y/z", b"w")
        await blob.set("x/y/z", b"w2")  # replaced: still 0600
        assert await blob.get("x/y/z") == b"w2"
        await blob.close()

    anyio.run(main)
    made = [tmp_path / "a", tmp_path / "a" / "b", root, root / "x", root / "x" / "y"]
    assert {str(d.relative_to(tmp_path)): oct(_mode(d)) for d in made} == {
        str(d.relative_to(tmp_path)): oct(0o700) for d in made
    }
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == 2
    assert {oct(_mode(f)) for f in files} == {oct(0o600)}
    assert _mode(tmp_path) == 0o755  # not ours: left as it was


def test_an_existing_root_keeps_its_mode(tmp_path: Path, umask: int) -> None:
    root = tmp_path / "mine"
    root.mkdir()
    root.chmod(0o750)

    async def main() -> None:
        blob = await open_blob(f"file://{root}?fsync=false")
        await blob.set("d/k", b"v")
        await blob.close()

    anyio.run(main)
    assert _mode(root) == 0o750
    assert _mode(root / "d") == 0o700
    assert _mode(next((root / "d").iterdir())) == 0o600
