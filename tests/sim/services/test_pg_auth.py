"""The embedded Postgres admits only coordsim's own clients (DESIGN.md §9): no
`trust`, a random password per cluster that only `url` carries, and private
(0700) directories — so another local user can no longer connect as the
superuser and run programs as the server's account (`COPY ... FROM PROGRAM`)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import asyncpg
import pytest

from sim.services import pg_initdb
from sim.services import postgres as backends
from sim.services.pg_bindir import find_postgres

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sim.services.postgres import EmbeddedPostgres

#: The reproduction from the report: as superuser, run `id` as the server's account.
EXPLOIT = "create temp table t(x text); copy t from program 'id'; select * from t"
REFUSED = ("password authentication failed", "no password supplied")


def _psql() -> str:
    """The `psql` of the server's own binaries (system or packaged), else the
    one on PATH (as the report ran it; Debian's is a wrapper that needs a
    system installation)."""
    psql = find_postgres().path / "psql"
    if psql.exists():
        return str(psql)
    found = shutil.which("psql")
    if found is None:
        pytest.fail(f"psql not found in {psql.parent} nor on PATH", pytrace=False)
    return found


def _run(argv: Sequence[str], *, password: str | None = None) -> subprocess.CompletedProcess[str]:
    """Runs a client without a terminal (its own session, stdin /dev/null), so
    it cannot prompt for a password; only `password` (if any) is offered."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if password is not None:
        env["PGPASSWORD"] = password
    return subprocess.run(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        start_new_session=True,
        cwd="/",
    )


def _assert_refused(result: subprocess.CompletedProcess[str], *reasons: str) -> None:
    assert result.returncode != 0, result
    assert "uid=" not in result.stdout, result
    assert any(r in result.stderr for r in reasons), result


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.postgres
def test_another_local_user_cannot_run_programs_as_the_server(
    private_pg: EmbeddedPostgres,
) -> None:
    """The report's reproduction, exactly (as root: `runuser -u nobody`), now
    fails to authenticate; with a guessed password too. Not root: the current
    user without a password fails the same way, over TCP and the socket."""
    pg = private_pg
    psql = _psql()
    password = urlsplit(pg.url).password
    exact = [psql, "-h", "127.0.0.1", "-p", str(pg.port), "-U", "coordsim", "-c", EXPLOIT]
    # Also into a database that exists, which is what would succeed under trust.
    tcp = [psql, "-h", "127.0.0.1", "-p", str(pg.port), "-U", "coordsim", "-d", "postgres"]
    via_socket = [psql, "-h", str(pg.socket_dir), "-p", str(pg.port), "-U", "coordsim", "-d", "postgres"]
    if os.geteuid() == 0:
        nobody = ["runuser", "-u", "nobody", "--"]
        _assert_refused(_run([*nobody, *exact]), *REFUSED)
        _assert_refused(_run([*nobody, *tcp, "-c", EXPLOIT]), *REFUSED)
        _assert_refused(
            _run([*nobody, *tcp, "-c", EXPLOIT], password="coordsim"),
            "password authentication failed",
        )
        # The unix socket: nobody cannot even reach it (0700 directory) ...
        _assert_refused(_run([*nobody, *via_socket, "-c", EXPLOIT]), "Permission denied")
        # ... and the server's own account needs the password there too (no peer/trust).
        account = backends.EmbeddedPostgres._unprivileged_user()
        assert account is not None
        server_account = ["runuser", "-u", account.pw_name, "--"]
        _assert_refused(_run([*server_account, *via_socket, "-c", EXPLOIT]), *REFUSED)
        # The control: with the cluster's password, the same client gets in.
        ok = _run([*nobody, *tcp, "-c", "select current_user"], password=password)
    else:
        _assert_refused(_run(exact), *REFUSED)
        _assert_refused(_run([*tcp, "-c", EXPLOIT]), *REFUSED)
        _assert_refused(
            _run([*tcp, "-c", EXPLOIT], password="coordsim"), "password authentication failed"
        )
        _assert_refused(_run([*via_socket, "-c", EXPLOIT]), *REFUSED)
        ok = _run([*tcp, "-c", "select current_user"], password=password)
    assert ok.returncode == 0, ok
    assert "coordsim" in ok.stdout


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_only_the_url_carries_the_password(
    private_pg: EmbeddedPostgres, pg_serializable: EmbeddedPostgres
) -> None:
    """A random password per cluster, in `url` and nowhere else we show or
    write: not `repr`, the server log, nor a leftover password file."""
    pg = private_pg
    password = urlsplit(pg.url).password
    other = urlsplit(pg_serializable.url).password
    assert password
    assert other
    assert password != other
    assert len(password) >= 24
    conn = await asyncpg.connect(pg.url)
    await conn.close()
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(pg.url.replace(password, other))
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(pg.url.replace(f":{password}@", "@"), password="")
    assert password not in repr(pg)
    assert password not in pg.log_path.read_text()
    hba = (pg.datadir / "pg_hba.conf").read_text()
    methods = {line.split()[-1] for line in hba.splitlines() if line.strip() and not line.startswith("#")}
    assert methods == {"scram-sha-256"}
    for parent, _watchdog in pg_initdb.TEMPLATE_DIRS:
        assert not (parent / "pwfile").exists()
        assert _mode(parent) == 0o700


@pytest.mark.postgres
def test_directories_are_private(private_pg: EmbeddedPostgres) -> None:
    pg = private_pg
    for path in (pg.datadir.parent, pg.datadir, pg.socket_dir):
        assert _mode(path) == 0o700, path
    if os.geteuid() == 0:  # owned by the server's account, which nobody else is
        account = backends.EmbeddedPostgres._unprivileged_user()
        assert account is not None
        for path in (pg.datadir.parent, pg.datadir, pg.socket_dir):
            assert path.stat().st_uid == account.pw_uid, path
