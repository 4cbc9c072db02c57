"""The output rule (sim/runtime/outputs.py and its siblings): coordsim never deletes or overwrites a
file it did not create, replaces its own outputs atomically, and keeps them
private."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import (
    LOCK,
    MARKER,
    RECORD,
    atomic_write,
    is_coordsim_output,
    output_command,
)
from sim.runtime.owned_files import claim_file, write_owned
from sim.runtime.run_dirs import LATEST, ROOT_ENV, latest_name, run_dir
from sim.runtime.staging import claimed_dir, staged_dir

if TYPE_CHECKING:
    from collections.abc import Iterator


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
    with pytest.raises(InvalidUsage, match="not written by coordsim"), claimed_dir(out, "replay"):
        pytest.fail("the block must not run")
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
    assert sorted(os.listdir(out)) == sorted([LOCK, MARKER, "new.csv"])
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
    with claimed_dir(tmp_path / "empty2", "replay") as d:
        assert d.is_dir()


def test_a_file_is_replaced_only_when_coordsim_recorded_writing_it(tmp_path: Path) -> None:
    mine = tmp_path / "profile.toml"
    write_owned(mine, lambda p: p.write_text("# A coordsim latency profile written by `coordsim calibrate`\n"))
    claim_file(mine)
    write_owned(mine, lambda p: p.write_text("# the next one\n"))  # its own: replaced
    assert mine.read_text() == "# the next one\n"
    # Content proves nothing: a user's file with coordsim's words in it is refused.
    theirs = tmp_path / "theirs.toml"
    theirs.write_text("# A coordsim latency profile written by `coordsim calibrate`\n")
    with pytest.raises(InvalidUsage, match="was not written by coordsim"):
        claim_file(theirs)
    with pytest.raises(InvalidUsage, match="was not written by coordsim"):
        write_owned(theirs, lambda p: p.write_text("x"))
    assert theirs.read_text() == "# A coordsim latency profile written by `coordsim calibrate`\n"
    with pytest.raises(InvalidUsage, match="not a regular file"):
        claim_file(tmp_path)
    claim_file(tmp_path / "absent.toml")


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
    assert os.readlink(root / f"{LATEST}-compare") == made[1].name
    assert sorted(p.name for p in root.iterdir()) == sorted([MARKER, LATEST, f"{LATEST}-compare", *(d.name for d in made)])


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
    assert (root / latest_name("anomalies sweep")).resolve() == good.resolve()


def test_each_command_keeps_its_own_latest(tmp_path: Path) -> None:
    """Issue 37: `latest` is the newest run of any command, `latest-<command>`
    the newest of that one, so `--baseline coordsim-out/latest-compare` still
    names a comparison after a `check` or a `run`."""
    root = tmp_path / "runs"
    made = {}
    for command in ("compare", "anomalies run", "compare", "check"):
        out = run_dir(None, command, root=root)
        with staged_dir(out, command) as stage:
            _write(stage, text=f"{command}\n")
        made[command] = out
    assert latest_name("anomalies run") == "latest-anomalies-run"
    assert (root / LATEST).resolve() == made["check"].resolve()
    for command, out in made.items():
        link = root / latest_name(command)
        assert link.is_symlink()
        assert os.readlink(link) == out.name  # relative, as `latest`
    assert (root / "latest-compare" / "results.csv").read_text() == "compare\n"
    assert output_command(root / "latest-compare") == "compare"
    assert output_command(made["check"]) == "check"
    assert output_command(tmp_path) is None
    assert not [p for p in os.listdir(root) if p.startswith(".latest")]  # no temporary link left


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
    with staged_dir(run_dir(None, "compare", root=root), "compare") as stage:  # makes the root
        _write(stage)
    (root / LATEST).unlink()
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


# --- ownership that cannot be forged (issue 38, item 3) -------------------------------------

_USERS: Final = b"the user's own results: not coordsim's to delete\n"


def _forge(out: Path, files: object, *, fmt: int | None = 2) -> None:
    """A hand-written marker in `out`, claiming `files`."""
    doc: dict[str, object] = {"generator": "coordsim", "command": "compare", "files": files}
    if fmt is not None:
        doc["format"] = fmt
    (out / MARKER).write_text(json.dumps(doc))


def _users_dir(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "results.csv").write_bytes(_USERS)
    (out / "sub" / "notes.md").write_bytes(_USERS)
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_FORGERIES: Final = {
    # A marker listing the user's files by name, with no hashes at all (the old format).
    "old-format-list": (["results.csv", "sub/notes.md"], None, "older marker without hashes"),
    # The new format, hashes made up.
    "wrong-hash": (
        {r: {"size": len(_USERS), "sha256": "0" * 64} for r in ("results.csv", "sub/notes.md")}, 2,
        "changed since coordsim wrote it",
    ),
    # Right size and hash of other bytes: only the bytes themselves match.
    "hash-of-other-bytes": (
        {r: {"size": len(_USERS), "sha256": _sha(b"x" * len(_USERS))} for r in ("results.csv", "sub/notes.md")}, 2,
        "changed since coordsim wrote it",
    ),
    # Entries without a hash, in the new format's shape.
    "no-hash-entries": ({"results.csv": {"size": len(_USERS)}, "sub/notes.md": {}}, 2, "not written by coordsim"),
    # Listing nothing.
    "lists-nothing": ({}, 2, "not written by coordsim"),
}


@pytest.mark.parametrize("forgery", list(_FORGERIES), ids=list(_FORGERIES))
def test_a_forged_marker_never_costs_a_user_file(tmp_path: Path, forgery: str) -> None:
    files, fmt, why = _FORGERIES[forgery]
    out = _users_dir(tmp_path)
    _forge(out, files, fmt=fmt)
    before = _tree(out)
    with pytest.raises(InvalidUsage, match=re.escape(why)) as exc, staged_dir(out, "compare"):
        pytest.fail("the block must not run")
    assert "results.csv" in str(exc.value)
    assert "\n" not in str(exc.value)
    with pytest.raises(InvalidUsage, match=re.escape(why)), claimed_dir(out, "replay"):
        pytest.fail("the block must not run")
    for p in (out / "results.csv", out / "sub" / "notes.md"):
        with pytest.raises(InvalidUsage, match="was not written by coordsim"):
            write_owned(p, lambda q: q.write_text("overwritten"))
    assert _tree(out) == before  # byte for byte, and not even a lock file added
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_marker_with_the_files_true_hashes_lets_them_be_replaced(tmp_path: Path) -> None:
    """The control for the forgery test: the same directory, the hashes right."""
    out = _users_dir(tmp_path)
    _forge(out, {r: {"size": len(_USERS), "sha256": _sha(_USERS)} for r in ("results.csv", "sub/notes.md")})
    with staged_dir(out, "compare") as stage:
        _write(stage, "new.csv")
    assert sorted(os.listdir(out)) == sorted([LOCK, MARKER, "new.csv"])


def test_only_the_unprovable_file_blocks_a_replacement(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_dir(out, "compare") as stage:
        _write(stage, "a.csv", "a\n")
        _write(stage, "b.csv", "b\n")
    (out / "b.csv").write_text("b, edited by the user\n")
    with pytest.raises(InvalidUsage, match=r"b\.csv \(changed since coordsim wrote it\)") as exc, \
            staged_dir(out, "compare"):
        pytest.fail("the block must not run")
    assert "a.csv" not in str(exc.value)
    assert (out / "b.csv").read_text() == "b, edited by the user\n"
    assert (out / "a.csv").read_text() == "a\n"


def test_a_file_coordsim_wrote_then_the_user_edited_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "profile.toml"
    write_owned(p, lambda q: q.write_text("ours\n"))
    p.write_text("ours, with the user's tuning\n")
    with pytest.raises(InvalidUsage, match="changed since coordsim wrote it"):
        write_owned(p, lambda q: q.write_text("replaced"))
    assert p.read_text() == "ours, with the user's tuning\n"


def test_a_forged_record_proves_nothing(tmp_path: Path) -> None:
    p = tmp_path / "profile.toml"
    p.write_bytes(_USERS)
    (tmp_path / RECORD).write_text(json.dumps(
        {"generator": "coordsim", "format": 2, "files": {"profile.toml": {"size": len(_USERS), "sha256": "f" * 64}}}
    ))
    with pytest.raises(InvalidUsage, match="changed since coordsim wrote it"):
        write_owned(p, lambda q: q.write_text("replaced"))
    assert p.read_bytes() == _USERS


def test_a_users_file_named_like_the_record_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / RECORD).write_bytes(_USERS)
    with pytest.raises(InvalidUsage, match="is not coordsim's record"):
        write_owned(tmp_path / "profile.toml", lambda q: q.write_text("x"))
    assert (tmp_path / RECORD).read_bytes() == _USERS
    assert not (tmp_path / "profile.toml").exists()


def test_a_verdict_check_adds_to_an_output_is_recorded_there(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_dir(out, "compare") as stage:
        _write(stage, "trace/meta.json", "{}\n")
    write_owned(out / "trace" / "verdict.json", lambda q: q.write_text("{}\n"))
    entry = json.loads((out / MARKER).read_text())["files"]["trace/verdict.json"]
    assert entry == {"size": 3, "sha256": _sha(b"{}\n")}
    with staged_dir(out, "compare") as stage:  # still replaceable whole
        _write(stage, "new.csv")
    assert sorted(os.listdir(out)) == sorted([LOCK, MARKER, "new.csv"])


# --- one writer per output directory (issue 38, item 2) -------------------------------------

#: Takes `sys.argv[1]`'s lock through `staged_dir`, says so, writes a result
#: once told to (a line on stdin), and exits.
_HOLDER: Final = """
import sys
from pathlib import Path
from sim.runtime.staging import staged_dir
with staged_dir(Path(sys.argv[1]), "compare") as stage:
    (stage / "first.csv").write_text("first\\n")
    print("locked", flush=True)
    sys.stdin.readline()
    (stage / "second.csv").write_text("second\\n")
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    out = tmp_path / "out"
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).parents[3],
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "locked\n"
        try:
            yield proc, out
        finally:
            proc.kill()


def test_a_second_writer_is_refused_naming_the_first_and_the_first_completes(
    holder: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, out = holder
    assert (out / LOCK).read_text() == f"{proc.pid}\n"
    want = f"output directory {out} is being written by another coordsim run (pid {proc.pid})"
    with pytest.raises(InvalidUsage, match=re.escape(want)), staged_dir(out, "compare"):
        pytest.fail("the block must not run")
    with pytest.raises(InvalidUsage, match=re.escape(want)), claimed_dir(out, "replay"):
        pytest.fail("the block must not run")
    with pytest.raises(InvalidUsage, match=re.escape(want)):
        write_owned(out / "verdict.json", lambda q: q.write_text("{}"))
    assert sorted(os.listdir(out)) == sorted([LOCK, MARKER])  # nothing of the refused runs
    out_, _ = proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0, out_
    assert (out / "first.csv").read_text() == "first\n"
    assert (out / "second.csv").read_text() == "second\n"
    assert sorted(os.listdir(out.parent)) == ["out"]
    with staged_dir(out, "compare") as stage:  # and the lock is free once it has ended
        _write(stage)


def test_a_writer_that_died_leaves_the_lock_free(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with subprocess.Popen([sys.executable, "-c", _HOLDER, str(out)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3]) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "locked\n"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    with staged_dir(out, "compare") as stage:
        _write(stage)
    assert (out / LOCK).read_text() == f"{os.getpid()}\n"
    assert (out / "results.csv").exists()


def test_a_command_may_stage_into_the_output_it_holds(tmp_path: Path) -> None:
    """`run` of a failing Python scenario writes its partial trace through a
    second staging of the same output: the lock is re-entrant in a process."""
    out = tmp_path / "out"

    def fail_after_a_partial_result() -> None:
        with staged_dir(out, "run") as stage:
            stage.rmdir()
            with staged_dir(out, "run") as partial:
                _write(partial, "partial.csv")
            raise RuntimeError("the scenario's error")

    with pytest.raises(RuntimeError):
        fail_after_a_partial_result()
    assert (out / "partial.csv").exists()  # kept though the directory was created by the failed run
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_failed_run_leaves_a_new_or_empty_directory_as_it_was(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    def fail_midway(out: Path) -> None:
        with staged_dir(out, "compare") as stage:
            _write(stage)
            raise RuntimeError("boom")

    for out in (tmp_path / "new", empty):
        with pytest.raises(RuntimeError):
            fail_midway(out)
    assert sorted(os.listdir(tmp_path)) == ["empty"]
    assert os.listdir(empty) == []


def test_latest_is_replaced_by_a_rename_and_never_dangles(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for _ in range(3):
        out = run_dir(None, "compare", root=root)
        with staged_dir(out, "compare") as stage:
            _write(stage)
        assert (root / LATEST).resolve() == out.resolve()
        assert (root / LATEST / "results.csv").exists()
    assert not [p for p in os.listdir(root) if p.startswith(f".{LATEST}")]


_COORDSIM: Final = [sys.executable, "-c", "from sim.cli.entry import main; main()"]
_TINY_COMPARE: Final = ["compare", "--mode", "virtual", "-w", "insert", "--configs", "decoupled",
                        "--concurrency", "1", "--ops", "300", "--repeat", "2", "-j", "1"]


def test_two_concurrent_compare_runs_on_one_output(tmp_path: Path) -> None:
    """Issue 38's "two runs, one output": the second exits 2 with one line
    naming the first's PID, and the first's results are complete. The first
    is paused (SIGSTOP) once it holds the lock, so the two overlap however
    fast the machine is."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDSIM_")}
    env.update({"COLUMNS": "200", "NO_COLOR": "1"})
    repo = Path(__file__).parents[3]
    with subprocess.Popen([*_COORDSIM, *_TINY_COMPARE, "-o", str(out)], cwd=repo, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as first:
        try:
            deadline = time.monotonic() + 60
            while not ((out / LOCK).exists() and (out / LOCK).read_text() == f"{first.pid}\n"):
                assert first.poll() is None, "the first run ended before it was caught holding the lock"
                assert time.monotonic() < deadline, "the first run never took the lock"
                time.sleep(0.005)
            first.send_signal(signal.SIGSTOP)
            second = subprocess.run([*_COORDSIM, *_TINY_COMPARE, "-o", str(out)], cwd=repo, env=env,
                                    capture_output=True, text=True, timeout=120, check=False)
        finally:
            first.send_signal(signal.SIGCONT)
        stdout, stderr = first.communicate(timeout=300)
    story = f"second: exit {second.returncode}\n{second.stderr}\nfirst: exit {first.returncode}\n{stderr[-2000:]}"
    assert second.returncode == 2, story
    assert "Traceback" not in second.stderr, story
    lines = second.stderr.splitlines()
    assert len(lines) == 1, story
    assert f"is being written by another coordsim run (pid {first.pid})" in lines[0], story
    assert first.returncode == 0, story
    assert stdout.splitlines()[-1] == f"wrote {out}", story
    marker = json.loads((out / MARKER).read_text())
    listed = marker["files"]
    assert {"summary.json", "results.csv", "report.md", "config.toml"} <= set(listed), sorted(listed)
    assert any(rel.startswith("traces/") for rel in listed), sorted(listed)
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} - {MARKER, LOCK}
    assert on_disk == set(listed)
    for rel, entry in listed.items():
        data = (out / rel).read_bytes()
        assert entry == {"size": len(data), "sha256": _sha(data)}, rel
    assert json.loads((out / "summary.json").read_text())  # whole, parseable
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no staging of either run left


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}
