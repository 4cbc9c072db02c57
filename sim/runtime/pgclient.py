"""The Postgres/CockroachDB client the stores on Postgres share (seed 000's
`mz_postgres_client`): the oracle, its timestamp store and the catalog stash
each hold a `PostgresClient`, persist's Consensus its `PostgresPool`. The pool
is a bounded set of asyncpg connections and one attempt of a statement, its
failure sorted into the error tiers of DESIGN.md §9; the client adds retries
with capped exponential backoff and jitter from the `Runtime`.

Every statement its users issue is idempotent, so `run` retries Determinate
and Indeterminate failures alike (SQLSTATE 40001, a dropped connection,
`pg_terminate_backend`'s 57P01, a refused connection) until its deadline, then
surfaces one line naming the operation. Failures are classified by
`sim.runtime.pg.classify_failure`, as persist's Consensus classifies them, so
every store agrees on what is definite.

Sessions run at SERIALIZABLE unless the URL says `isolation=read-committed`
(`sim.runtime.pg.Isolation`): CockroachDB runs every transaction so, and its
contention shows up as 40001, which `run` retries like the real system's
client does. With a run's `BackendStats` installed, each statement's round trip
(on its connection: no pool wait, no backoff) and each retry is recorded.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Final, TypeAlias, TypeVar, final

import anyio
import asyncpg

from sim.runtime.backend_stats import current_backend_stats
from sim.runtime.errors import Determinate, ExternalError, Indeterminate, InvalidUsage
from sim.runtime.pg import (
    DRIVER_ERRORS,
    Isolation,
    classify_failure,
    describe_failure,
    split_connect_timeout,
    split_isolation,
)
from sim.runtime.retry import RetryPolicy, retry_external
from sim.runtime.urls import redact_url

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sim.runtime.backend_stats import BackendStats
    from sim.runtime.core import Runtime

    Conn: TypeAlias = asyncpg.Connection[asyncpg.Record]

__all__ = ["DEFAULT_RETRY", "PostgresClient", "PostgresPool"]

T = TypeVar("T")

#: Oracle operations are short single-row statements: retry fast (40001 under
#: SERIALIZABLE contention clears within a few ms), but give a restarting server
#: a minute before giving up.
DEFAULT_RETRY: Final = RetryPolicy(deadline_s=60.0, base_s=0.001, cap_s=0.25)

@final
class _Pool:
    """At most `size` asyncpg connections, opened on demand and reused.

    Not `asyncpg.Pool`: its `release` runs a shielded task per call, an extra
    event-loop cycle per statement that cost about half the one-connection rate
    of read_ts in `bench/oracle.py` (and its default reset query would add a
    round trip). Here taking and returning an idle connection never yields.
    Which failures discard a connection: `_reusable_after`.
    """

    def __init__(
        self,
        size: int,
        connect: Callable[[], Awaitable[Conn]],
        *,
        now: Callable[[], float],
        stats: BackendStats | None = None,
        slot_timeout_s: float | None = None,
    ) -> None:
        self._connect = connect
        self._now = now
        self._stats = stats
        self._slot_timeout_s = slot_timeout_s
        self._slots = anyio.Semaphore(size)
        self._idle: list[Conn] = []
        self._busy: set[Conn] = set()  # membership only; never iterated for order
        self._closed = False

    @property
    def size(self) -> int:
        """Connections held now (idle and in use)."""
        return len(self._idle) + len(self._busy)

    async def warm(self) -> None:
        """Opens one connection now, so a bad URL fails at connect time."""
        self._idle.append(await self._connect())

    async def use(
        self,
        call: Callable[[Conn], Awaitable[T]],
        *,
        on_connect_error: Callable[[BaseException], BaseException],
        kind: str = "other",
    ) -> T:
        """Runs `call` on a connection (waiting for one of the `size` slots,
        at most `slot_timeout_s` if set); a failure to connect, or no slot in
        time, is raised as `on_connect_error(exc)`. A success is recorded as a
        round trip of `kind` when stats are being kept."""
        try:
            self._slots.acquire_nowait()  # the common case: no await, no yield
        except anyio.WouldBlock:
            if self._slot_timeout_s is None:
                await self._slots.acquire()
            else:
                try:
                    with anyio.fail_after(self._slot_timeout_s):
                        await self._slots.acquire()
                except TimeoutError as exc:
                    raise on_connect_error(exc) from exc
        try:
            conn = self._take_idle()
            if conn is None:
                try:
                    # Shielded (connect has its own timeout): asyncpg cancelled
                    # mid-handshake leaves an unclosed connection behind; this way
                    # a cancellation lands in `call` below, where the connection
                    # is ours to terminate.
                    with anyio.CancelScope(shield=True):
                        conn = await self._connect()
                except DRIVER_ERRORS as exc:
                    raise on_connect_error(exc) from exc
                assert conn is not None  # a shielded scope never swallows the call
            self._busy.add(conn)
            t0 = self._now()
            try:
                result = await call(conn)
            except BaseException as exc:
                self._put_back(conn, reusable=_reusable_after(exc, conn))
                raise
            if self._stats is not None:
                self._stats.record(kind, self._now() - t0)
            self._put_back(conn, reusable=True)
            return result
        finally:
            self._slots.release()

    def _take_idle(self) -> Conn | None:
        # The most recently used first; ones that died while idle (a restarted
        # server, a terminated backend) are dropped here rather than failing a call.
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                return conn
            conn.terminate()
        return None

    def _put_back(self, conn: Conn, *, reusable: bool) -> None:
        self._busy.discard(conn)
        if reusable and not self._closed and not conn.is_closed():
            self._idle.append(conn)
        else:
            conn.terminate()

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            try:
                with anyio.fail_after(5):
                    await conn.close()
            except DRIVER_ERRORS:  # TimeoutError included
                conn.terminate()
        self.terminate()  # whatever is still in use

    def terminate(self) -> None:
        self._closed = True
        conns = [*self._idle, *self._busy]
        self._idle, self._busy = [], set()
        for conn in conns:
            conn.terminate()


def _reusable_after(exc: BaseException, conn: Conn) -> bool:
    """Whether `conn` may serve another call after `call(conn)` raised `exc`.

    A server error leaves the session usable unless it ended the session (class
    57 operator intervention, 08 connection exception); so does an exception of
    our own raised between statements (e.g. `Fenced`). The driver's other errors
    (a dropped socket, a timeout) and cancellation (a statement possibly still
    running) do not. Never with a transaction left open.
    """
    if isinstance(exc, asyncpg.PostgresError):
        sqlstate = getattr(exc, "sqlstate", None) or ""
        if sqlstate.startswith(("57", "08")):
            return False
    elif isinstance(exc, DRIVER_ERRORS) or not isinstance(exc, Exception):
        return False
    return not conn.is_closed() and not conn.is_in_transaction()


def _creating(ddl: str) -> Callable[[Conn], Awaitable[None]]:
    """A call that runs `CREATE TABLE IF NOT EXISTS …` and tolerates a
    concurrent creator."""

    async def create(conn: Conn) -> None:
        # CREATE TABLE IF NOT EXISTS is not atomic in Postgres: two sessions
        # may collide on the table, its row type or its index; either way the
        # table exists afterwards.
        with contextlib.suppress(
            asyncpg.UniqueViolationError,
            asyncpg.DuplicateTableError,
            asyncpg.DuplicateObjectError,
        ):
            await conn.execute(ddl)

    return create


@final
class PostgresPool:
    """Sessions to one Postgres/CockroachDB database, and one attempt of a
    statement on them with its failure sorted into the tiers of DESIGN.md §9:
    no connection (nothing sent) ⇒ `Determinate`, else `classify_failure`.

    It never retries: `PostgresClient` does, for the stores whose every
    statement is idempotent; persist's Consensus does not (a compare-and-set
    is not idempotent: its caller decides). Open with `PostgresPool.open`.
    """

    def __init__(
        self,
        size: int,
        connect: Callable[[], Awaitable[Conn]],
        where: str,
        *,
        now: Callable[[], float],
        isolation: Isolation = Isolation.SERIALIZABLE,
        slot_timeout_s: float | None = None,
    ) -> None:
        """Use `open` (a test may give its own `connect`). `where` is the
        redacted URL, for messages."""
        self._slots = _Pool(size, connect, now=now, stats=current_backend_stats(), slot_timeout_s=slot_timeout_s)
        self.where = where
        #: The level every session (and so every implicit and explicit
        #: transaction without a level of its own) runs at.
        self.isolation = isolation

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        now: Callable[[], float],
        pool_size: int = 8,
        statement_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        slot_timeout_s: float | None = None,
        application_name: str | None = None,
        isolation: Isolation | None = None,
    ) -> PostgresPool:
        """Connects once to `url` (`postgres[ql]://user@host:port/db[?sslmode=…&connect_timeout=S&isolation=L&…]`;
        other query parameters are session settings), so that a bad URL or
        a server that is down fails here.

        Args:
            now: the clock round trips are timed with (`Runtime.now`, or the loop's).
            pool_size: the most connections held at once.
            statement_timeout_s: the server cancels a statement running longer
                (and the client gives up a second later, should the server hang).
            connect_timeout_s: how long connecting may take, unless the URL's
                `connect_timeout` says.
            slot_timeout_s: how long a statement may wait for a free
                connection; past it, `Determinate` (nothing sent). None: as
                long as it takes.
            application_name: shown in `pg_stat_activity`; None: the URL's,
                else the server's default.
            isolation: the sessions' level; None: the URL's `isolation`
                parameter, else SERIALIZABLE.

        Raises:
            InvalidUsage: a bad argument or URL.
            Determinate: the server is unreachable or refused us (one line,
                naming the URL without its password).
        """
        if pool_size < 1:
            raise InvalidUsage(f"pool_size must be >= 1, got {pool_size}")
        if statement_timeout_s <= 0:
            raise InvalidUsage(f"statement_timeout_s must be > 0, got {statement_timeout_s}")
        where = redact_url(url)
        dsn, connect_timeout = split_connect_timeout(url)
        dsn, named = split_isolation(dsn)
        level = isolation or named
        # Startup settings, not SET: CockroachDB knows them all, and they hold
        # for the connection's life. The isolation level covers the
        # single-statement (implicit) transactions; explicit ones name it.
        settings = {
            "statement_timeout": str(int(statement_timeout_s * 1000)),
            "default_transaction_isolation": level.setting,
        }
        if application_name is not None:
            settings["application_name"] = application_name

        async def connect() -> Conn:
            conn: Conn = await asyncpg.connect(
                dsn,
                timeout=connect_timeout or connect_timeout_s,
                command_timeout=statement_timeout_s + 1.0,
                server_settings=settings,
            )
            return conn

        pool = cls(pool_size, connect, where, now=now, isolation=level, slot_timeout_s=slot_timeout_s)
        try:
            await pool._slots.warm()
        except (ValueError, asyncpg.ClientConfigurationError) as exc:
            raise InvalidUsage(f"bad Postgres URL {where}: {describe_failure(exc)}") from exc
        except DRIVER_ERRORS as exc:
            raise Determinate(f"cannot connect to Postgres at {where}: {describe_failure(exc)}") from exc
        return pool

    @property
    def size(self) -> int:
        """Connections held now (idle and in use)."""
        return self._slots.size

    async def attempt(
        self, what: str, call: Callable[[Conn], Awaitable[T]], *, write: bool, kind: str = "other"
    ) -> T:
        """Runs `call` once on a pooled connection; `kind` names it in the
        run's `BackendStats` (its round trip, on success).

        Raises:
            Determinate: no connection (nothing was sent), or `call` failed
                and `classify_failure` says it did not apply (a write) or it
                only read (`write=False`).
            Indeterminate: a write failed and may have applied.
        """

        def nothing_sent(exc: BaseException) -> BaseException:
            return Determinate(f"{what} on {self.where}: no connection (nothing sent): {describe_failure(exc)}")

        try:
            return await self._slots.use(call, on_connect_error=nothing_sent, kind=kind)
        except DRIVER_ERRORS as exc:
            tier = classify_failure(exc, write=write)
            raise tier(f"{what} on {self.where} failed: {describe_failure(exc)}") from exc

    async def create_table(self, ddl: str, *, what: str = "create table") -> None:
        """Runs `CREATE TABLE IF NOT EXISTS …` once (as `attempt`), tolerating
        a concurrent creator."""
        await self.attempt(what, _creating(ddl), write=True, kind="setup")

    async def close(self) -> None:
        """Closes the idle connections politely (at most 5 s each) and drops
        those still in use."""
        await self._slots.close()

    def terminate(self) -> None:
        """Drops every connection at once."""
        self._slots.terminate()


@final
class PostgresClient:
    """A pool of connections to one Postgres/CockroachDB database whose
    statements are retried (`run`).

    asyncpg prepares each statement once per connection and reuses it from its
    statement cache, so the oracle's four statements run as prepared statements.
    Open with `PostgresClient.connect`.
    """

    def __init__(self, pool: PostgresPool, rt: Runtime, retry: RetryPolicy, application_name: str) -> None:
        """Use `connect`."""
        self._pool = pool
        self._rt = rt
        self.where = pool.where
        self.retry = retry
        self.application_name = application_name
        #: The level every session (and so every implicit and explicit
        #: transaction without a level of its own) runs at.
        self.isolation = pool.isolation
        self._stats = current_backend_stats()
        self._closed = False

    @classmethod
    async def connect(
        cls,
        url: str,
        rt: Runtime,
        *,
        pool_size: int = 8,
        application_name: str = "coordsim-oracle",
        statement_timeout_s: float = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        isolation: Isolation | None = None,
    ) -> PostgresClient:
        """Connects to `url` (`postgres[ql]://user@host:port/db[?sslmode=…&connect_timeout=S&isolation=L]`).

        Args:
            pool_size: the most connections held at once.
            application_name: shown in `pg_stat_activity` (fault tests find our
                backends by it).
            statement_timeout_s: the server cancels a statement running longer.
            retry: backoff and deadline of `run`.
            isolation: the sessions' level; None: the URL's `isolation`
                parameter, else SERIALIZABLE.

        Raises:
            InvalidUsage: a bad argument or URL.
            Determinate: the server is unreachable or refused us (one line).
        """
        pool = await PostgresPool.open(
            url,
            now=rt.now,
            pool_size=pool_size,
            statement_timeout_s=statement_timeout_s,
            application_name=application_name,
            isolation=isolation,
        )
        return cls(pool, rt, retry, application_name)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._pool.close()

    def terminate(self) -> None:
        """Drops every connection at once, like a crashed process (tests)."""
        self._closed = True
        self._pool.terminate()

    @property
    def closed(self) -> bool:
        return self._closed

    async def create_table(self, ddl: str) -> None:
        """Runs `CREATE TABLE IF NOT EXISTS …`, tolerating a concurrent creator."""
        await self.run("create table", _creating(ddl), write=True, kind="setup")

    async def run(
        self,
        what: str,
        call: Callable[[Conn], Awaitable[T]],
        *,
        write: bool,
        on_retry: Callable[[Exception], None] | None = None,
        kind: str = "other",
    ) -> T:
        """Runs `call` on a pooled connection, retrying every `ExternalError` (the
        caller promises `call` is idempotent) until the retry deadline.

        `kind` names the operation in the run's `BackendStats` (e.g.
        `oracle.pg.read_ts`): its round trips and retries, by SQLSTATE.

        Raises:
            InvalidUsage: the client is closed.
            ExternalError: the deadline passed; one line with the last failure.
        """
        if self._closed:
            raise InvalidUsage(f"{what}: the Postgres client for {self.where} is closed")
        attempts = 0

        def count(exc: Exception) -> None:
            nonlocal attempts
            attempts += 1
            if self._stats is not None:
                self._stats.retried(kind, getattr(exc.__cause__, "sqlstate", None))
            if on_retry is not None:
                on_retry(exc)

        start = self._rt.now()
        try:
            return await retry_external(
                self._rt,
                lambda: self._attempt(what, call, write, kind),
                idempotent=True,
                policy=self.retry,
                on_retry=count,
            )
        except ExternalError as exc:
            tier = Determinate if isinstance(exc, Determinate) else Indeterminate
            raise tier(
                f"{exc} (gave up after {attempts + 1} attempts in {self._rt.now() - start:.1f}s)"
            ) from exc

    async def _attempt(self, what: str, call: Callable[[Conn], Awaitable[T]], write: bool, kind: str) -> T:
        """One attempt (`PostgresPool.attempt`), unless the client is closed."""
        if self._closed:
            raise InvalidUsage(f"{what}: the Postgres client for {self.where} is closed")
        return await self._pool.attempt(what, call, write=write, kind=kind)
