"""The CLI's one vocabulary (docs/guide.md, "Vocabulary"; issue 37): a short
flag means one thing in every command, the scenario is taken the same way
everywhere, each verb names the commands the table says, and the old names
still work with one line saying the new one."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from sim.cli.main import LazyGroup, app
from sim.cli.main import main as cli_main

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guide.md"
#: The commands that take a scenario (the deprecated names take it as their new ones do).
SCENARIO_COMMANDS = {"run", "shrink", "anomalies run", "anomalies sweep", "spark sweep"}


def _root() -> LazyGroup:
    root = typer.main.get_command(app)
    assert isinstance(root, LazyGroup)
    root.load_all()
    return root


def _tree() -> list[tuple[str, Any]]:
    """(path, command) for the app, every group and every command, hidden ones included."""
    found: list[tuple[str, Any]] = []

    def walk(prefix: str, cmd: Any) -> None:
        found.append((prefix, cmd))
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            walk(f"{prefix} {name}".strip(), sub)

    walk("", _root())
    return found


TREE = _tree()
LEAVES = [(name, cmd) for name, cmd in TREE if not getattr(cmd, "commands", None)]


def _table(header: str) -> list[list[str]]:
    """The rows of the guide's table whose header row starts with `header`."""
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def _code(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _short_flags() -> dict[str, dict[str, list[str]]]:
    """short flag -> long name -> the commands where it means that."""
    seen: dict[str, dict[str, list[str]]] = {}
    for name, cmd in TREE:
        for p in cmd.params:
            if p.param_type_name != "option":
                continue
            names = [*p.opts, *p.secondary_opts]
            longs = [o for o in names if o.startswith("--")]
            for short in (o for o in names if not o.startswith("--")):
                seen.setdefault(short, {}).setdefault(longs[0], []).append(f"coordsim {name}".strip())
    return seen


def test_no_short_flag_has_two_meanings() -> None:
    clashes = {short: longs for short, longs in _short_flags().items() if len(longs) > 1}
    assert clashes == {}, f"a short flag with two meanings: {clashes}"


def test_every_short_flag_is_the_vocabularys() -> None:
    table = {_code(row[0])[0]: _code(row[1])[0] for row in _table("short")}
    used = {short: next(iter(longs)) for short, longs in _short_flags().items()}
    assert used == table, "docs/guide.md's short-flag table and the commands disagree"


def _scenario_params(cmd: Any) -> tuple[list[Any], list[Any]]:
    args = [p for p in cmd.params if p.param_type_name == "argument" and p.metavar == "SCENARIO"]
    opts = [p for p in cmd.params if p.param_type_name == "option" and "--scenario" in p.opts]
    return args, opts


@pytest.mark.parametrize(("name", "cmd"), LEAVES, ids=[n for n, _ in LEAVES])
def test_the_scenario_is_taken_the_same_way(name: str, cmd: Any) -> None:
    args, opts = _scenario_params(cmd)
    if not args and not opts:
        assert name not in SCENARIO_COMMANDS, f"coordsim {name} takes no scenario"
        return
    # The argument SCENARIO, or the option --scenario NAME: either, so neither is required.
    assert len(args) == 1, f"coordsim {name}: the scenario is not the argument SCENARIO"
    assert len(opts) == 1, f"coordsim {name}: no --scenario"
    assert not args[0].required
    assert not opts[0].hidden
    assert opts[0].opts == ["--scenario"]
    assert opts[0].metavar == "NAME"
    assert opts[0].help == "Another spelling of the SCENARIO argument."


def test_the_scenario_commands_are_the_vocabularys() -> None:
    takes = {name for name, cmd in LEAVES if any(_scenario_params(cmd)) and not cmd.hidden}
    assert takes == SCENARIO_COMMANDS


def test_every_verb_names_live_commands() -> None:
    paths = {name: cmd for name, cmd in TREE}
    rows = _table("verb")
    assert [r[0] for r in rows] == ["run", "compare", "check", "shrink", "export", "replay", "sweep"]
    for verb, _means, commands in rows:
        for command in _code(commands):
            path = command.removeprefix("coordsim ")
            assert path in paths, f"{verb}: {command} does not exist"
            assert not paths[path].hidden, f"{verb}: {command} is hidden"
            assert path.split()[-1] == verb, f"{verb}: {command} is not named by it"


def test_shrinking_has_one_entry_point() -> None:
    shrinks = [name for name, cmd in LEAVES if name.split()[-1] == "shrink" and not cmd.hidden]
    assert shrinks == ["shrink"]


def test_every_noun_is_in_the_table() -> None:
    assert [r[0] for r in _table("noun")] == ["scenario", "workload", "configuration", "variant", "run directory",
                                             "event", "checker"]


@pytest.mark.parametrize(
    ("old", "new", "args", "error"),
    [
        (["replay"], "coordsim spark replay", ["nope"], "no trace directory"),
        (["sweep"], "coordsim spark sweep", ["nope", "--seeds", "2"], "unknown scenario"),
        (["anomalies", "shrink"], "coordsim shrink", ["nope"], "unknown scenario"),
    ],
)
def test_an_old_name_still_works_and_says_the_new_one(
    old: list[str], new: str, args: list[str], error: str,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["coordsim", *old, *args])
    with pytest.raises(SystemExit) as exc:
        cli_main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"coordsim: note: coordsim {' '.join(old)} is deprecated; use {new} (accepted until 0.3)"
    assert error in err[1], err
    paths = dict(TREE)
    assert paths[" ".join(old)].hidden


@pytest.mark.parametrize(
    "argv",
    [
        ["anomalies", "run", "seed001", "--scenario", "split-brain"],
        ["anomalies", "sweep", "seed001", "--scenario", "split-brain", "--seeds", "1"],
        ["shrink", "seed001", "--scenario", "split-brain"],
        ["run", "seed001", "--scenario", "select-one"],
        ["spark", "sweep", "seed001", "--scenario", "split-brain", "--seeds", "1"],
    ],
)
def test_two_different_scenarios_are_refused(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["coordsim", *argv])
    with pytest.raises(SystemExit) as exc:
        cli_main()
    assert exc.value.code == 2
    assert "two scenarios named: seed001 and --scenario" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [["anomalies", "sweep", "--seeds", "1"], ["shrink"], ["run"], ["spark", "sweep", "--seeds", "1"]],
)
def test_no_scenario_is_one_line(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["coordsim", *argv])
    with pytest.raises(SystemExit) as exc:
        cli_main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "name a scenario: SCENARIO, or --scenario NAME" in err[0]


#: coordsim's own options, which may follow the command too (sim/cli/main.py).
_GLOBAL = ("-v", "--verbose", "--log-json", "--log-console")


def test_no_command_has_an_option_of_coordsim_itself() -> None:
    """A command's own `-v` or `--log-json` would never see its value: the
    root group takes them wherever they stand."""
    own = {f"coordsim {name}": [o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o in _GLOBAL]
           for name, cmd in TREE if name}
    assert {k: v for k, v in own.items() if v} == {}


@pytest.mark.parametrize(("name", "cmd"), LEAVES, ids=[n for n, _ in LEAVES])
def test_the_global_options_work_after_the_command(name: str, cmd: Any) -> None:
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, [*name.split(), "-v", "--log-json", "--help"])
    assert r.exit_code == 0, r.output
    assert "Usage: coordsim" in r.output


def test_the_global_options_after_the_command_reach_coordsim(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`coordsim config show -v` is `coordsim -v config show` (a command's
    arguments after `--` are its own)."""
    import logging

    import structlog

    from sim.cli.main import _globals_first

    assert _globals_first(["run", "x", "-v", "--log-json"]) == ["-v", "--log-json", "run", "x"]
    assert _globals_first(["-v", "run", "x", "--", "-v"]) == ["-v", "run", "x", "--", "-v"]
    assert _globals_first(["run", "x"]) == ["run", "x"]
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["coordsim", "config", "show", "--log-console", "-v"])
    try:
        with pytest.raises(SystemExit) as exc:
            cli_main()
        verbose = root.level  # what -v set: the standard library's records at DEBUG
    finally:
        structlog.reset_defaults()
        root.handlers, root.level = handlers, level
    assert exc.value.code == 0, capsys.readouterr().err
    assert verbose == logging.DEBUG
