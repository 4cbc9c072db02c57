"""EmbeddedPostgres: starts, is configured as asked, survives crashes (pg_ctl's
immediate shutdown and a real SIGKILL of the postmaster) through `restart()`,
stops without leftovers, and fails with one actionable line when PostgreSQL is
missing. (Authentication: test_pg_auth.py; the watchdog: test_pg_watchdog.py.)"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import asyncpg
import pytest

from sim.runtime.errors import InvalidUsage
from sim.services import pg_bindir, pg_processes
from sim.services import postgres as backends
from sim.services.pg_bindir import find_postgres, find_postgres_bindir
from sim.services.postgres import BackendUnavailable, EmbeddedPostgres, postgres_server, redact_url

if TYPE_CHECKING:
    from pathlib import Path


async def _show(url: str, setting: str) -> str:
    conn = await asyncpg.connect(url)
    try:
        value: str = await conn.fetchval(f"SHOW {setting}")
        return value
    finally:
        await conn.close()


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_embedded_postgres_serves_restarts_and_stops_cleanly(
    private_pg: EmbeddedPostgres,
) -> None:
    pg = private_pg
    url = pg.url
    password = urlsplit(url).password
    assert password
    assert url == f"postgresql://coordsim:{password}@127.0.0.1:{pg.port}/postgres"
    assert pg.datadir.is_dir()
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT 1") == 1
        assert await conn.fetchval("SHOW default_transaction_isolation") == "read committed"
        assert await conn.fetchval("SHOW fsync") == "off"
        assert await conn.fetchval("SHOW listen_addresses") == "127.0.0.1"
        await conn.execute("CREATE TABLE t (x int); INSERT INTO t VALUES (42)")
    finally:
        await conn.close()

    pg.kill_server()  # like a crash: the data directory and port stay
    assert not pg.running
    with pytest.raises(ConnectionRefusedError):
        await asyncpg.connect(url, timeout=5)
    pg.restart()
    assert pg.url == url
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT x FROM t") == 42  # committed data survived
    finally:
        await conn.close()

    tmp = pg.datadir.parent
    pg.stop()
    assert not tmp.exists()
    assert not pg.running
    pg.stop()  # idempotent
    with pytest.raises(ConnectionRefusedError):  # nothing listens any more
        await asyncpg.connect(url, timeout=5)


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_serializable_option_sets_the_default_isolation(
    pg_serializable: EmbeddedPostgres,
) -> None:
    assert await _show(pg_serializable.url, "default_transaction_isolation") == "serializable"


def _postmaster_pid(pg: EmbeddedPostgres) -> int:
    with (pg.datadir / "postmaster.pid").open() as f:
        return int(f.readline())


def _alive(pid: int) -> bool:
    return pg_processes.alive(pid)


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_sigkilled_postmaster_restarts_with_its_data(private_pg: EmbeddedPostgres) -> None:
    """A real SIGKILL (no shutdown at all: stale postmaster.pid and socket lock,
    backends left to notice by themselves, shared memory still allocated), then
    `restart()` on the same port, twice; `kill_server()` + `restart()` after it
    still works, and `stop()` leaves no process of the cluster behind."""
    pg = private_pg
    url = pg.url
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE t (x int); INSERT INTO t VALUES (7)")
        for round_ in range(2):
            old = _postmaster_pid(pg)
            assert pg.sigkill_postmaster() == old
            assert [pg.running] == [False]  # (a list: mypy would narrow `running` for good)
            assert pg.sigkill_postmaster() is None  # not running: nothing to kill
            with pytest.raises(ConnectionError):  # refused, or reset by the dying postmaster
                await asyncpg.connect(url, timeout=5)
            # (`conn`'s backend may answer a moment longer, until it notices.)
            conn.terminate()
            pg.restart()
            assert pg.running
            assert pg.url == url
            assert not _alive(old)
            assert _postmaster_pid(pg) != old
            conn = await asyncpg.connect(url)
            assert await conn.fetchval("SELECT count(*) FROM t") == 1 + round_
            await conn.execute("INSERT INTO t VALUES (8)")
    finally:
        await conn.close()
    pg.kill_server()
    pg.restart()
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM t") == 3
    finally:
        await conn.close()
    datadir = pg.datadir
    pids = pg_processes.cluster_pids(datadir)
    assert _postmaster_pid(pg) in pids
    pg.stop()
    assert not any(_alive(p) for p in pids)
    assert not datadir.exists()


@pytest.mark.postgres
def test_stop_after_sigkill_without_restart_leaves_nothing(private_pg: EmbeddedPostgres) -> None:
    pg = private_pg
    pids = pg_processes.cluster_pids(pg.datadir)
    assert pids
    tmp = pg.datadir.parent
    assert pg.sigkill_postmaster() in pids
    pg.stop()
    assert not tmp.exists()
    assert not any(_alive(p) for p in pids)


@pytest.mark.postgres
def test_restart_sigkills_backends_that_linger(
    private_pg: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend that outlives its postmaster (stopped, so it cannot notice)
    holds the shared memory a new postmaster needs: after the bounded wait
    `restart()` kills it and starts anyway."""
    pg = private_pg
    pm = _postmaster_pid(pg)
    children = [p for p in pg_processes.cluster_pids(pg.datadir) if p != pm]
    assert children
    for pid in children:
        os.kill(pid, signal.SIGSTOP)
    monkeypatch.setattr(backends, "_LINGER_S", 0.2)
    pg.sigkill_postmaster()
    pg.restart()
    assert pg.running
    assert not any(_alive(p) for p in children)
    assert _postmaster_pid(pg) not in (pm, *children)


def test_find_postgres_finds_the_server_binaries() -> None:
    bindir = find_postgres().path
    assert (bindir / "initdb").exists()
    assert (bindir / "pg_ctl").exists()


def _assert_one_line(message: str) -> None:
    assert message
    assert "\n" not in message


def test_explicit_missing_bindir_is_backend_unavailable() -> None:
    pg = EmbeddedPostgres(bindir="/nonexistent")
    with pytest.raises(BackendUnavailable, match="/nonexistent") as info:
        pg.start()
    _assert_one_line(str(info.value))
    assert "COORDSIM_POSTGRES_URL" in str(info.value)
    pg.stop()  # nothing started: still fine


def test_env_bindir_is_authoritative(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDSIM_PG_BINDIR", "/nonexistent")
    with pytest.raises(BackendUnavailable, match="COORDSIM_PG_BINDIR=/nonexistent") as info:
        find_postgres_bindir()
    _assert_one_line(str(info.value))


def test_no_binaries_anywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("COORDSIM_PG_BINDIR", raising=False)
    monkeypatch.setattr("sim.services.pg_bindir.shutil.which", lambda _name: None)
    monkeypatch.setattr(pg_bindir, "_PG_LIB_ROOT", tmp_path)
    with pytest.raises(BackendUnavailable) as info:
        find_postgres_bindir()
    assert str(info.value) == (
        "PostgreSQL server binaries (initdb, pg_ctl) not found; install them "
        "(e.g. `apt-get install postgresql`) or set COORDSIM_POSTGRES_URL to an existing server"
    )


def test_postgres_server_prefers_the_env_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDSIM_POSTGRES_URL", "postgresql://u:pw@db.example:5432/x")
    monkeypatch.setenv("COORDSIM_PG_BINDIR", "/nonexistent")  # would fail if it started one
    with postgres_server(serializable=True) as url:
        assert url == "postgresql://u:pw@db.example:5432/x"


def test_url_before_start_is_misuse() -> None:
    with pytest.raises(InvalidUsage, match="not been started"):
        _ = EmbeddedPostgres().url


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("postgresql://coordsim:s3cret@127.0.0.1:5432/db", "postgresql://coordsim:***@127.0.0.1:5432/db"),
        ("postgres://u:p%40ss@h/db?sslmode=require", "postgres://u:***@h/db?sslmode=require"),
        ("postgresql://:only-pw@h/db", "postgresql://:***@h/db"),
        ("postgresql://coordsim@127.0.0.1:5432/postgres", "postgresql://coordsim@127.0.0.1:5432/postgres"),
        ("postgresql://h:5432/db", "postgresql://h:5432/db"),
        ("s3://bucket/prefix?endpoint=http://127.0.0.1:9000", "s3://bucket/prefix?endpoint=http://127.0.0.1:9000"),
        ("mem://", "mem://"),
    ],
)
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted
