"""Every documented example is run, and must exit with its documented code
(issue 37): each `Examples:` line of every command's `--help`, and every code
block of README.md and docs/*.md.

How an example documents itself:

- a shell line's exit code is 0 unless its comment says `# exit N`; a
  command that runs until interrupted says `# until Ctrl-C, then exit N`
  (it is stopped with SIGINT once it printed its first line);
- one that cannot run in CI says so where it is written: `# not in CI:
  why` after a `--help` line, `<!-- example: not-in-ci (why) -->` right
  before a code block (which may also say `exit N`, or `slow`);
- a ```sh block's lines are commands; a ```console block's `$ ` lines are
  (the rest is their output); a ```python block must run without raising; a
  ```toml block must be a valid `--config-file` (`coordsim config show -c`);
  an ```edn block is a history `coordsim check` judges (exit as documented).
  A fenced block without a language is text, not an example.

The examples of one `--help` (or one document) run in order in one fresh
directory, so a later one may use what an earlier one wrote (`-o repro.py`,
`> my.toml`, the run directories under `coordsim-out/`). Files an example
reads that none before it wrote are `FIXTURES`. Sizes that would take
minutes are cut by `SIZES`, an explicit table: the example runs as written
otherwise. `SLOW` lists the examples over ~30 s here (marked `slow`: `make
test-all` runs them).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest
import typer

from sim.cli.main import LazyGroup, app
from sim.runtime.run_dirs import ROOT_ENV, RUNS_ROOT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

REPO: Final = Path(__file__).resolve().parents[1]
DOCS: Final = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
COORDSIM: Final = Path(sys.executable).parent / "coordsim"


@dataclass(frozen=True)
class Example:
    """One documented example: `text` is a shell line (`kind` sh) or a
    block's code (python, toml, edn)."""

    where: str  # "coordsim compare --help" or "docs/guide.md:93"
    unit: str  # the examples of one unit share a directory, in order
    text: str
    kind: str = "sh"
    exit: int = 0
    not_in_ci: str | None = None
    until_ctrl_c: bool = False
    slow: bool = False

    @property
    def id(self) -> str:
        return f"{self.where}: {self.text.splitlines()[0][:90]}"


# --- what the examples need ---------------------------------------------------------------

#: Examples over ~30 s on a 2-core machine, by how their text starts: `slow`.
SLOW: Final = {
    "coordsim compare --mode real": "real mode: an embedded Postgres, wall-clock windows",
    "coordsim calibrate --from": "follows a real-mode compare",
    "coordsim isolation --mode real": "real mode",
    "coordsim anomalies matrix --seeds 100 --schedule pct": "about 1,700 seeds under pct (65 s quiet)",
    "coordsim validate --quick": "every fact's simulation (20-40 s)",
    "coordsim spark ": "starts Spark (a JVM) per example",
    "coordsim postgres start": "starts and stops an embedded Postgres",
}


def _set_flag(argv: list[str], names: tuple[str, ...], value: str, *, unless: tuple[str, ...] = ()) -> None:
    """`value` for the first of `names`: rewritten where the example gives
    it, appended where it does not (unless it gives one of `unless`)."""
    for i, a in enumerate(argv):
        if a in names and i + 1 < len(argv):
            argv[i + 1] = value
            return
        if any(a.startswith(f"{n}=") for n in names if n.startswith("--")):
            argv[i] = f"{names[0]}={value}"
            return
    if not any(a in unless or a.split("=", 1)[0] in unless for a in argv):
        argv += [names[0], value]


def _cap(argv: list[str], names: tuple[str, ...], most: int) -> None:
    for i, a in enumerate(argv[:-1]):
        if a in names and argv[i + 1].isdigit():
            argv[i + 1] = str(min(int(argv[i + 1]), most))


def _small_compare(argv: list[str]) -> None:
    own = "-c" in argv or "--config-file" in argv  # the file's workloads and levels, as they are
    if not own:
        _set_flag(argv, ("-w", "--workloads"), "select-one", unless=("-w", "--workloads"))
        _set_flag(argv, ("--concurrency",), "1,4", unless=("--concurrency",))
    if any(a in ("-T", "--duration") for a in argv):
        _set_flag(argv, ("-T", "--duration"), "0.02")
    else:
        _set_flag(argv, ("--ops",), "20", unless=("--ops",))
    _set_flag(argv, ("--repeat",), "2", unless=("--repeat",))
    if "real" not in argv:
        _set_flag(argv, ("-j", "--jobs"), "1", unless=("-j", "--jobs"))


def _small_matrix(argv: list[str], slow: bool) -> None:
    _cap(argv, ("--seeds",), 10 if slow else 2)
    if not slow:
        _set_flag(argv, ("-j", "--jobs"), "1")


def _small_isolation(argv: list[str]) -> None:
    _set_flag(argv, ("--repeat",), "2")
    _set_flag(argv, ("-T", "--duration"), "0.05")
    _set_flag(argv, ("--warmup",), "0.01")
    if "real" not in argv:
        _set_flag(argv, ("-j", "--jobs"), "1")


#: The sizes examples run at where theirs take minutes: (command, rule, why);
#: a rule gets the arguments and whether the example is `slow`. Only sizes
#: change; every other option is the example's own.
SIZES: Final[list[tuple[tuple[str, ...], Callable[[list[str], bool], None], str]]] = [
    (("compare",), lambda a, _: _small_compare(a),
     "select-one at 1 and 4 clients, 20 operations per window (--ops; a -T window 0.02 s), 2 passes, 1 worker"),
    (("isolation",), lambda a, _: _small_isolation(a), "2 passes of 0.05 s windows after 0.01 s of warm-up"),
    (("anomalies", "sweep"), lambda a, _: _cap(a, ("--seeds",), 20), "at most 20 seeds"),
    (("anomalies", "matrix"), lambda a, slow: _small_matrix(a, slow),
     "at most 2 seeds per row (a row first caught later prints \"not reached\") on 1 worker (a pool per row "
     "costs more than its seeds); a slow example: at most 10 seeds, its own workers"),
    (("spark", "sweep"), lambda a, _: _cap(a, ("--seeds",), 4), "at most 4 seeds"),
    (("synth-trace",), lambda a, _: _cap(a, ("--ops",), 20_000), "at most 20,000 operations"),
]

#: Paths: outside the example's directory, moved into it; of the checkout, made absolute.
PATHS: Final = {"file:///tmp/blobs": "file://{cwd}/blobs", "tests/data/": "{repo}/tests/data/"}

_SCENARIO: Final = '''\
async def scenario(sim):
    s = sim.session("c1")
    await sim.sql(s, "CREATE TABLE t (a int)")
    await sim.sql(s, "INSERT INTO t VALUES (1)")
    await sim.sql(s, "SELECT * FROM t")
'''


@dataclass
class _Fixtures:
    """Made once per session, copied into each directory that needs them."""

    root: Path
    made: dict[str, Path] = field(default_factory=dict)


#: Files examples read that no example before them writes: name -> how it is made.
FIXTURES: Final[dict[str, str]] = {
    RUNS_ROOT: "a runs root: a small compare (latest-compare), then `anomalies run seed001` (latest)",
    "repro.py": "`coordsim shrink seed001 --known-bad peeks-ignore-catalog-ts -o repro.py`",
    "my-scenario.py": "a three-statement scenario file (`async def scenario(sim)`)",
    "my-profile.toml": "the shipped latency profile",
    "history.edn": "tests/data/histories/concurrent-valid.edn",
    "histories": "two valid EDN histories of tests/data/histories",
}
#: `$COORDSIM_POSTGRES_URL`, for the examples that name it: a fresh database on
#: the test Postgres whose stash catalogs (environments default and prod) were
#: opened once and hold one table, as a coordinator leaves them.
CATALOG_ENVS: Final = ("default", "prod")


def _make_fixture(name: str, fx: _Fixtures) -> Path:
    if name in fx.made:
        return fx.made[name]
    home = fx.root / name.replace("/", "_")
    home.mkdir()
    path = home / name
    if name == RUNS_ROOT:
        for argv in (["compare", "--quick"], ["anomalies", "run", "seed001", "--seed", "3"]):
            if argv[0] == "compare":
                _small_compare(argv)
            rc, out, err = _in_process(argv, home, {})
            assert rc == 0, f"fixture coordsim {shlex.join(argv)}: exit {rc}\n{out[-2000:]}\n{err[-2000:]}"
    elif name == "repro.py":
        argv = ["shrink", "seed001", "--known-bad", "peeks-ignore-catalog-ts", "-o", "repro.py"]
        rc, out, err = _in_process(argv, home, {})
        assert rc == 1, f"fixture coordsim {shlex.join(argv)}: exit {rc}\n{out[-2000:]}\n{err[-2000:]}"
    elif name == "my-scenario.py":
        path.write_text(_SCENARIO)
    elif name == "my-profile.toml":
        shutil.copy(REPO / "sim" / "model" / "profiles" / "default.toml", path)
    elif name == "history.edn":
        shutil.copy(REPO / "tests" / "data" / "histories" / "concurrent-valid.edn", path)
    elif name == "histories":
        path.mkdir()
        for h in ("concurrent-valid.edn", "recreate-valid.edn"):
            shutil.copy(REPO / "tests" / "data" / "histories" / h, path / h)
    fx.made[name] = path
    return path


_WRITERS: Final = ("compare", "run", "validate", "isolation", "anomalies", "spark", "synth-trace")


def _writes(text: str, name: str) -> bool:
    """Whether example `text` writes `name` (an output option, a redirection,
    or, for the runs root, a run directory of a command writing one)."""
    words = text.split()
    if name == RUNS_ROOT:
        argv = _argv(text)
        return bool(argv) and argv[0] in _WRITERS and not {"-o", "--output"} & set(argv)
    return any(w == name and i > 0 and words[i - 1] in ("-o", "--output", ">", "--target")
               for i, w in enumerate(words))


def _argv(text: str) -> list[str]:
    """A shell line's coordsim arguments ([] if it runs something else)."""
    words = [w for w in shlex.split(text, comments=True) if not re.fullmatch(r"[A-Z_]+=.*", w)]
    if words[:2] == ["uv", "run"]:
        words = words[2:]
    return words[1:] if words[:1] == ["coordsim"] else []


# --- collecting ---------------------------------------------------------------------------


def _comment(line: str) -> tuple[str, str]:
    """(command, comment) of a shell line; a `#` inside quotes is not one."""
    in_quote = None
    for i, ch in enumerate(line):
        if in_quote:
            in_quote = None if ch == in_quote else in_quote
        elif ch in "'\"":
            in_quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def _sh(where: str, unit: str, line: str, **marks: Any) -> Example:
    command, comment = _comment(line)
    if m := re.match(r"exit (\d+)\b", comment):
        marks["exit"] = int(m[1])
    elif m := re.match(r"until Ctrl-C, then exit (\d+)\b", comment):
        marks.update(exit=int(m[1]), until_ctrl_c=True)
    elif m := re.match(r"not in CI: (.+)", comment):
        marks["not_in_ci"] = m[1]
    slow = next((why for start, why in SLOW.items() if command.startswith(start)), None)
    return Example(where, unit, command, slow=marks.pop("slow", False) or slow is not None, **marks)


def _help_examples() -> list[Example]:
    root = typer.main.get_command(app)
    assert isinstance(root, LazyGroup)
    root.load_all()
    found: list[Example] = []

    def walk(path: str, cmd: Any) -> None:
        if getattr(cmd, "hidden", False):
            return  # a deprecated name: its examples are its new name's
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            walk(f"{path} {name}", sub)
        text = (cmd.help or "").replace("\b\n", "")
        if "Examples:" not in text:
            return
        where = f"{path} --help"
        for line in text.split("Examples:", 1)[1].splitlines():
            if line.startswith("  ") and line.strip():
                found.append(_sh(where, where, line.strip()))
            elif line.strip():
                break

    walk("coordsim", root)
    return found


_MARK: Final = re.compile(r"<!--\s*example:\s*(.*?)\s*-->")
_LANGS: Final = {"sh": "sh", "bash": "sh", "shell": "sh", "console": "console", "python": "python",
                 "toml": "toml", "edn": "edn", "clojure": "edn"}


def _marks(text: str) -> dict[str, Any]:
    marks: dict[str, Any] = {}
    for item in (i.strip() for i in re.split(r",\s*(?![^()]*\))", text)):
        if m := re.fullmatch(r"exit (\d+)", item):
            marks["exit"] = int(m[1])
        elif m := re.fullmatch(r"not-in-ci \((.+)\)", item):
            marks["not_in_ci"] = m[1]
        elif item == "slow":
            marks["slow"] = True
        else:
            raise AssertionError(f"unknown example mark {item!r} (exit N, not-in-ci (why), slow)")
    return marks


def _indented_kind(code: str) -> str:
    first = code.lstrip().splitlines()[0]
    if first.startswith("$ "):
        return "console"
    if re.match(r"(from |import |async def |def |@)", first):
        return "python"
    if first.startswith("[") or re.match(r"[\w.\"-]+ = ", first):
        return "toml"
    if first.startswith("{:"):
        return "edn"
    return "sh"


def _doc_examples(doc: Path) -> list[Example]:
    rel = str(doc.relative_to(REPO))
    lines = doc.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^(\s*)```(\S*)\s*$", line)
        indented = (line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip())
                    and not _in_list(lines, i))
        if not fence and not indented:
            i += 1
            continue
        start = i
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        m = _MARK.fullmatch(prev.strip())
        marks = _marks(m[1]) if m else {}
        if fence:
            lang = fence[2]
            j = i + 1
            while not lines[j].strip().startswith("```"):
                j += 1
            code = "\n".join(lines[i + 1 : j])
            i = j + 1
            if lang == "" and code.startswith("$ "):
                lang = "console"  # a transcript: its `$ ` lines are commands
            if lang in ("", "text"):
                assert not m, f"{rel}:{start + 1}: a mark on a text block"
                continue
            assert lang in _LANGS, f"{rel}:{start + 1}: unknown example language {lang!r}"
            kind = _LANGS[lang]
        else:
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            code = "\n".join(ln[4:] for ln in lines[i:j]).strip("\n")
            i = j
            kind = _indented_kind(code)
        where = f"{rel}:{start + 1}"
        if kind in ("sh", "console"):
            for cmd in _commands(code, console=kind == "console"):
                found.append(_sh(where, rel, cmd, **marks))
        else:
            found.append(Example(where, rel, code, kind=kind, **marks))
    return found


def _in_list(lines: list[str], i: int) -> bool:
    """Whether line `i` continues a list item (indented text, not code)."""
    for j in range(i - 1, -1, -1):
        if not lines[j].strip():
            continue
        return bool(re.match(r"\s*([-*]|\d+\.)\s", lines[j])) or (lines[j].startswith("  ") and _in_list(lines, j))
    return False


def _commands(code: str, *, console: bool) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", code)
    out = []
    for line in joined.splitlines():
        if console:
            if line.startswith("$ "):
                out.append(line[2:])
        elif line.strip() and not line.lstrip().startswith("#"):
            out.append(line.strip())
    return out


EXAMPLES: Final = [*_help_examples(), *(e for doc in DOCS for e in _doc_examples(doc))]


def _param(e: Example) -> Any:
    marks = [pytest.mark.slow, pytest.mark.timeout(900)] if e.slow else []
    if e.text.startswith("coordsim spark "):
        marks.append(pytest.mark.spark)
    if "COORDSIM_POSTGRES_URL" in e.text or e.text.startswith("coordsim postgres") or "--mode real" in e.text:
        marks.append(pytest.mark.postgres)
    return pytest.param(e, id=e.id, marks=marks)


# --- running ------------------------------------------------------------------------------


@contextlib.contextmanager
def _environment(cwd: Path, env: dict[str, str]) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        mp.delenv(ROOT_ENV, raising=False)  # runs go to ./coordsim-out, as the examples say
        for k, v in env.items():
            mp.setenv(k, v)
        yield


def _in_process(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """`coordsim ARGV` through its entry point in this process: (exit, stdout, stderr)."""
    from sim.cli import main as cli
    from sim.runtime import interrupts

    out, err = io.StringIO(), io.StringIO()
    with _environment(cwd, env), pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["coordsim", *argv])
        mp.setattr(interrupts, "install", lambda **_: None)  # pytest keeps its own signal handlers
        # As under the `coordsim` script: worker processes (forkserver, spawn)
        # re-import the parent's __main__, which here would be pytest's.
        mp.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
                code: int | str | None = 0
            except SystemExit as exc:
                code = exc.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out.getvalue(), err.getvalue()


def _subprocess(argv: list[str], cwd: Path, env: dict[str, str], *, until_ctrl_c: bool) -> tuple[int, str, str]:
    """`coordsim ARGV` as a program: for Spark (a JVM per run) and for one that
    runs until Ctrl-C (SIGINT once it printed a line)."""
    full = {k: v for k, v in os.environ.items() if k != ROOT_ENV} | env
    with subprocess.Popen([str(COORDSIM), *argv], cwd=cwd, env=full, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None
        first = ""
        if until_ctrl_c:
            first = p.stdout.readline()
            p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=600)
    return p.returncode, first + out, err


def _run_sh(e: Example, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    command = e.text
    for old, new in PATHS.items():
        command = command.replace(old, new.format(cwd=cwd, repo=REPO))
    redirect = None
    if m := re.fullmatch(r"(.*?)\s+>\s*(\S+)", command):
        command, redirect = m[1], m[2]
    words = shlex.split(os.path.expandvars(_expand(command, env)))
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        k, _, v = words.pop(0).partition("=")
        env = {**env, k: v}
    if words[:2] == ["uv", "run"]:
        words = words[2:]
    assert words[:1] == ["coordsim"], f"{e.where}: `{e.text}` is not a coordsim command; mark it not-in-ci"
    argv = words[1:]
    for prefix, rule, _why in SIZES:
        if tuple(argv[: len(prefix)]) == prefix:
            rule(argv, e.slow)
    if argv[:1] == ["spark"] or e.until_ctrl_c:
        rc, out, err = _subprocess(argv, cwd, env, until_ctrl_c=e.until_ctrl_c)
    else:
        rc, out, err = _in_process(argv, cwd, env)
    if redirect is not None:
        (cwd / redirect).write_text(out)
    return rc, f"$ coordsim {shlex.join(argv)}\n{out}", err


def _expand(command: str, env: dict[str, str]) -> str:
    for k, v in env.items():
        command = command.replace(f"${k}", v).replace(f"${{{k}}}", v)
    return command


def _run(e: Example, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    if e.kind == "sh":
        return _run_sh(e, cwd, env)
    if e.kind == "python":
        with _environment(cwd, env):
            try:
                exec(compile(e.text, e.where, "exec"), {"__name__": "__example__"})
            except Exception as exc:
                return 1, "", f"{type(exc).__name__}: {exc!r}"
        return 0, "", ""
    name, argv = {"toml": ("example.toml", ["config", "show", "-c"]), "edn": ("example.edn", ["check"])}[e.kind]
    (cwd / name).write_text(e.text + "\n")
    return _in_process([*argv, name], cwd, env)


def _seed_catalogs(url: str) -> None:
    from catalog.objects import Column
    from catalog.open import open_catalog
    from sim.runtime.core import Runtime, run

    async def main(rt: Runtime) -> None:
        for env in CATALOG_ENVS:
            async with open_catalog(f"stash+{url}{'&' if '?' in url else '?'}env={env}", rt) as c:
                await c.open()
                tx = c.transaction()
                tx.create_table(1, "orders", [Column("id", "int", False)])
                await c.commit_transaction(tx)

    run(main, virtual=False, seed=1)


@dataclass
class _Unit:
    cwd: Path
    env: dict[str, str]
    done: set[int] = field(default_factory=set)


@pytest.fixture(scope="session")
def example_fixtures(tmp_path_factory: pytest.TempPathFactory) -> _Fixtures:
    return _Fixtures(tmp_path_factory.mktemp("example-fixtures"))


@pytest.fixture(scope="session")
def example_units() -> dict[str, _Unit]:
    return {}


def _unit(e: Example, units: dict[str, _Unit], fx: _Fixtures, request: pytest.FixtureRequest) -> _Unit:
    if e.unit in units:
        return units[e.unit]
    cwd = fx.root.parent / f"example-{len(units)}"
    cwd.mkdir()
    mine = [x for x in EXAMPLES if x.unit == e.unit and x.not_in_ci is None]
    for name in FIXTURES:
        for i, x in enumerate(mine):
            # The runs root is read by the example that names it even if it writes a run there too.
            itself = _writes(x.text, name) and name != RUNS_ROOT
            if name in x.text and not any(_writes(y.text, name) for y in mine[:i]) and not itself:
                src = _make_fixture(name, fx)
                (shutil.copytree(src, cwd / name, symlinks=True) if src.is_dir() else shutil.copy(src, cwd / name))
                break
    env = {}
    if any("COORDSIM_POSTGRES_URL" in x.text for x in mine):
        from sim.load.harness import fresh_database

        env["COORDSIM_POSTGRES_URL"] = url = asyncio.run(fresh_database(request.getfixturevalue("pg_url")))
        _seed_catalogs(url)
    units[e.unit] = _Unit(cwd, env)
    return units[e.unit]


def _check(e: Example, unit: _Unit) -> None:
    rc, out, err = _run(e, unit.cwd, unit.env)
    unit.done.add(EXAMPLES.index(e))
    assert rc == e.exit, (
        f"{e.where}: `{e.text}` exited {rc}, documented {e.exit}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    )
    assert "Traceback" not in err, err[-3000:]


@pytest.mark.parametrize("example", [_param(e) for e in EXAMPLES if e.not_in_ci is None])
def test_the_documented_example_runs(
    example: Example, example_units: dict[str, _Unit], example_fixtures: _Fixtures, request: pytest.FixtureRequest
) -> None:
    unit = _unit(example, example_units, example_fixtures, request)
    # What ran before it in its unit, if that did not run as a test of its own
    # (selected alone, or the slow ones left out): a slow one only before a slow one.
    for before in EXAMPLES[: EXAMPLES.index(example)]:
        k = EXAMPLES.index(before)
        if before.unit == example.unit and before.not_in_ci is None and k not in unit.done:
            if before.slow and not example.slow:
                continue
            _check(before, unit)
    _check(example, unit)


def test_examples_are_found_and_marked() -> None:
    """The collection finds the examples it must, and a mark that cannot run
    in CI says why."""
    where = {e.where for e in EXAMPLES}
    assert {"coordsim compare --help", "coordsim catalog edit --help", "coordsim spark replay --help",
            "coordsim shrink --help"} <= where
    assert any(e.unit == "docs/guide.md" and "latest-compare" in e.text for e in EXAMPLES)
    assert any(e.text == "coordsim compare --quick --baseline coordsim-out/latest-compare" for e in EXAMPLES)
    assert all(e.not_in_ci.strip() for e in EXAMPLES if e.not_in_ci is not None)
    # Every command's help shows an example, and each one runs (or says why it cannot).
    assert not [e for e in EXAMPLES if e.kind == "sh" and e.not_in_ci is None and not _argv(e.text)]
