"""PostgresConsensus: the contract on a real server, racing under SERIALIZABLE,
and the error tiers when the server dies or kills our sessions."""

from __future__ import annotations

import asyncio
import socket
import uuid
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from persist.location import CaSResult, SeqNo, VersionedData
from persist.postgres import PostgresConsensus
from sim.runtime.errors import Determinate, ExternalError, Indeterminate, InvalidUsage
from sim.runtime.pg import Isolation, classify_failure, with_isolation
from sim.runtime.pgclient import PostgresPool
from sim.runtime.urls import with_query_param
from sim.services.postgres import postgres_url_from_env

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sim.services.postgres import EmbeddedPostgres

T = TypeVar("T")


def _key(tag: str) -> str:
    return f"test-{tag}-{uuid.uuid4().hex[:12]}"


def _vd(seqno: int, data: bytes | str) -> VersionedData:
    return VersionedData(SeqNo(seqno), data.encode() if isinstance(data, str) else data)


async def _retry_determinate(op: Callable[[], Awaitable[T]], attempts: int = 20) -> T:
    """Retries an operation whose failures must all be `Determinate` (safe to retry)."""
    for _ in range(attempts - 1):
        try:
            return await op()
        except Determinate:
            continue
    return await op()


async def _write_log(c: PostgresConsensus, key: str, n: int) -> list[VersionedData]:
    entries = [_vd(i, f"{key}:{i}") for i in range(n)]
    expected: SeqNo | None = None
    for e in entries:
        assert await c.compare_and_set(key, expected, e) is CaSResult.COMMITTED
        expected = e.seqno
    return entries


# --- the contract, against the shared server ---------------------------------------------


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_cas_winner_loser_and_head(pg_url: str) -> None:
    async with await PostgresConsensus.open(pg_url) as c:
        key = _key("cas")
        assert await c.head(key) is None
        assert await c.compare_and_set(key, None, _vd(0, "first")) is CaSResult.COMMITTED
        assert await c.head(key) == _vd(0, "first")
        assert await c.compare_and_set(key, None, _vd(0, "again")) is CaSResult.EXPECTATION_MISMATCH
        assert await c.compare_and_set(key, SeqNo(4), _vd(5, "stale")) is CaSResult.EXPECTATION_MISMATCH
        assert await c.head(key) == _vd(0, "first")
        assert await c.compare_and_set(key, SeqNo(0), _vd(1, "second")) is CaSResult.COMMITTED
        assert await c.compare_and_set(key, SeqNo(0), _vd(1, "loser")) is CaSResult.EXPECTATION_MISMATCH
        assert await c.head(key) == _vd(1, "second")
        big = bytes(range(256)) * 4096  # 1 MiB, every byte value
        assert await c.compare_and_set(key, SeqNo(1), _vd(2, big)) is CaSResult.COMMITTED
        assert await c.head(key) == _vd(2, big)
        assert await c.head(_key("other")) is None


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_scan_order_and_limit(pg_url: str) -> None:
    async with await PostgresConsensus.open(pg_url) as c:
        key = _key("scan")
        entries = await _write_log(c, key, 10)
        assert await c.scan(key, SeqNo(0), 100) == entries
        assert await c.scan(key, SeqNo(0), 3) == entries[:3]
        assert await c.scan(key, SeqNo(4), 3) == entries[4:7]
        assert await c.scan(key, SeqNo(9), 5) == entries[9:]
        assert await c.scan(key, SeqNo(10), 5) == []
        assert await c.scan(key, SeqNo(2**64), 5) == []
        assert await c.scan(key, SeqNo(0), 2**70) == entries
        assert await c.scan(_key("none"), SeqNo(0), 5) == []


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_truncate_semantics_and_refusals(pg_url: str) -> None:
    async with await PostgresConsensus.open(pg_url) as c:
        key = _key("truncate")
        entries = await _write_log(c, key, 10)
        assert await c.truncate(key, SeqNo(5)) == 5
        assert await c.truncate(key, SeqNo(5)) == 0  # idempotent
        assert await c.truncate(key, SeqNo(3)) == 0
        assert await c.scan(key, SeqNo(0), 100) == entries[5:]
        with pytest.raises(InvalidUsage, match="above the head v9"):
            await c.truncate(key, SeqNo(10))
        with pytest.raises(InvalidUsage, match="above the head"):
            await c.truncate(key, SeqNo(2**64))
        with pytest.raises(InvalidUsage, match="never written"):
            await c.truncate(_key("never"), SeqNo(0))
        assert await c.scan(key, SeqNo(0), 100) == entries[5:]  # refusals deleted nothing
        assert await c.truncate(key, SeqNo(9)) == 4
        assert await c.head(key) == entries[9]
        assert await c.scan(key, SeqNo(0), 100) == entries[9:]
        assert await c.compare_and_set(key, SeqNo(9), _vd(10, "after")) is CaSResult.COMMITTED


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_misuse_is_invalid_usage(pg_url: str) -> None:
    async with await PostgresConsensus.open(pg_url) as c:
        key = _key("misuse")
        with pytest.raises(InvalidUsage):
            await c.head("")
        with pytest.raises(InvalidUsage):
            await c.head("k" * 257)
        with pytest.raises(InvalidUsage):
            await c.compare_and_set(key, None, _vd(1, "gap"))
        with pytest.raises(InvalidUsage):
            await c.compare_and_set(key, SeqNo(3), _vd(5, "gap"))
        with pytest.raises(InvalidUsage):
            await c.compare_and_set(key, SeqNo(3), _vd(3, "same"))
        with pytest.raises(InvalidUsage):
            await c.compare_and_set(key, SeqNo(2**63 - 1), _vd(2**63, "overflow"))
        with pytest.raises(InvalidUsage):
            await c.scan(key, SeqNo(0), 0)
        assert await c.head(key) is None  # nothing reached the table
    with pytest.raises(InvalidUsage):
        await c.head(key)  # closed
    with pytest.raises(InvalidUsage):
        await PostgresConsensus.open(pg_url, pool_size=0)


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_concurrent_opens_tolerate_the_table_race(pg_url: str) -> None:
    """Eight processes starting at once on a fresh database all open successfully
    (CREATE TABLE IF NOT EXISTS races raise unique/duplicate errors in Postgres)."""
    database = f"coordsim_open_race_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f"CREATE DATABASE {database}")
    url = urlunsplit(urlsplit(pg_url)._replace(path=f"/{database}"))
    try:
        for _ in range(3):
            results = await asyncio.gather(
                *(PostgresConsensus.open(url, pool_size=1) for _ in range(8)),
                return_exceptions=True,
            )
            for r in results:
                if isinstance(r, PostgresConsensus):
                    await r.close()
            assert [r for r in results if not isinstance(r, PostgresConsensus)] == []
            fresh = await asyncpg.connect(url)
            await fresh.execute("DROP TABLE consensus")
            await fresh.close()
    finally:
        await admin.execute(f"DROP DATABASE {database}")
        await admin.close()


@pytest.mark.asyncio
async def test_open_unreachable_is_one_line_determinate_without_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://someone:hunter2@127.0.0.1:{port}/db?connect_timeout=5"
    with pytest.raises(Determinate) as info:
        await PostgresConsensus.open(url)
    message = str(info.value)
    assert f"postgresql://someone:***@127.0.0.1:{port}/db" in message
    assert "hunter2" not in message
    assert "\n" not in message
    assert isinstance(info.value.__cause__, OSError)


# --- racing writers ----------------------------------------------------------------------


async def _race(url: str, racers: int, target: int) -> tuple[dict[int, bytes], list[Determinate]]:
    """`racers` tasks CaS one key until it holds `target` entries, retrying
    Determinate failures. Returns the reported winners and the failures."""
    key = _key("race")
    committed: dict[int, bytes] = {}
    double_wins: list[int] = []
    failures: list[Determinate] = []
    async with await PostgresConsensus.open(url, pool_size=racers) as c:

        async def racer(r: int) -> None:
            attempt = 0
            while True:
                head = await _retry_determinate(lambda: c.head(key))
                if head is not None and head.seqno.value + 1 >= target:
                    return
                expected = None if head is None else head.seqno
                new = _vd(0 if expected is None else expected.value + 1, f"r{r}-{attempt}")
                attempt += 1
                try:
                    result = await c.compare_and_set(key, expected, new)
                except Determinate as exc:
                    failures.append(exc)
                    continue
                if result is CaSResult.COMMITTED:
                    if new.seqno.value in committed:
                        double_wins.append(new.seqno.value)
                    committed[new.seqno.value] = new.data

        async with asyncio.TaskGroup() as tg:
            for r in range(racers):
                tg.create_task(racer(r))

        assert not double_wins, f"two writers won seqnos {double_wins}"
        log = await _retry_determinate(lambda: c.scan(key, SeqNo(0), target + 10))
    assert [e.seqno.value for e in log] == list(range(target)), "the log is gap-free"
    assert sorted(committed) == list(range(target)), "every seqno has exactly one reported winner"
    for e in log:
        assert e.data == committed[e.seqno.value], f"{e.seqno} holds its winner's value"
    return committed, failures


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_race_read_committed_has_one_winner_per_seqno(pg_url: str) -> None:
    _, failures = await _race(with_isolation(pg_url, Isolation.READ_COMMITTED), racers=16, target=24)
    # Under READ COMMITTED losers see "0 rows", never an error (an env URL may be
    # CockroachDB, whose losers may get 40001 instead).
    if postgres_url_from_env() is None:
        assert failures == []


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_race_serializable_has_one_winner_per_seqno(
    pg_serializable: EmbeddedPostgres,
) -> None:
    _, failures = await _race(pg_serializable.url, racers=32, target=24)
    assert failures, "32 racers under SERIALIZABLE should hit serialization failures"
    for exc in failures:
        assert isinstance(exc.__cause__, asyncpg.PostgresError)
        assert exc.__cause__.sqlstate in ("40001", "40P01"), exc
        assert "SQLSTATE 40001" in str(exc) or "SQLSTATE 40P01" in str(exc)


# --- the server fails under us -----------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_server_killed_then_restarted(private_pg: EmbeddedPostgres) -> None:
    key = _key("killed")
    async with await PostgresConsensus.open(private_pg.url, pool_size=2) as c:
        entries = await _write_log(c, key, 3)
        private_pg.kill_server()

        with pytest.raises(Determinate) as read_failure:
            await c.head(key)
        assert "\n" not in str(read_failure.value)
        with pytest.raises(ExternalError) as write_failure:
            await c.compare_and_set(key, SeqNo(2), _vd(3, "while-down"))
        assert isinstance(write_failure.value, Determinate | Indeterminate)
        cause = write_failure.value.__cause__
        assert isinstance(cause, asyncpg.PostgresError | asyncpg.InterfaceError | OSError)
        with pytest.raises(Determinate):
            await c.scan(key, SeqNo(0), 10)

        private_pg.restart()
        assert await _retry_determinate(lambda: c.head(key), attempts=3) == entries[-1]
        assert await c.compare_and_set(key, SeqNo(2), _vd(3, "after")) is CaSResult.COMMITTED
        assert await c.scan(key, SeqNo(0), 10) == [*entries, _vd(3, "after")]


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_terminated_backends_fail_with_external_errors_only(
    pg_serializable: EmbeddedPostgres,
) -> None:
    """A single writer CaS-es while its sessions are killed (pg_terminate_backend).
    Every failure must be an ExternalError, a Determinate one must really not have
    applied, and the final log must be exactly what the writer committed."""
    app = f"coordsim-{uuid.uuid4().hex[:8]}"
    key = _key("terminate")
    admin = await asyncpg.connect(pg_serializable.url)
    attempt_started = asyncio.Event()
    done = False
    killed = 0
    seen: dict[str, int] = {"determinate": 0, "indeterminate": 0}
    committed: list[VersionedData] = []

    async def terminator() -> None:
        nonlocal killed
        while True:
            await attempt_started.wait()
            attempt_started.clear()
            if done:
                return
            killed += await admin.fetchval(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = $1) AS t",
                app,
            )

    async def writer(c: PostgresConsensus) -> None:
        attempt = 0
        for i in range(30):
            expected = committed[-1].seqno if committed else None
            new = _vd(i, f"w{i}")
            while True:
                attempt += 1
                if attempt % 2:  # every other attempt races a kill; the others can finish
                    attempt_started.set()
                try:
                    result = await c.compare_and_set(key, expected, new)
                except Determinate:
                    seen["determinate"] += 1
                    head = await _retry_determinate(lambda: c.head(key))
                    assert head == (committed[-1] if committed else None), "Determinate but applied"
                    continue
                except Indeterminate:
                    seen["indeterminate"] += 1
                    head = await _retry_determinate(lambda: c.head(key))
                    if head != new:
                        assert head == (committed[-1] if committed else None)
                        continue
                    result = CaSResult.COMMITTED
                assert result is CaSResult.COMMITTED
                committed.append(new)
                break

    try:
        async with await PostgresConsensus.open(
            with_query_param(pg_serializable.url, "application_name", app), pool_size=2
        ) as c:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(terminator())
                await writer(c)
                done = True
                attempt_started.set()
            assert await _retry_determinate(lambda: c.head(key)) == committed[-1]
            assert await _retry_determinate(lambda: c.scan(key, SeqNo(0), 100)) == committed
    finally:
        await admin.close()
    assert killed > 0
    assert seen["determinate"] + seen["indeterminate"] > 0, seen


# --- classification, on synthetic driver errors ------------------------------------------

_DETERMINATE_WRITE_FAILURES: list[BaseException] = [
    asyncpg.SerializationError("could not serialize access"),
    asyncpg.DeadlockDetectedError("deadlock detected"),
    asyncpg.CannotConnectNowError("the database system is starting up"),
    asyncpg.TooManyConnectionsError("too many clients"),
    asyncpg.ClientCannotConnectError("cannot connect"),
    asyncpg.ConnectionRejectionError("rejected"),
    asyncpg.InterfaceError("connection is closed"),
    asyncpg.InterfaceError("cannot perform operation: connection is closed"),
]

_INDETERMINATE_WRITE_FAILURES: list[BaseException] = [
    asyncpg.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.QueryCanceledError("canceling statement due to statement timeout"),
    asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.ConnectionFailureError("connection failure"),
    asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
    asyncpg.UniqueViolationError("duplicate key"),
    asyncpg.PostgresError("unknown"),
    asyncpg.InternalClientError("protocol confusion"),
    TimeoutError(),
    ConnectionResetError(104, "Connection reset by peer"),
    OSError("anything else"),
]


@pytest.mark.parametrize("exc", _DETERMINATE_WRITE_FAILURES, ids=lambda e: type(e).__name__)
def test_allow_listed_write_failures_are_determinate(exc: BaseException) -> None:
    assert classify_failure(exc, write=True) is Determinate


@pytest.mark.parametrize("exc", _INDETERMINATE_WRITE_FAILURES, ids=lambda e: type(e).__name__)
def test_other_write_failures_are_indeterminate(exc: BaseException) -> None:
    assert classify_failure(exc, write=True) is Indeterminate


@pytest.mark.parametrize(
    "exc",
    _DETERMINATE_WRITE_FAILURES + _INDETERMINATE_WRITE_FAILURES,
    ids=lambda e: type(e).__name__,
)
def test_read_failures_are_determinate(exc: BaseException) -> None:
    assert classify_failure(exc, write=False) is Determinate


class _FakeConn:
    """Just enough of an asyncpg connection to drive PostgresConsensus._run
    through its `PostgresPool`: every statement raises `query_error`, or waits
    for `release` to be set and returns None."""

    def __init__(self, query_error: BaseException | None, release: asyncio.Event | None = None) -> None:
        self.query_error = query_error
        self.release = release

    def is_closed(self) -> bool:
        return False

    def is_in_transaction(self) -> bool:
        return False

    def terminate(self) -> None:
        pass

    async def fetchval(self, *_args: object) -> object:
        if self.release is not None:
            await self.release.wait()
        if self.query_error is not None:
            raise self.query_error
        return None

    fetchrow = fetch = fetchval


def _fake(
    connect_error: BaseException | None,
    query_error: BaseException | None,
    *,
    release: asyncio.Event | None = None,
    slot_timeout_s: float = 1.0,
) -> PostgresConsensus:
    async def connect() -> _FakeConn:
        if connect_error is not None:
            raise connect_error
        return _FakeConn(query_error, release)

    pool = PostgresPool(
        1, cast("Any", connect), "postgresql://u:***@h/db", now=lambda: 0.0, slot_timeout_s=slot_timeout_s
    )
    return PostgresConsensus(pool)


@pytest.mark.asyncio
async def test_no_connection_means_determinate_even_for_writes() -> None:
    c = _fake(ConnectionRefusedError(111, "Connection refused"), TypeError("unused"))
    with pytest.raises(Determinate, match="nothing sent") as info:
        await c.compare_and_set("k", None, _vd(0, "x"))
    assert isinstance(info.value.__cause__, ConnectionRefusedError)
    with pytest.raises(Determinate):
        await c.truncate("k", SeqNo(0))


@pytest.mark.asyncio
async def test_lost_mid_statement_write_is_indeterminate_read_is_determinate() -> None:
    lost = asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
    c = _fake(None, lost)
    with pytest.raises(Indeterminate) as info:
        await c.compare_and_set("k", SeqNo(0), _vd(1, "x"))
    assert info.value.__cause__ is lost
    assert "compare_and_set('k', v0, v1) on postgresql://u:***@h/db failed" in str(info.value)
    assert "SQLSTATE 08003" in str(info.value)
    with pytest.raises(Determinate):
        await c.head("k")
    with pytest.raises(Determinate):
        await c.scan("k", SeqNo(0), 1)


@pytest.mark.asyncio
async def test_bugs_are_not_disguised_as_storage_errors() -> None:
    c = _fake(None, TypeError("a bug"))
    with pytest.raises(TypeError):
        await c.compare_and_set("k", None, _vd(0, "x"))


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_no_free_connection_in_time_means_determinate_even_for_writes() -> None:
    """Every wait for a connection has a deadline: a statement that finds the
    pool's one connection busy past it fails Determinate, nothing sent."""
    release = asyncio.Event()
    c = _fake(None, None, release=release, slot_timeout_s=5.0)
    async with asyncio.TaskGroup() as tg:
        holder = tg.create_task(c.head("k"))  # takes the only connection until released
        await asyncio.sleep(0)
        with pytest.raises(Determinate, match="nothing sent"):
            await c.compare_and_set("k", None, _vd(0, "x"))
        release.set()
    assert holder.result() is None
