"""The bad-input corpus (DESIGN.md §9, issues 16 and 38): every command, given
input it must refuse, prints exactly one line on stderr, exits with the code
of its class (2 for bad input; 1 for an external dependency that failed, a
server or a full disk), shows no traceback, and changes nothing in its working
directory except, at most, the one directory it was asked to create —
`important.txt` beside it survives.

This module holds the corpus's runner (`run_case`, the fork server) and its
general cases; tests/sim/cli/test_bad_input_files.py has a binary and a truncated
file for every file option, and a full disk; test_bad_input_numbers.py a huge
and a negative number for every numeric option, and the count options' bounds.

Each case is a real process. Starting Python and importing coordsim takes
about a second, so a server process imports coordsim once and forks a child
per case (its own working directory, environment, stdout/stderr files and
exit status, exactly as `coordsim` would have them); a few cases also run the
installed entry point itself, to keep the fork honest.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import pytest

from sim.history.checker.generate import GenConfig, generate
from sim.history.traces import read_trace, write_trace

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

_IMPORTANT: Final = b"the user's notes: not coordsim's to touch\n"
_ENTRY: Final = Path(sys.executable).parent / "coordsim"
_COORDSIM: Final = [str(_ENTRY)] if _ENTRY.exists() else [sys.executable, "-c", "from sim.cli.main import main; main()"]

# The fork server: reads one JSON request per line, forks, runs the entry point in the
# child with the request's cwd/env/argv and fds 1 and 2 on files, and answers
# with the child's exit code. A child ends as the interpreter would: SystemExit
# decides the code, anything else prints its traceback and exits 1.
_SERVER: Final = textwrap.dedent(
    """
    import atexit, importlib, json, os, signal, sys, tempfile, tomllib, traceback
    sys.path[:] = [os.path.abspath(p) for p in sys.path]  # "" would follow each child's chdir
    with open("pyproject.toml", "rb") as f:  # the function the `coordsim` script calls
        module, _, name = tomllib.load(f)["project"]["scripts"]["coordsim"].partition(":")
    entry = getattr(importlib.import_module(module), name)
    import sim.cli.main  # the second of imports: once, here
    # And the modules the commands import in their bodies (the CLI starts
    # lean, so pyarrow, the sweep, the checkers... load per command): found by
    # reading sim/cli, imported once, so a case costs its command, not ~0.5 s
    # of imports. A module that fails to import is left to the child.
    import ast, pathlib
    for path in sorted(pathlib.Path("sim/cli").glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                         else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                for mod in names:
                    try:
                        importlib.import_module(mod)
                    except Exception:
                        pass

    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.alarm(req.get("alarm") or 120)  # a case that hangs dies (SIGALRM) rather than the suite
                os.chdir(req["cwd"])
                os.environ.clear()
                os.environ.update(req["env"])
                tempfile.tempdir = None
                if req.get("fsize") is not None:  # a disk full for this child alone (EFBIG)
                    import resource
                    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                    resource.setrlimit(resource.RLIMIT_FSIZE, (req["fsize"], req["fsize"]))
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                for fd, name in ((1, "stdout"), (2, "stderr")):
                    os.dup2(os.open(req[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
                sys.argv = ["coordsim", *req["args"]]
                try:
                    entry()
                    code = 0
                except SystemExit as exc:
                    if exc.code is None or isinstance(exc.code, int):
                        code = exc.code or 0
                    else:
                        print(exc.code, file=sys.stderr)
                except BaseException:
                    traceback.print_exc()
            finally:
                try:
                    atexit._run_exitfuncs()
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)
    """
)

@dataclass(frozen=True)
class Case:
    """One bad input: `args` run in a fresh directory holding `files` (and
    whatever `setup` makes); the one stderr line must contain `expect`, and
    the exit code be `code`. `fsize`: the child's RLIMIT_FSIZE in bytes (its
    writes past it fail with EFBIG), a disk that is full for it alone."""

    id: str
    args: tuple[str, ...]
    expect: str
    files: Mapping[str, bytes] = field(default_factory=dict)
    setup: Callable[[Path, Path], None] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    creates: str | None = None  # a directory the command may leave (its output)
    then: Callable[[Path], None] | None = None  # checks what it left, given the directory
    entry_point: bool = False  # run the installed `coordsim`, not a fork
    code: int = 2  # the exit code of its class (DESIGN.md §9)
    fsize: int | None = None
    #: Directories where it may create and remove entries of its own (a
    #: write that failed): only their modification time may change.
    touches: tuple[str, ...] = ()
    #: It fails after it started (a full disk): the progress it reported on
    #: stderr comes first, and the one line is the last, the only `coordsim:` one.
    progress: bool = False
    alarm: int = 120  # seconds after which a case that hangs is killed (SIGALRM)


def _c(id: str, *args: str, expect: str, **kw: object) -> Case:
    return Case(id, args, expect, **kw)  # type: ignore[arg-type]


# --- fixture files --------------------------------------------------------------------

_NOT_UTF8: Final = b'mode = "virtual"\n\xff\xfe\x00 not text\n'
def _trace(name: str, damage: Callable[[Path], object]) -> Callable[[Path, Path], None]:
    def setup(cwd: Path, valid: Path) -> None:
        shutil.copytree(valid, cwd / name)
        damage(cwd / name)

    return setup


def _mkdir_with_file(name: str) -> Callable[[Path, Path], None]:
    def setup(cwd: Path, valid: Path) -> None:
        (cwd / name).mkdir()
        (cwd / name / "notes.txt").write_text("mine\n")

    return setup


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed now: connecting is refused at once


def _partial_trace(cwd: Path) -> None:
    """The scenario's error is in the verdict, and the one operation it ran
    before failing is in the trace."""
    (out,) = [p for p in (cwd / "coordsim-out").iterdir() if p.name.startswith("run-my-")]
    assert "ZeroDivisionError" in (out / "verdict.txt").read_text()
    assert read_trace(out / "trace").history.n == 1



def _forged_output(name: str, *, old_format: bool = False) -> Callable[[Path, Path], None]:
    """A directory of the user's files under a hand-written `.coordsim-output`
    that lists them: by name only (the old format), or with made-up hashes."""

    def setup(cwd: Path, valid: Path) -> None:
        (cwd / name / "sub").mkdir(parents=True)
        (cwd / name / "results.csv").write_bytes(_IMPORTANT)
        (cwd / name / "sub" / "notes.md").write_bytes(_IMPORTANT)
        rels = ["results.csv", "sub/notes.md"]
        files: object = rels if old_format else {r: {"size": len(_IMPORTANT), "sha256": "0" * 64} for r in rels}
        doc = {"generator": "coordsim", "command": "compare", "files": files}
        (cwd / name / ".coordsim-output").write_text(json.dumps(doc))

    return setup


#: Where a command makes its run directory when not given -o.
RUNS_ROOT: Final = "coordsim-out"


def _left_nothing(cwd: Path) -> None:
    """A command that read a file only once its run had started: the run
    directory (and the runs root) it made are gone again."""
    assert not (cwd / RUNS_ROOT).exists(), sorted(p.name for p in (cwd / RUNS_ROOT).iterdir())


def _run_dir(summary: bytes) -> Callable[[Path, Path], None]:
    def setup(cwd: Path, valid: Path) -> None:
        (cwd / "run").mkdir()
        (cwd / "run" / "summary.json").write_bytes(summary)

    return setup


#: Random-looking bytes with a NUL: what a binary file given by mistake holds.
BINARY: Final = bytes(range(256)) * 8
_BINARY: Final = BINARY
#: Text files cut off mid-token.
_TRUNCATED_TOML: Final = b'[[fact]]\nid = "loop-mess'
#: What coordsim writes at the top of its files: in a user's file it proves nothing.
_LOOKS_LIKE_A_PROFILE: Final = b"# A coordsim latency profile written by `coordsim calibrate`\n[latency]\n"

_RAISES: Final = b'async def scenario(sim):\n    s = sim.session()\n    await sim.sql(s, "CREATE TABLE t (a int)")\n    1 / 0\n'
_V: Final = ("--mode", "virtual")
#: A scenario that never finishes: it waits, on the virtual clock, forever.
_WAITS_FOREVER: Final = b"import anyio\nasync def scenario(sim):\n    await anyio.sleep_forever()\n"

CASES: Final = [
    # --- compare / config show: bounds, NaN, files --------------------------------------
    _c("compare-rate-nan", "compare", *_V, "--rate", "nan", expect="--rate) must be a finite number"),
    _c("compare-rate-inf", "compare", *_V, "--rate", "inf", expect="must be a finite number"),
    _c("compare-rate-negative", "compare", *_V, "--rate", "-5", expect="must be > 0"),
    _c("compare-rate-huge", "compare", *_V, "--rate", "1e300", expect="exceeds the maximum 1e+07"),
    _c("compare-concurrency-huge", "compare", *_V, "--concurrency", "50000000",
       expect="--concurrency 50000000 exceeds the maximum 100000 clients", entry_point=True),
    _c("compare-concurrency-zero", "compare", *_V, "--concurrency", "0", expect="must be >= 1"),
    _c("compare-concurrency-not-integers", "compare", *_V, "--concurrency", "1,x", expect="must be integers"),
    _c("compare-ops-float", "compare", *_V, "--ops", "1e23", expect="--ops"),
    _c("compare-ops-huge", "compare", *_V, "--ops", "1000000000000", expect="exceeds the maximum 100000000"),
    _c("compare-ops-zero", "compare", *_V, "--ops", "0", expect="must be >= 1"),
    _c("compare-jobs-zero", "compare", *_V, "--jobs", "0", expect="--jobs must be >= 1, got 0"),
    _c("compare-jobs-huge", "compare", *_V, "--jobs", "5000", expect="--jobs 5000 exceeds the maximum 1024 worker processes"),
    _c("compare-jobs-real", "compare", "--mode", "real", "--jobs", "2",
       expect="real mode measures wall-clock throughput, so its passes run one at a time"),
    _c("compare-warmup-negative", "compare", *_V, "--warmup", "-1", expect="must be >= 0"),
    _c("compare-tables-huge", "compare", *_V, "--tables", "99999999", expect="exceeds the maximum 10000 tables"),
    _c("compare-seed-huge", "compare", *_V, "--seed", "99999999999999999999", expect="--seed"),
    _c("compare-unknown-configuration", "compare", *_V, "--configs", "bogus", expect="unknown configuration"),
    _c("compare-unknown-workload", "compare", *_V, "--workloads", "nope", expect="unknown workload"),
    _c("compare-unknown-mode", "compare", "--mode", "bogus", expect="Invalid value for '--mode'"),
    _c("compare-config-file-missing", "compare", "-c", "nope.toml", expect="cannot read config"),
    _c("compare-config-file-is-a-directory", "compare", "-c", "adir", expect="cannot read config",
       setup=lambda cwd, _: (cwd / "adir").mkdir()),
    _c("compare-config-file-not-utf8", "compare", "-c", "c.toml", files={"c.toml": _NOT_UTF8},
       expect="is not UTF-8"),
    _c("compare-config-file-bad-toml", "compare", "-c", "c.toml", files={"c.toml": b"mode = [\n"},
       expect="bad TOML"),
    _c("compare-config-file-unknown-key", "compare", "-c", "c.toml", files={"c.toml": b"bogus = 1\n"},
       expect="unknown config key"),
    _c("compare-config-file-nan-rate", "compare", "-c", "c.toml",
       files={"c.toml": b'mode = "virtual"\nopen_loop_rate = nan\n'}, expect="must be a finite number"),
    _c("compare-config-file-nan-cost", "compare", "-c", "c.toml",
       files={"c.toml": b'mode = "virtual"\n[costs]\nparse_plan = nan\n'}, expect="cost parse_plan"),
    _c("compare-config-file-infinite-interval", "compare", "-c", "c.toml",
       files={"c.toml": b'mode = "virtual"\n[overrides]\ngroup_commit_interval_s = inf\n'},
       expect="group_commit_interval_s"),
    _c("compare-config-file-huge-cores", "compare", "-c", "c.toml",
       files={"c.toml": b'mode = "virtual"\nconfigurations = ["decoupled"]\n[overrides]\ncores = 100000000\n'}, expect="exceeds the maximum 1024"),
    _c("compare-config-file-endless", "compare", "-c", "/dev/zero", expect="larger than the maximum 64 MiB"),
    _c("compare-config-file-nul-in-output", "compare", "-c", "c.toml",
       files={"c.toml": b'mode = "virtual"\noutput = "a\\u0000b"\n'}, expect="must not contain a NUL"),
    _c("compare-profile-endless", "compare", *_V, "--latency-profile", "/dev/zero", expect="larger than the maximum"),
    _c("compare-profile-not-utf8", "compare", *_V, "--latency-profile", "p.toml",
       files={"p.toml": b"[latency]\n\xff\xfe\n"}, expect="is not UTF-8"),
    _c("compare-profile-json-not-utf8", "compare", *_V, "--latency-profile", "p.json",
       files={"p.json": b'{"latency": \xff}'}, expect="is not UTF-8"),
    _c("compare-profile-json-not-an-object", "compare", *_V, "--latency-profile", "p.json",
       files={"p.json": b"[1, 2]"}, expect="has no [latency] table"),
    _c("compare-profile-latency-of-1e300-ms", "compare", *_V, "--latency-profile", "p.toml",
       files={"p.toml": b'[latency]\n"oracle.pg" = {kind = "lognormal", median_ms = 1e300, sigma = 0.5}\n'},
       expect="exceeds the maximum 8.64e+07 ms"),
    _c("compare-output-is-a-file", "compare", *_V, "--output", "important.txt", expect="is not a directory"),
    _c("compare-output-is-a-users-directory", "compare", *_V, "--output", "mine",
       setup=_mkdir_with_file("mine"), expect="was not written by coordsim"),
    _c("compare-output-unwritable", "compare", *_V, "--output", "/proc/coordsim-out", expect="not writable"),
    _c("compare-baseline-missing", "compare", *_V, "--quick", "--baseline", "nope", expect="cannot read baseline"),
    _c("config-show-concurrency-huge", "config", "show", "--concurrency", "1,200000", expect="exceeds the maximum"),
    # --- run: scenarios -----------------------------------------------------------------
    _c("run-unknown-scenario", "run", "nosuch", expect="unknown scenario"),
    _c("run-scenario-raises", "run", "my.py", files={"my.py": _RAISES}, creates="coordsim-out",
       then=_partial_trace, expect="scenario my.py:4: ZeroDivisionError: division by zero", entry_point=True),
    # A scenario's sys.exit, KeyboardInterrupt or BaseException of its own is
    # its error, not coordsim's exit (issue 38 item 5).
    _c("run-scenario-sys-exit", "run", "my.py", files={"my.py": b"import sys\nasync def scenario(sim):\n    sys.exit(3)\n"},
       creates="coordsim-out", expect="scenario my.py:3: SystemExit: 3"),
    _c("run-scenario-keyboard-interrupt", "run", "my.py",
       files={"my.py": b"async def scenario(sim):\n    raise KeyboardInterrupt\n"}, creates="coordsim-out",
       expect="scenario my.py:2: KeyboardInterrupt"),
    _c("run-scenario-base-exception", "run", "my.py",
       files={"my.py": b"class Boom(BaseException):\n    pass\nasync def scenario(sim):\n    raise Boom('x')\n"},
       creates="coordsim-out", expect="scenario my.py:4: Boom: x"),
    # A scenario that waits forever is stopped by its stuck limit: a result
    # (exit 1, with its last operations), not a hang (issue 38 item 5).
    _c("run-scenario-waits-forever", "run", "my.py", files={"my.py": _WAITS_FOREVER}, creates=RUNS_ROOT,
       code=1, alarm=30, expect="my.py: the run was stuck"),
    # One that never yields at all (it spins, or blocks the thread) holds the
    # loop, which no stuck limit can see: the loop's watchdog stops it (after
    # 10 s, so its heartbeat lines come first: `progress`).
    _c("run-scenario-never-yields", "run", "my.py", creates=RUNS_ROOT, code=1, alarm=40, progress=True,
       files={"my.py": b"async def scenario(sim):\n    while True:\n        pass\n"},
       expect="my.py: the run was stuck: the event loop made no progress"),
    _c("run-scenario-blocks-the-thread", "run", "my.py", creates=RUNS_ROOT, code=1, alarm=40, progress=True,
       files={"my.py": b"import time\nasync def scenario(sim):\n    time.sleep(10**6)\n"},
       expect="my.py: the run was stuck: the event loop made no progress"),
    _c("run-scenario-sys-exit-on-import", "run", "my.py", files={"my.py": b"import sys\nsys.exit(0)\n"},
       expect="scenario my.py:2: SystemExit: 0"),
    _c("run-scenario-raises-on-import", "run", "my.py", files={"my.py": b"x = 1\ny = x / 0\n"},
       expect="scenario my.py:2: ZeroDivisionError", entry_point=True),
    _c("run-scenario-imports-a-missing-module", "run", "my.py", files={"my.py": b"import no_such_module_xyz\n"},
       expect="scenario my.py:1: ModuleNotFoundError"),
    _c("run-scenario-syntax-error", "run", "my.py", files={"my.py": b"def scenario(:\n"}, expect="my.py"),
    _c("run-scenario-not-callable", "run", "my.py", files={"my.py": b"scenario = 3\n"}, expect="has no `async def"),
    _c("run-scenario-toml-not-utf8", "run", "s.toml", files={"s.toml": b"\xff\xfe"}, expect="is not UTF-8"),
    _c("run-scenario-toml-huge-concurrency", "run", "s.toml",
       files={"s.toml": b'workload = "insert"\nconcurrency = [50000000]\n'}, expect="exceeds the maximum 100000"),
    _c("run-scenario-toml-unknown-workload", "run", "s.toml", files={"s.toml": b'workload = "nope"\n'},
       expect="unknown workload"),
    _c("run-unknown-configuration", "run", "insert", "--config", "bogus", expect="unknown configuration"),
    _c("run-output-unwritable", "run", "insert", "--output", "/proc/x", expect="not writable"),
    # --- anomalies / shrink -------------------------------------------------------------
    _c("anomalies-unknown-scenario", "anomalies", "run", "nosuch", expect="unknown scenario"),
    _c("anomalies-size-huge", "anomalies", "run", "seed001", "--size", "1000000000000",
       expect="--size 1000000000000 exceeds the maximum 10000000"),
    _c("anomalies-clients-huge", "anomalies", "run", "seed001", "--clients", "1000000000",
       expect="--clients 1000000000 exceeds the maximum 100000 clients"),
    _c("anomalies-clients-times-size-huge", "anomalies", "run", "seed001", "--clients", "100000",
       "--size", "100000", expect="operations in one run"),
    _c("anomalies-clients-zero", "anomalies", "run", "seed001", "--clients", "0", expect="must be >= 1"),
    _c("anomalies-fault-after-the-run", "anomalies", "run", "seed001", "--faults",
       "crash-restart@99999999999ms+3ms", expect="stopped as stuck"),
    _c("anomalies-fault-factor-nan", "anomalies", "run", "seed001", "--faults", "oracle-slow@1ms+5msxnan",
       expect="factor"),
    _c("anomalies-fault-garbage", "anomalies", "run", "seed001", "--faults", "garbage", expect="bad fault"),
    _c("anomalies-fault-needs-real-mode", "anomalies", "run", "seed001", "--faults", "pg-kill@1ms",
       expect="needs --mode real"),
    _c("anomalies-seed-huge", "anomalies", "run", "seed001", "--seed", "99999999999999999999",
       expect="does not fit in 64 bits"),
    _c("anomalies-unknown-known-bad", "anomalies", "run", "seed001", "--known-bad", "nope",
       expect="unknown known-bad variant"),
    _c("anomalies-out-unwritable", "anomalies", "run", "seed001", "-o", "/proc/x", expect="not writable"),
    _c("anomalies-out-is-a-file", "anomalies", "run", "seed001", "-o", "important.txt",
       expect="is not a directory"),
    _c("anomalies-real-mode-postgres-refuses", "anomalies", "run", "seed001", "--mode", "real",
       env={"COORDSIM_POSTGRES_URL": "postgresql://coordsim:s3cret-pw@127.0.0.1:{closed_port}/postgres"},
       expect="cannot use Postgres at postgresql://coordsim:***@127.0.0.1", entry_point=True,
       code=1),  # a dead server is an external dependency that failed (issue 38 item 1)
    _c("anomalies-real-mode-postgres-url-malformed", "anomalies", "run", "seed001", "--mode", "real",
       env={"COORDSIM_POSTGRES_URL": "postgresql://coordsim:s3cret-pw@127.0.0.1:notaport/postgres"},
       expect="malformed Postgres URL 'postgresql://coordsim:***@127.0.0.1:notaport/postgres'"),
    _c("shrink-max-runs-zero", "shrink", "seed001", "--max-runs", "0", expect="--max-runs must be >= 1"),
    _c("shrink-unknown-anomaly", "shrink", "seed001", "--anomaly", "nope", expect="unknown anomaly"),
    # --- catalog ------------------------------------------------------------------------
    _c("catalog-dump-target-unwritable", "catalog", "dump", "--location", "persist+mem://", "--target",
       "/proc/x.json", expect="cannot write /proc/x.json"),
    _c("catalog-dump-target-is-a-directory", "catalog", "dump", "--location", "persist+mem://", "--target",
       "adir", setup=lambda cwd, _: (cwd / "adir").mkdir(), expect="is not a regular file"),
    _c("catalog-dump-target-is-a-users-file", "catalog", "dump", "--location", "persist+mem://", "--target",
       "important.txt", expect="was not written by coordsim"),
    _c("catalog-dump-target-in-a-missing-directory", "catalog", "dump", "--location", "persist+mem://",
       "--target", "nodir/x.json", expect="no directory"),
    _c("catalog-unknown-scheme", "catalog", "dump", "--location", "bogus://x", expect="unknown catalog URL scheme"),
    _c("catalog-edit-bad-json", "catalog", "edit", "table", "{bad", "{}", "--location", "persist+mem://",
       expect="not valid JSON"),
    _c("catalog-delete-missing-key", "catalog", "delete", "table", '{"id": 3}', "--location", "persist+mem://",
       expect="no table with key"),
    # --- synth-trace, sweep, replay -----------------------------------------------------
    _c("synth-trace-ops-negative", "synth-trace", "--ops", "-1", expect="--ops must be >= 1"),
    _c("synth-trace-ops-zero", "synth-trace", "--ops", "0", expect="--ops must be >= 1"),
    _c("synth-trace-ops-huge", "synth-trace", "--ops", "99999999999", expect="exceeds the maximum"),
    _c("synth-trace-planted-negative", "synth-trace", "--ops", "10", "--planted", "-1", expect="--planted"),
    _c("synth-trace-out-unwritable", "synth-trace", "--ops", "10", "-o", "/proc/x", expect="not writable"),
    _c("synth-trace-out-is-a-file", "synth-trace", "--ops", "10", "-o", "important.txt",
       expect="is not a directory"),
    _c("synth-trace-out-is-a-users-directory", "synth-trace", "--ops", "10", "-o", "mine",
       setup=_mkdir_with_file("mine"), expect="was not written by coordsim"),
    _c("sweep-seeds-negative", "spark", "sweep", "--seeds", "-1", "--config", "decoupled", "--scenario", "seed001",
       expect="--seeds must be >= 1"),
    _c("sweep-unknown-scenario", "spark", "sweep", "--seeds", "2", "--config", "decoupled", "--scenario", "nope",
       expect="unknown scenario"),
    _c("replay-missing-trace", "spark", "replay", "nope", expect="no trace directory"),
    _c("replay-bad-master", "spark", "replay", "t", "--master", "bogus", setup=_trace("t", lambda d: None),
       expect="is not a Spark master URL"),
    _c("replay-shuffle-partitions-zero", "spark", "replay", "t", "--shuffle-partitions", "0",
       setup=_trace("t", lambda d: None), expect="--shuffle-partitions must be >= 1"),
    # --- location, calibrate, usage ------------------------------------------------------
    _c("location-unknown-scheme", "location", "check", "bogus://x", expect="unknown blob URL scheme"),
    _c("location-no-scheme", "location", "check", "", expect="malformed URL"),
    _c("location-unknown-kind", "location", "check", "mem://", "--kind", "zzz", expect="--kind"),
    _c("calibrate-too-few-samples", "calibrate", "--samples", "1", expect="--samples must be >= 5"),
    _c("calibrate-output-not-a-profile", "calibrate", "--output", "x.txt", expect="a .toml or .json file"),
    _c("calibrate-output-is-a-users-file", "calibrate", "--output", "mine.toml",
       files={"mine.toml": b"[mine]\n"}, expect="was not written by coordsim"),
    # --- issue 38: ownership is proved by a recorded hash, never by a name or content --------
    _c("compare-output-forged-marker", "compare", *_V, "-o", "out", setup=_forged_output("out"),
       expect="results.csv (changed since coordsim wrote it)", entry_point=True),
    _c("compare-output-old-format-marker", "compare", *_V, "-o", "out", setup=_forged_output("out", old_format=True),
       expect="results.csv (listed by an older marker without hashes: not provably coordsim's)"),
    _c("synth-trace-output-forged-marker", "synth-trace", "--ops", "10", "-o", "out", setup=_forged_output("out"),
       expect="holds files coordsim may not replace"),
    _c("anomalies-output-old-format-marker", "anomalies", "run", "seed001", "-o", "out",
       setup=_forged_output("out", old_format=True), expect="holds files coordsim may not replace"),
    _c("anomalies-sweep-output-forged-marker", "anomalies", "sweep", "--scenario", "seed001", "--seeds", "2",
       "-o", "out", setup=_forged_output("out"), expect="holds files coordsim may not replace"),
    _c("validate-output-forged-marker", "validate", "--quick", "-o", "out", setup=_forged_output("out"),
       expect="holds files coordsim may not replace"),
    _c("calibrate-output-looks-like-a-profile", "calibrate", "--output", "mine.toml",
       files={"mine.toml": _LOOKS_LIKE_A_PROFILE}, expect="mine.toml exists and was not written by coordsim",
       entry_point=True),
    _c("calibrate-output-forged-record", "calibrate", "--output", "mine.toml",
       files={"mine.toml": _LOOKS_LIKE_A_PROFILE, ".coordsim-files": json.dumps({"generator": "coordsim",
              "format": 2, "files": {"mine.toml": {"size": len(_LOOKS_LIKE_A_PROFILE), "sha256": "0" * 64}}}).encode()},
       expect="changed since coordsim wrote it"),
    _c("check-html-looks-like-coordsims", "check", "t", "--html", "page.html", setup=_trace("t", lambda d: None),
       files={"page.html": b"<!-- written by coordsim check -->\n<p>mine</p>\n"}, expect="was not written by coordsim"),
    _c("check-verdict-looks-like-coordsims", "check", "t", "--verdict", "v.json", setup=_trace("t", lambda d: None),
       files={"v.json": b'{\n  "generator": "coordsim",\n  "mine": true\n}\n'}, expect="was not written by coordsim"),
    _c("catalog-dump-target-looks-like-a-dump", "catalog", "dump", "--location", "persist+mem://", "--target",
       "d.json", files={"d.json": b'{\n  "objects": {"mine": 1}}\n'}, expect="was not written by coordsim"),
    _c("export-output-looks-like-an-export", "export", "t", "-f", "edn", "-o", "h.edn",
       setup=_trace("t", lambda d: None), files={"h.edn": b"; written by coordsim export from mine\n"},
       expect="was not written by coordsim"),
    _c("unknown-command", "bogus", expect="No such command"),
    _c("unknown-option", "doctor", "--bogus", expect="No such option"),
    _c("missing-argument", "check", expect="Missing argument"),
]


# --- running --------------------------------------------------------------------------


def cli_params() -> Iterator[tuple[tuple[str, ...], Any, object]]:
    """(command path, parameter, its annotation) of every parameter of every
    command the help shows: hidden commands and options are old spellings of
    shown ones (each prints its deprecation note, by design a second line)."""
    import typer
    from typer import _click as click

    from sim.cli.main import app

    def walk(cmd: Any, path: tuple[str, ...], ctx: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
        if getattr(cmd, "hidden", False):
            return
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                yield from walk(sub, (*path, name), click.Context(sub, parent=ctx, info_name=name))
        else:
            yield path, cmd

    root = typer.main.get_command(app)
    for path, cmd in walk(root, (), click.Context(root, info_name="coordsim")):
        for p in cmd.params:
            if not getattr(p, "hidden", False):
                yield path, p, getattr(getattr(p, "type_descriptor", None), "annotation", None)


@dataclass
class Forker:
    proc: subprocess.Popen[str]

    def run(
        self, args: list[str], cwd: Path, env: Mapping[str, str], out: Path, err: Path, *,
        fsize: int | None = None, alarm: int = 120,
    ) -> int:
        req = {"args": args, "cwd": str(cwd), "env": dict(env), "stdout": str(out), "stderr": str(err),
               "fsize": fsize, "alarm": alarm}
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None
        assert stdout is not None
        stdin.write(json.dumps(req) + "\n")
        stdin.flush()
        line = stdout.readline()
        assert line, f"the fork server died (exit {self.proc.poll()})"
        rc: int = json.loads(line)["rc"]
        return rc


def start_forker() -> Iterator[Forker]:
    """The fork server, for a module-scoped `forker` fixture: `yield from` it."""
    with subprocess.Popen(
        [sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).parents[3],
    ) as proc:
        try:
            yield Forker(proc)
        finally:
            stdin: IO[str] | None = proc.stdin
            if stdin is not None:
                stdin.close()  # the server's loop ends; leaving the block waits for it
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def make_valid_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small valid trace, for a module-scoped `valid_trace` fixture."""
    d = tmp_path_factory.mktemp("valid") / "trace"
    write_trace(d, generate(GenConfig(ops=40, processes=4, seed=7)), run="bad-input", config="decoupled", seed=7)
    return d


def _snapshot(root: Path, *, with_root: bool) -> dict[str, tuple[bool, int, int]]:
    """Every path under `root` with (is a directory, size, mtime): a file
    written, replaced, removed or even created and removed again shows."""
    entries = [root, *sorted(root.rglob("*"))] if with_root else sorted(root.rglob("*"))
    out = {}
    for p in entries:
        st = p.lstat()
        out[str(p.relative_to(root))] = (p.is_dir(), 0 if p.is_dir() else st.st_size, st.st_mtime_ns)
    return out


def params(cases: list[Any]) -> list[Any]:
    """`cases` for `parametrize`, each named by its id (a `pytest.param` of
    one, marked, keeps its marks)."""
    out = []
    for c in cases:
        if isinstance(c, Case):
            out.append(pytest.param(c, id=c.id))
        else:
            (case,) = c.values
            out.append(pytest.param(case, id=case.id, marks=c.marks))
    return out


@pytest.mark.parametrize("case", params(CASES))
def test_bad_input_is_one_line_with_its_exit_code_and_changes_nothing(
    case: Case, forker: Forker, valid_trace: Path, tmp_path: Path
) -> None:
    run_case(case, forker, valid_trace, tmp_path)


def run_case(case: Case, forker: Forker, valid_trace: Path, tmp_path: Path, *, cwd: Path | None = None) -> str:
    """Runs `case` and holds it to the corpus's promise (see the module
    docstring); returns its one stderr line. `cwd`: where to run it (a small
    file system, say), else a fresh directory under `tmp_path`."""
    cwd = cwd or tmp_path / "cwd"
    tmp = tmp_path / "tmp"
    cwd.mkdir(exist_ok=True)
    tmp.mkdir()
    (cwd / "important.txt").write_bytes(_IMPORTANT)
    for name, content in case.files.items():
        (cwd / name).write_bytes(content)
    if case.setup is not None:
        case.setup(cwd, valid_trace)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDSIM_")}
    env.update({k: v.format(closed_port=_closed_port()) for k, v in case.env.items()})
    env.update({"TMPDIR": str(tmp), "COLUMNS": "200", "NO_COLOR": "1"})
    before = _snapshot(cwd, with_root=case.creates is None)

    out, err = tmp_path / "stdout", tmp_path / "stderr"
    if case.entry_point:
        with out.open("w") as fo, err.open("w") as fe:
            rc = subprocess.run(
                [*_COORDSIM, *case.args], cwd=cwd, env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                timeout=120, check=False,
            ).returncode
    else:
        rc = forker.run(list(case.args), cwd, env, out, err, fsize=case.fsize, alarm=case.alarm)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")

    story = f"coordsim {' '.join(case.args)} -> exit {rc}\nstderr:\n{stderr[-3000:]}\nstdout:\n{stdout[-1000:]}"
    assert "Traceback" not in stdout + stderr, story
    assert rc == case.code, story
    lines = stderr.splitlines()
    if case.progress:
        lines = [line for line in lines if line.startswith("coordsim:")]
        assert stderr.splitlines()[-1:] == lines, story
    assert len(lines) == 1, story
    assert lines[0].startswith(("coordsim: invalid input: ", "coordsim: error: ")), story
    assert case.expect in lines[0], story

    assert (cwd / "important.txt").read_bytes() == _IMPORTANT
    after = _snapshot(cwd, with_root=case.creates is None)
    if case.creates is not None:
        new = {p for p in after if p not in before}
        assert all(p == case.creates or p.startswith(case.creates + "/") for p in new), (story, sorted(new))
        after = {p: v for p, v in after.items() if p not in new}
    for p in case.touches:  # what is in them is compared; when they last changed is not
        before[p], after[p] = (*before[p][:2], 0), (*after[p][:2], 0)
    assert after == before, story
    assert sorted(os.listdir(tmp)) == [], f"left in TMPDIR: {sorted(os.listdir(tmp))}"
    if case.then is not None:
        case.then(cwd)
    return lines[0]
