"""Postgres plumbing every opener shares: which driver failures are definite,
one-line descriptions of them, libpq's connect_timeout, and the isolation level
the sessions run at (SERIALIZABLE unless the URL says otherwise, as CockroachDB)."""

from __future__ import annotations

import enum
from typing import Final, Literal, TypeAlias
from urllib.parse import parse_qsl, urlencode, urlunsplit

import asyncpg

from sim.runtime.errors import Determinate, ExternalError, Indeterminate, InvalidUsage
from sim.runtime.redact import redact_error, redact_url
from sim.runtime.urls import split_url

__all__ = [
    "DETERMINATE_SQLSTATES",
    "DRIVER_ERRORS",
    "ISOLATION_PARAM",
    "SERIALIZATION_FAILURE",
    "Isolation",
    "classify_failure",
    "describe_failure",
    "isolation_of",
    "split_connect_timeout",
    "split_isolation",
    "with_isolation",
]

#: asyncpg's names of the levels (`Connection.transaction(isolation=…)`).
AsyncpgLevel: TypeAlias = Literal["serializable", "repeatable_read", "read_committed"]

#: SQLSTATE of a serialization failure: the transaction was rolled back and
#: may be retried (CockroachDB's everyday contention error).
SERIALIZATION_FAILURE: Final = "40001"

#: The coordsim URL parameter choosing the sessions' isolation level
#: (`?isolation=read-committed`); the openers take it out of the URL and set
#: `default_transaction_isolation` as a startup setting instead.
ISOLATION_PARAM: Final = "isolation"


class Isolation(enum.StrEnum):
    """The isolation level of every coordsim session on Postgres.

    SERIALIZABLE is the default because CockroachDB runs every transaction at
    it: contention then surfaces as 40001, which the clients retry, as the
    real system's code does. READ COMMITTED (Postgres's own default) never
    raises 40001 on single-row statements, so it is not CockroachDB-like.
    """

    SERIALIZABLE = "serializable"
    READ_COMMITTED = "read-committed"

    @classmethod
    def parse(cls, text: str) -> Isolation:
        """`serializable` or `read-committed` (`read committed`, `read_committed` too)."""
        key = text.strip().lower().replace("_", "-").replace(" ", "-")
        try:
            return cls(key)
        except ValueError:
            raise InvalidUsage(
                f"unknown isolation level {text!r}: expected serializable or read-committed"
            ) from None

    @property
    def setting(self) -> str:
        """The value of `default_transaction_isolation` (Postgres and CockroachDB spell it so)."""
        return "serializable" if self is Isolation.SERIALIZABLE else "read committed"

    @property
    def asyncpg(self) -> AsyncpgLevel:
        """`isolation=` of asyncpg's `Connection.transaction` (`BEGIN ISOLATION LEVEL …`)."""
        return "serializable" if self is Isolation.SERIALIZABLE else "read_committed"

    @property
    def snapshot(self) -> AsyncpgLevel:
        """asyncpg's level for a multi-statement read that needs one snapshot:
        SERIALIZABLE gives one; under READ COMMITTED each statement would see
        its own, so such reads keep REPEATABLE READ (what they always used)."""
        return "serializable" if self is Isolation.SERIALIZABLE else "repeatable_read"

    @property
    def cockroach_like(self) -> bool:
        return self is Isolation.SERIALIZABLE

    def label(self) -> str:
        """How every output names the level: read committed says it is not CockroachDB-like."""
        if self.cockroach_like:
            return "SERIALIZABLE (as CockroachDB)"
        return "READ COMMITTED (not CockroachDB-like: CockroachDB runs SERIALIZABLE and raises 40001)"

# SQLSTATEs after which a write definitely did not apply (DESIGN.md §9).
DETERMINATE_SQLSTATES: Final = frozenset(
    {
        "40001",  # serialization_failure: the transaction was rolled back
        "40P01",  # deadlock_detected: rolled back
        "57P03",  # cannot_connect_now: the server is starting or stopping
        "53300",  # too_many_connections
        "08001",  # sqlclient_unable_to_establish_sqlconnection
        "08004",  # sqlserver_rejected_establishment_of_sqlconnection
    }
)

# What the driver can raise. Anything else (TypeError, ...) is a bug and propagates.
DRIVER_ERRORS: Final = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,  # includes TimeoutError and ConnectionError
)


def classify_failure(exc: BaseException, *, write: bool) -> type[ExternalError]:
    """The error tier of a failed statement (one that was, or may have been, sent).

    Reads are always `Determinate`. A write is `Determinate` only if the server
    says it rolled back or refused the connection (`DETERMINATE_SQLSTATES`), or
    the driver refused to send on a connection it already knew was closed;
    everything else (a connection lost mid-statement, 57P01 admin_shutdown, a
    timeout, anything unknown) is `Indeterminate`. A failure to obtain a
    connection is `Determinate` whatever it is: nothing was sent.
    """
    if not write:
        return Determinate
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate in DETERMINATE_SQLSTATES:
        return Determinate
    # asyncpg's checks before sending: "connection is closed", "cannot perform
    # operation: connection is closed", "... the underlying connection is closed".
    if isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc):
        return Determinate
    return Indeterminate


def describe_failure(exc: BaseException) -> str:
    """One line naming the failure: type, SQLSTATE if any, message — redacted
    by the one function every driver error passes (`redact_error`)."""
    return redact_error(exc)


def split_connect_timeout(url: str) -> tuple[str, float | None]:
    """Removes libpq's `connect_timeout` from `url` (asyncpg would send it to the
    server as a setting, which rejects it) and returns it in seconds."""
    parts = split_url(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    timeout: float | None = None
    kept: list[tuple[str, str]] = []
    for name, value in pairs:
        if name != "connect_timeout":
            kept.append((name, value))
            continue
        try:
            timeout = float(value)
        except ValueError:
            timeout = -1.0
        if timeout <= 0:
            raise InvalidUsage(f"connect_timeout={value!r} in {redact_url(url)} must be > 0")
    if timeout is None:
        return url, None
    return urlunsplit(parts._replace(query=urlencode(kept))), timeout


def split_isolation(url: str) -> tuple[str, Isolation]:
    """Removes the `isolation` parameter from `url` (asyncpg would send it to
    the server as a setting, which rejects it) and returns the level it names,
    SERIALIZABLE when absent."""
    parts = split_url(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    found = [v for k, v in pairs if k == ISOLATION_PARAM]
    if not found:
        return url, Isolation.SERIALIZABLE
    if len(found) > 1:
        raise InvalidUsage(f"parameter {ISOLATION_PARAM!r} given twice in {redact_url(url)}")
    kept = [(k, v) for k, v in pairs if k != ISOLATION_PARAM]
    return urlunsplit(parts._replace(query=urlencode(kept))), Isolation.parse(found[0])


def isolation_of(url: str | None) -> Isolation:
    """The isolation level sessions opened on `url` run at."""
    return Isolation.SERIALIZABLE if url is None else split_isolation(url)[1]


def with_isolation(url: str, isolation: Isolation) -> str:
    """`url` naming `isolation` (replacing any level it named). SERIALIZABLE,
    the default, is left implicit, so a default run's URLs are what they were
    (every opener and the tools that connect directly accept them)."""
    bare, _ = split_isolation(url)
    if isolation is Isolation.SERIALIZABLE:
        return bare
    parts = split_url(bare)
    pairs = [*parse_qsl(parts.query, keep_blank_values=True), (ISOLATION_PARAM, isolation.value)]
    return urlunsplit(parts._replace(query=urlencode(pairs)))
