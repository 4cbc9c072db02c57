"""Every command's `--help`: it works, shows an example, and speaks the one
vocabulary of sim/cli/options.py (the same names, metavars and defaults for a
shared option wherever it appears), with no raw type name as a metavar."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from sim.cli.main import LAZY_COMMANDS, LazyGroup, app
from sim.cli.options import SHARED

#: Metavars that only name a type: what a user cannot act on.
_RAW = re.compile(r"^(<\w+>|TEXT|INTEGER|FLOAT|BOOLEAN|PATH|FILENAME|DIRECTORY)$")
#: `-o/--output` names one file, not a run directory, in these commands.
_OUTPUT_FILE = {"calibrate": "FILE", "shrink": "FILE", "anomalies shrink": "FILE", "export": "FILE|DIR"}


def _root() -> LazyGroup:
    root = typer.main.get_command(app)
    assert isinstance(root, LazyGroup)
    root.load_all()  # the commands' modules are imported lazily
    return root


def _commands() -> list[tuple[str, Any]]:
    """(path, click command) for every command and subcommand of the app."""
    root = _root()
    found: list[tuple[str, Any]] = []

    def walk(prefix: str, cmd: Any) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                walk(f"{prefix} {name}".strip(), sub)
        else:
            found.append((prefix, cmd))

    walk("", root)
    return found


COMMANDS = _commands()


def test_the_walk_finds_every_command() -> None:
    names = {n for n, _ in COMMANDS}
    assert {"compare", "run", "check", "export", "spark replay", "spark sweep", "synth-trace", "validate", "calibrate",
            "anomalies run", "anomalies sweep", "anomalies matrix", "shrink", "config show",
            "catalog dump"} <= names


@pytest.mark.parametrize(("name", "cmd"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_help_works_and_shows_an_example(name: str, cmd: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    r = CliRunner().invoke(app, [*name.split(), "--help"])
    assert r.exit_code == 0, r.output
    assert "Examples:" in r.output, f"coordsim {name} --help shows no example"
    assert "coordsim " in r.output.split("Examples:", 1)[1]
    for raw in ("<bool>", "<str>", "<int>", "<float>", "<path>"):
        assert raw not in r.output, r.output


@pytest.mark.parametrize(("name", "cmd"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_no_metavar_is_a_raw_type_name(name: str, cmd: Any) -> None:
    ctx = cmd.make_context(name, ["--help"], resilient_parsing=True)
    for p in cmd.params:
        if getattr(p, "hidden", False) or getattr(p, "is_flag", False):
            continue
        if p.param_type_name == "argument":
            shown = p.metavar  # the name column; no type column beside it
            assert p.display_type_rich(ctx) is None, f"coordsim {name}: {p.opts} shows a type column"
        else:
            shown = p.display_type_rich(ctx)
        assert shown, f"coordsim {name}: {p.opts} shows no metavar"
        assert not _RAW.match(shown), f"coordsim {name}: {p.opts} shows {shown!r}"


@pytest.mark.parametrize("option", sorted(SHARED))
def test_a_shared_option_is_the_same_everywhere(option: str) -> None:
    names, metavar, default = SHARED[option]
    seen = []
    for name, cmd in COMMANDS:
        for p in cmd.params:
            if option not in p.opts or getattr(p, "hidden", False):
                continue
            seen.append(name)
            want = _OUTPUT_FILE.get(name, metavar) if option == "--output" else metavar
            assert sorted(p.opts) == sorted(names), f"coordsim {name}: {p.opts}"
            assert p.metavar == want, f"coordsim {name} {option}: metavar {p.metavar!r}, not {want!r}"
            if not p.required and name not in _OUTPUT_FILE:
                assert p.default == default, f"coordsim {name} {option}: default {p.default!r}"
    assert seen, f"no command has {option}"
    # The help is one text, wherever the option is (the output-file variants excepted).
    helps = {
        p.help for name, cmd in COMMANDS if name not in _OUTPUT_FILE for p in cmd.params if option in p.opts
        and not getattr(p, "hidden", False)
    }
    assert len(helps) == 1, helps


def test_the_defaults_are_the_documented_ones() -> None:
    from sim.cli import options
    from sim.load.run_config import RunConfig

    assert (options.DEFAULT_MODE, options.DEFAULT_CONFIG, options.DEFAULT_SEED) == ("virtual", "decoupled", 0)
    assert (RunConfig().mode, RunConfig().seed, RunConfig().output) == ("virtual", 0, None)
    shown = {p.opts[0]: p.show_default for _, cmd in COMMANDS for p in cmd.params
             if p.opts and p.opts[0] in ("--mode", "--seed", "--config")}
    assert shown == {"--mode": "virtual", "--seed": "0", "--config": "decoupled"}


#: A count option's help ends with its bounds: "…, 1 to 1,000." or "… 0 to 5,000 (…)".
_BOUNDS = re.compile(r"\b(-?[\d,]+) to ([\d,]+)\b")
#: Integer options that are not counts: a seed is any 64-bit integer.
_NOT_COUNTS = {"--seed", "--first-seed"}


def _count_options() -> list[tuple[str, str, Any]]:
    out = []
    for name, cmd in COMMANDS:
        for p in cmd.params:
            if p.param_type_name != "option" or getattr(p, "hidden", False) or p.opts[0] in _NOT_COUNTS:
                continue
            annotation = p.type_descriptor.annotation
            if annotation in (int, int | None) or p.opts[0] in ("--concurrency", "--adapters"):
                out.append((name, p.opts[0], p))
    return out


def test_every_count_option_documents_its_bounds() -> None:
    """Issue 38: every count option has a documented upper bound (and is
    refused with one line above it: tests/sim/cli/test_bad_input.py)."""
    counts = _count_options()
    assert {("anomalies sweep", "--seeds"), ("synth-trace", "--planted"), ("compare", "--ops"),
            ("spark sweep", "--seeds"), ("calibrate", "--samples")} <= {(n, o) for n, o, _ in counts}
    missing = [f"coordsim {n} {o}" for n, o, p in counts if o != "--adapters" and not _BOUNDS.search(p.help or "")]
    assert missing == []


def test_the_documented_bounds_are_the_enforced_ones() -> None:
    from sim.cli import spark
    from sim.load.limits import (
        MAX_CLIENTS,
        MAX_CONCURRENCY,
        MAX_OPS,
        MAX_REPEAT,
        MAX_SEEDS,
        MAX_SIZE,
        MAX_TABLES,
    )
    from sim.model.calibrate import MAX_SAMPLES, MIN_SAMPLES
    from sim.runtime.workers import MAX_JOBS
    from sim.spark import synth

    assert (spark.MAX_SYNTH_OPS, spark.SYNTH_CHUNK) == (synth.MAX_SYNTH_OPS, synth.CHUNK)
    want = {
        ("compare", "--ops"): (1, MAX_OPS), ("compare", "--repeat"): (1, MAX_REPEAT),
        ("compare", "--tables"): (1, MAX_TABLES), ("compare", "--concurrency"): (1, MAX_CONCURRENCY),
        ("compare", "--jobs"): (1, MAX_JOBS), ("anomalies sweep", "--seeds"): (1, MAX_SEEDS),
        ("anomalies matrix", "--seeds"): (1, MAX_SEEDS), ("anomalies run", "--clients"): (1, MAX_CLIENTS),
        ("anomalies run", "--size"): (1, MAX_SIZE), ("calibrate", "--samples"): (MIN_SAMPLES, MAX_SAMPLES),
        ("spark sweep", "--seeds"): (1, spark.MAX_SWEEP_SEEDS), ("synth-trace", "--ops"): (1, synth.MAX_SYNTH_OPS),
        ("synth-trace", "--planted"): (0, synth.MAX_SYNTH_OPS // synth.CHUNK),
        ("spark replay", "--shuffle-partitions"): (1, spark.MAX_PARTITIONS),
    }
    shown = {}
    for name, opt, p in _count_options():
        m = _BOUNDS.search(p.help or "")
        if (name, opt) in want and m:
            shown[name, opt] = (int(m[1].replace(",", "")), int(m[2].replace(",", "")))
    assert shown == want


@pytest.mark.parametrize("lazy", LAZY_COMMANDS, ids=[c.name for c in LAZY_COMMANDS])
def test_the_lazy_summary_is_the_commands_own(lazy: Any) -> None:
    """`coordsim --help` lists a summary kept beside the lazy import: it must be
    the command's own first help paragraph, which nothing else keeps in step."""
    cmd = _root().commands[lazy.name]
    assert cmd.get_short_help_str(limit=10_000) == " ".join(lazy.summary.split())
