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
    LATEST,
    MARKER,
    ROOT_ENV,
    atomic_write,
    claim_dir,
    claim_file,
    is_coordsim_output,
    run_dir,
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


# --- run directories ----------------------------------------------------------------------


def test_successive_runs_keep_their_directories_and_latest_names_the_newest(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    made = []
    for text in ("first\n", "second\n"):
        out = run_dir(None, "compare", root=root)
        with staged_dir(out, "compare") as stage:
            _write(stage, text=text)
        made.append(out)
    assert made[0] != made[1]
    assert all(d.parent == root and d.name.startswith("compare-") for d in made)
    assert [(d / "results.csv").read_text() for d in made] == ["first\n", "second\n"]
    latest = root / LATEST
    assert latest.is_symlink()
    assert os.readlink(latest) == made[1].name  # relative: the root can be moved
    assert (latest / "results.csv").read_text() == "second\n"
    assert sorted(p.name for p in root.iterdir()) == sorted([MARKER, LATEST, *(d.name for d in made)])


def test_a_failed_run_leaves_no_run_directory_and_latest_unchanged(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    good = run_dir(None, "anomalies sweep", root=root)
    assert good.name.startswith("anomalies-sweep-")
    with staged_dir(good, "anomalies sweep") as stage:
        _write(stage)
    bad = run_dir(None, "anomalies sweep", root=root)

    def fail_midway() -> None:
        with staged_dir(bad, "anomalies sweep") as stage:
            _write(stage)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail_midway()
    assert not bad.exists()
    assert (root / LATEST).resolve() == good.resolve()


def test_an_explicit_output_is_used_exactly(tmp_path: Path) -> None:
    assert run_dir(tmp_path / "mine", "compare") == tmp_path / "mine"
    assert not (tmp_path / "mine").exists()


def test_a_foreign_runs_root_is_refused_untouched(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    (root / "notes.txt").write_text("mine\n")
    with pytest.raises(InvalidUsage, match="runs root"):
        run_dir(None, "compare", root=root)
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]


def test_an_older_single_output_becomes_a_runs_root_and_keeps_its_files(tmp_path: Path) -> None:
    root = tmp_path / "coordsim-out"
    with staged_dir(root, "compare") as stage:  # the layout before run directories
        _write(stage)
    out = run_dir(None, "compare", root=root)
    with staged_dir(out, "compare") as stage:
        _write(stage, text="new\n")
    assert (root / "results.csv").read_text() == "x\n"
    assert (root / LATEST / "results.csv").read_text() == "new\n"


def test_a_latest_that_is_not_a_link_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run_dir(None, "compare", root=root)  # claims the root
    (root / LATEST).mkdir()
    (root / LATEST / "keep").write_text("k\n")
    out = run_dir(None, "compare", root=root)
    with staged_dir(out, "compare") as stage:
        _write(stage)
    assert (root / LATEST / "keep").read_text() == "k\n"
    assert out.is_dir()


def test_the_runs_root_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROOT_ENV, str(tmp_path / "elsewhere"))
    assert run_dir(None, "compare").parent == tmp_path / "elsewhere"
