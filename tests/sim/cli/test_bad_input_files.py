"""Bad input, files (issue 38 item 5): a binary and a truncated file for every
file option and argument of every command, and a disk that fills up while a
command writes its traces or results.

The file parameters are enumerated from the typer app (every `Path`
parameter, and the few `str` ones that name a file), so a new one is covered
by itself: it gets the default treatment of its kind, and a command without a
base invocation in bad_input_base.py fails
`test_every_file_parameter_is_in_the_corpus`. An
input given a binary or a truncated file is refused in one line naming it,
exit 2; an output that names an existing binary or truncated file (a
directory output: a file, or a directory under a truncated marker) leaves it
as it was, exit 2. A full disk is an external failure: one line saying so,
exit 1, and nothing half-written is left behind. The runner and the promise
each case is held to are tests/sim/cli/test_bad_input.py's.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

import pytest

from tests.sim.cli.bad_input_base import BASE
from tests.sim.cli.bad_input_base import VIRTUAL as _V
from tests.sim.cli.test_bad_input import (
    _NOT_UTF8,
    BINARY,
    RUNS_ROOT,
    Case,
    _c,
    _left_nothing,
    _run_dir,
    _trace,
    cli_params,
    params,
    run_case,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.sim.cli.test_bad_input import Forker

#: `str` parameters that name a file (the type cannot tell).
STR_FILES: Final = frozenset({"latency_profile", "workloads", "scenario", "traces"})
#: Commands whose `scenario` argument may be a file (others take a name only).
_SCENARIO_FILE_COMMANDS: Final = frozenset({("run",)})
#: Parameters that name what coordsim writes.
OUTPUTS: Final = frozenset({"output", "html", "verdict", "target"})

#: Valid files cut off mid-token, by the reader their name chooses.
_TOML_CUT: Final = b'mode = "virtual"\nworkloads = ["sel'
_PROFILE_CUT: Final = b'[latency]\n"oracle.pg" = {kind = "lognor'
_PY_CUT: Final = b"async def scenario(sim):\n    s = sim.session(\n"
_EDN_CUT: Final = b"{:type :invoke, :process 0, :f :add, :val"
_CSV_CUT: Final = b"workload,config,concurrency,thr"
_FACTS_CUT: Final = b'[[fact]]\nid = "loop-mess'
_JSON_CUT: Final = b'{\n  "generator": "coordsim",\n  "ver'
_MARKER_CUT: Final = b'{"generator": "coordsim", "command": "compare", "fi'


@dataclass(frozen=True)
class FileParam:
    """How a file parameter is given a bad file: its name in the working
    directory, and the content of a truncated one (a directory parameter:
    `dir_file` names the file inside it that is cut short)."""

    name: str
    truncated: bytes
    dir_file: str | None = None
    before: tuple[str, ...] = ()  # arguments the parameter needs beside it
    output: bool = False
    #: Read once the run has started: its run directory is made, and removed
    #: again (`coordsim-out` is gone afterwards).
    late: bool = False


def _default(param: str, is_argument: bool) -> FileParam:
    """A new file parameter's treatment until it is given its own: an output
    by its name, else an input read as text."""
    if param in OUTPUTS:
        return FileParam("out", _MARKER_CUT, dir_file=".coordsim-output", output=True)
    return FileParam("f.txt", _JSON_CUT)


#: Parameters whose file is of a known kind (the default treats the rest).
SPECS: Final[dict[tuple[tuple[str, ...], str], FileParam]] = {
    (("check",), "path"): FileParam("h.edn", _EDN_CUT),
    (("check",), "html"): FileParam("page.html", b"<!-- written by coordsim check -->\n<ht", output=True),
    (("check",), "verdict"): FileParam("v.json", _JSON_CUT, output=True),
    (("shrink",), "output"): FileParam("min.py", _PY_CUT, output=True),
    (("compare",), "config_file"): FileParam("c.toml", _TOML_CUT),
    (("compare",), "latency_profile"): FileParam("p.toml", _PROFILE_CUT),
    (("compare",), "baseline"): FileParam("results.csv", _CSV_CUT),
    (("compare",), "workloads"): FileParam("w.py", _PY_CUT, late=True),
    (("run",), "scenario"): FileParam("s.py", _PY_CUT),
    (("run",), "latency_profile"): FileParam("p.toml", _PROFILE_CUT),
    (("export",), "trace"): FileParam("h.edn", _EDN_CUT),
    (("export",), "output"): FileParam("h2.edn", b"; written by coordsim export from t\n{:type :inv", output=True),
    (("isolation",), "latency_profile"): FileParam("p.toml", _PROFILE_CUT),
    (("calibrate",), "output"): FileParam("p.toml", b"# A coordsim latency profile\n[latency]\n\"oracle", output=True),
    (("calibrate",), "from_run"): FileParam("run", b'{"generator": "coordsim", "mo', dir_file="summary.json",
                                            before=("-o", "new.toml")),
    (("spark", "replay"), "traces"): FileParam("tt", b"PAR1\x15\x04", dir_file="ops.parquet"),
    (("validate",), "facts"): FileParam("f.toml", _FACTS_CUT),
    (("anomalies", "run"), "scenario_file"): FileParam("s.py", _PY_CUT),
    (("config", "show"), "config_file"): FileParam("c.toml", _TOML_CUT),
    (("config", "show"), "latency_profile"): FileParam("p.toml", _PROFILE_CUT),
    (("catalog", "dump"), "target"): FileParam("d.json", _JSON_CUT, output=True),
}

#: File parameters left out, and why.
SKIPPED: Final[dict[tuple[tuple[str, ...], str], str]] = {
    (("config", "show"), "output"): "config show writes nothing: -o is only a value it prints",
    (("config", "show"), "workloads"): "config show reads no workload: a path is only a value it prints",
}


@dataclass(frozen=True)
class _Found:
    command: tuple[str, ...]
    param: str
    flag: str | None  # None: an argument
    spec: FileParam = field(compare=False)


def file_params() -> list[_Found]:
    """Every file parameter of every (visible) command, with its treatment."""
    out = []
    for command, p, annotation in cli_params():
        text = str(annotation)
        is_file = "Path" in text or (p.name in STR_FILES and (p.name != "scenario" or command in _SCENARIO_FILE_COMMANDS))
        if not is_file or (command, p.name) in SKIPPED:
            continue
        flag = None if not p.opts[0].startswith("-") else next(o for o in p.opts if o.startswith("--"))
        spec = SPECS.get((command, p.name)) or _default(p.name, flag is None)
        out.append(_Found(command, p.name, flag, spec))
    return out


def _argv(found: _Found, path: str) -> tuple[str, ...]:
    base = BASE[found.command]
    if found.flag is None:  # an argument: in the base invocation's place for it
        given = ("t", "insert")
        args = list(base)
        for i, a in enumerate(args):
            if a in given and i > len(found.command) - 1:
                args[i] = path
                break
        else:
            args.append(path)
        return (*args, *found.spec.before)
    return (*base, found.flag, path, *found.spec.before)


def _setup(args: tuple[str, ...], dir_with: tuple[str, str, bytes] | None = None) -> Callable[[Path, Path], None]:
    """The valid trace `t` if the invocation names it, and a directory
    `dir_with` = (name, file, content) holding one file."""

    def setup(cwd: Path, valid: Path) -> None:
        if "t" in args:
            shutil.copytree(valid, cwd / "t")
        if dir_with is not None:
            name, file, content = dir_with
            (cwd / name).mkdir()
            (cwd / name / file).write_bytes(content)

    return setup


def _cases() -> list[Case]:
    out = []
    for f in file_params():
        spec = f.spec
        cid = f"{'-'.join(f.command)}-{f.flag or f.param}".replace("--", "")
        name = spec.name
        if spec.dir_file is not None:  # a directory: given a file, or holding a cut one (an output: its marker)
            bname = "bin.dat"
            args = _argv(f, name)
            cut = Case(f"{cid}-truncated", args, name, setup=_setup(args, (name, spec.dir_file, spec.truncated)))
        else:
            stem, dot, ext = name.rpartition(".")
            bname = f"{stem}-bin{dot}{ext}" if dot else f"{name}-bin"
            args = _argv(f, name)
            cut = Case(f"{cid}-truncated", args, name, files={name: spec.truncated}, setup=_setup(args))
        args = _argv(f, bname)
        binary = Case(f"{cid}-binary", args, bname, files={bname: BINARY}, setup=_setup(args))
        if spec.late:
            binary, cut = (replace(c, creates=RUNS_ROOT, then=_left_nothing) for c in (binary, cut))
        out += [binary, cut]
    return out


#: By hand: other damage than the generated cases', or through the entry point.
_BY_HAND: Final = [
    _c("validate-facts-binary-entry-point", "validate", "--facts", "f.toml", files={"f.toml": BINARY},
       expect="facts file f.toml is not UTF-8 text", entry_point=True),
    _c("validate-facts-not-utf8", "validate", "--facts", "f.toml", files={"f.toml": _NOT_UTF8},
       expect="facts file f.toml is not UTF-8 text"),
    _c("validate-facts-endless", "validate", "--facts", "/dev/zero", expect="larger than the maximum 64 MiB"),
    _c("compare-workload-toml-binary", "compare", *_V, "-w", "w.toml", files={"w.toml": BINARY},
       expect="is not UTF-8", creates=RUNS_ROOT, then=_left_nothing),
    _c("run-scenario-toml-truncated", "run", "s.toml", files={"s.toml": b'workload = "ins'}, expect="s.toml"),
    _c("calibrate-from-binary-summary", "calibrate", "--from", "run", "-o", "p.toml", setup=_run_dir(BINARY),
       expect="summary.json is unreadable"),
    # A disk full for the command alone (its RLIMIT_FSIZE: EFBIG), no mount needed;
    # test_a_full_disk_… below fills a real one (ENOSPC).
    _c("efbig-synth-trace", "synth-trace", "--ops", "2000", "-o", "st", fsize=4096, code=1, creates="st",
       expect="File too large"),
    _c("efbig-check-html", "check", "t", "--html", "page.html", setup=_trace("t", lambda d: None), fsize=2048,
       code=1, creates="page.html", expect="cannot write page.html: File too large"),
    _c("efbig-anomalies-run", "anomalies", "run", "seed001", "-o", "out", fsize=4096, code=1, creates="out",
       expect="File too large"),
]

CASES: Final = [*_cases(), *_BY_HAND]


def test_every_file_parameter_is_in_the_corpus() -> None:
    """Every command with a file parameter has a base invocation, every
    named treatment still names a parameter, and the enumeration found the
    parameters it must (so that a rename cannot empty it)."""
    found = file_params()
    missing = sorted({f.command for f in found} - set(BASE))
    assert not missing, f"add a base invocation for {missing} to BASE (tests/sim/cli/bad_input_base.py)"
    named = {(f.command, f.param) for f in found}
    assert set(SPECS) <= named, sorted(set(SPECS) - named)
    assert len(found) >= 30, len(found)
    assert len(CASES) == 2 * len(found) + len(_BY_HAND)


@pytest.mark.parametrize("case", params(CASES))
def test_a_bad_file_is_refused_in_one_line(case: Case, forker: Forker, valid_trace: Path, tmp_path: Path) -> None:
    run_case(case, forker, valid_trace, tmp_path)


# --- a full disk ---------------------------------------------------------------------------------

#: (id, invocation writing under `full/`, KiB left free there): each writes its
#: traces or results to a disk with room for its start (the output's lock and
#: marker) and not for what it writes.
_DISK_FULL: Final[list[Any]] = [
    pytest.param(name, args, free_kib, id=name, marks=marks)
    for name, args, free_kib, marks in (
        ("anomalies-run", ("anomalies", "run", "seed001", "-o", "full/out"), 16, ()),
        ("anomalies-sweep", ("anomalies", "sweep", "seed001", "--seeds", "3", "--known-bad",
                             "peeks-ignore-catalog-ts", "-o", "full/sw"), 16, ()),
        ("anomalies-matrix", ("anomalies", "matrix", "--seeds", "1", "-o", "full/m"), 16, ()),
        ("synth-trace", ("synth-trace", "--ops", "2000", "-o", "full/st"), 16, ()),
        # One cheap fact: the write that fails is the same as the quick subset's (30 s more).
        ("validate", ("validate", "--only", "idle-oracle-queries-per-second", "-o", "full/val"), 16, ()),
        ("export-edn", ("export", "t", "-f", "edn", "-o", "full/h.edn"), 8, ()),
        ("check-html", ("check", "t", "--html", "full/page.html"), 8, ()),
        ("check-verdict", ("check", "t", "--verdict", "full/v.json"), 4, ()),
        ("catalog-dump", ("catalog", "dump", "--location", "persist+mem://", "--target", "full/d.json"), 4, ()),
        ("run", ("run", "insert", *_V, "-o", "full/r"), 16, ()),
        ("compare", ("compare", *_V, "--quick", "-w", "insert", "--configs", "decoupled", "-o", "full/c"), 16,
         ()),
    )
]
_DISK_KIB: Final = 256


def _mount(where: Path, kib: int) -> None:
    """A tmpfs of `kib` KiB at `where` (root, as in CI; without the right to
    mount, the test fails and says so: the EFBIG cases above need none)."""
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=0700", "tmpfs", str(where)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.fail(f"cannot mount a {kib} KiB tmpfs for a full disk (root or CAP_SYS_ADMIN needed): {r.stderr.strip()}")


@pytest.mark.parametrize(("name", "args", "free_kib"), _DISK_FULL)
def test_a_full_disk_is_one_line_exit_1_and_leaves_nothing(
    name: str, args: tuple[str, ...], free_kib: int, forker: Forker, valid_trace: Path, tmp_path: Path
) -> None:
    """ENOSPC on a small tmpfs, nearly full of the user's file (which must
    survive). (The corpus's EFBIG cases are the same without a mount.)"""
    cwd = tmp_path / "cwd"
    full = cwd / "full"
    full.mkdir(parents=True)
    _mount(full, _DISK_KIB)
    try:
        (full / "filler").write_bytes(b"\0" * ((_DISK_KIB - free_kib) * 1024))
        case = Case(f"disk-full-{name}", args, "No space left on device", code=1, setup=_setup(args),
                    touches=("full",), progress=True)
        line = run_case(case, forker, valid_trace, tmp_path, cwd=cwd)
        assert line.startswith("coordsim: error: cannot write "), line
    finally:
        subprocess.run(["umount", str(full)], check=True)
