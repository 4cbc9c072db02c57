"""The output rule (sim/runtime/outputs.py): coordsim never deletes or overwrites a
file it did not create, replaces its own outputs atomically, and keeps them
private."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import (
    MARKER,
    atomic_write,
    claim_dir,
    claim_file,
    is_coordsim_output,
    staged_dir,
)

if TYPE_CHECKING:
    from pathlib import Path


def _write(stage: Path, name: str = "results.csv", text: str = "x\n") -> None:
    (stage / name).parent.mkdir(parents=True, exist_ok=True)
    (stage / name).write_text(text)


def test_a_new_directory_is_created_private_and_marked(tmp_path: Path) -> None:
    out = tmp_path / "a" / "out"
    with staged_dir(out, "compare") as stage:
        _write(stage, "traces/t/ops.parquet")
        _write(stage)
    assert is_coordsim_output(out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o700 & ~_umask()
    for p in out.rglob("*"):
        want = 0o700 if p.is_dir() else 0o600
        assert stat.S_IMODE(p.stat().st_mode) == want & ~_umask(), p
    assert sorted(os.listdir(tmp_path / "a")) == ["out"]  # no staging left behind


def test_a_foreign_non_empty_directory_is_refused_untouched(tmp_path: Path) -> None:
    out = tmp_path / "d"
    out.mkdir()
    (out / "important.txt").write_text("x")
    with pytest.raises(InvalidUsage, match="not written by coordsim"), staged_dir(out, "compare"):
        pytest.fail("the block must not run")
    assert (out / "important.txt").read_text() == "x"
    assert sorted(os.listdir(tmp_path)) == ["d"]
    with pytest.raises(InvalidUsage, match="not written by coordsim"):
        claim_dir(out, "replay")
    assert sorted(os.listdir(out)) == ["important.txt"]


def test_the_working_directory_is_never_an_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("mine")
    with pytest.raises(InvalidUsage), staged_dir(tmp_path, "compare"):
        pytest.fail("the block must not run")
    assert sorted(os.listdir(tmp_path)) == ["README.md"]


def test_a_previous_output_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_dir(out, "compare") as stage:
        _write(stage, "old.csv")
    with staged_dir(out, "compare") as stage:
        _write(stage, "new.csv")
    assert sorted(os.listdir(out)) == sorted([MARKER, "new.csv"])
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_previous_output_with_a_users_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_dir(out, "compare") as stage:
        _write(stage)
    (out / "notes.md").write_text("mine")
    with pytest.raises(InvalidUsage, match=r"notes\.md"), staged_dir(out, "compare"):
        pytest.fail("the block must not run")
    assert (out / "notes.md").read_text() == "mine"


def test_a_users_file_appearing_during_the_run_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_dir(out, "compare") as stage:
        _write(stage)
    def run_while_the_user_writes() -> None:
        with staged_dir(out, "compare") as stage:
            _write(stage, "new.csv")
            (out / "notes.md").write_text("mine")

    with pytest.raises(InvalidUsage, match=r"notes\.md"):
        run_while_the_user_writes()
    assert (out / "notes.md").read_text() == "mine"
    assert (out / "results.csv").exists()  # the previous output is intact
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_failed_run_leaves_the_previous_output_and_no_staging(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_dir(out, "compare") as stage:
        _write(stage, text="before\n")
    def fail_midway() -> None:
        with staged_dir(out, "compare") as stage:
            _write(stage, text="after\n")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail_midway()
    assert (out / "results.csv").read_text() == "before\n"
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_an_empty_directory_is_used(tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    with staged_dir(out, "compare") as stage:
        _write(stage)
    assert is_coordsim_output(out)
    assert claim_dir(tmp_path / "empty2", "replay").is_dir()


def test_a_file_is_replaced_only_when_it_is_coordsims(tmp_path: Path) -> None:
    mine = tmp_path / "profile.toml"
    mine.write_text("# A coordsim latency profile written by `coordsim calibrate`\n")
    claim_file(mine, "coordsim calibrate")
    theirs = tmp_path / "theirs.toml"
    theirs.write_text("[x]\n")
    with pytest.raises(InvalidUsage, match="not written by coordsim"):
        claim_file(theirs, "coordsim calibrate")
    with pytest.raises(InvalidUsage, match="not a regular file"):
        claim_file(tmp_path, "coordsim calibrate")
    claim_file(tmp_path / "absent.toml", "coordsim calibrate")


def test_atomic_write_is_private_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    atomic_write(target, lambda p: p.write_text("x"))
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 & ~_umask()
    with pytest.raises(ZeroDivisionError):
        atomic_write(target, lambda p: (p.write_text("half"), 1 / 0))
    assert target.read_text() == "x"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask
