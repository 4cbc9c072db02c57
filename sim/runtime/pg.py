"""Postgres plumbing every opener shares: which driver failures are definite,
one-line descriptions of them, and libpq's connect_timeout."""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from sim.runtime.errors import Determinate, ExternalError, Indeterminate, InvalidUsage
from sim.runtime.urls import redact_text, redact_url

__all__ = [
    "DETERMINATE_SQLSTATES",
    "DRIVER_ERRORS",
    "classify_failure",
    "describe_failure",
    "split_connect_timeout",
]

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
    """One line naming the failure: type, SQLSTATE if any, message (redacted)."""
    sqlstate = getattr(exc, "sqlstate", None)
    code = f" [SQLSTATE {sqlstate}]" if isinstance(sqlstate, str) else ""
    message = " ".join(str(exc).split()) or "(no message)"
    return redact_text(f"{type(exc).__name__}{code}: {message}")


def split_connect_timeout(url: str) -> tuple[str, float | None]:
    """Removes libpq's `connect_timeout` from `url` (asyncpg would send it to the
    server as a setting, which rejects it) and returns it in seconds."""
    parts = urlsplit(url)
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
