"""Parsing of the location URLs that choose backends.

Every URL, DSN, config or free text that is printed, logged or stored goes
through the one redaction core, `sim.runtime.redact` (whose names this module
also offers, for the callers that import them from here); every URL parsed
or handed to a driver here is shown to it first, so that a driver's error
that echoes a piece of its password is redacted too (`redact_error`). The
Postgres driver parameters every `postgres://` opener passes through
(`PG_PASSTHROUGH`) live here too, so the openers cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from sim.runtime.errors import InvalidUsage
from sim.runtime.redact import (
    REDACTED,
    is_secret_name,
    redact_env,
    redact_error,
    redact_mapping,
    redact_text,
    redact_url,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "PG_PASSTHROUGH",
    "REDACTED",
    "ParsedUrl",
    "driver_url",
    "is_secret_name",
    "parse_url",
    "redact_env",
    "redact_error",
    "redact_mapping",
    "redact_text",
    "redact_url",
    "split_url",
    "with_query_param",
]

#: libpq connection parameters a `postgres://` URL may carry, passed to the
#: driver untouched (asyncpg reads all of them from the query string; it sends
#: `application_name` as a startup setting, and the openers take
#: `connect_timeout` out as the client-side timeout).
PG_PASSTHROUGH: Final = frozenset(
    {
        "host",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslcrl",
        "sslpassword",
        "target_session_attrs",
        "connect_timeout",
        "application_name",
    }
)

# --- parsing -----------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class ParsedUrl:
    """A location URL split into scheme, network location, path and parameters."""

    url: str
    scheme: str
    netloc: str
    path: str
    params: dict[str, str]

    def require_params(self, allowed: Iterable[str]) -> None:
        """Raises `InvalidUsage` naming the first parameter not in `allowed`."""
        allowed = set(allowed)
        for name in self.params:
            if name not in allowed:
                known = ", ".join(sorted(allowed)) or "none"
                # A raw '?' in a password makes a piece of it a parameter's name.
                raise InvalidUsage(
                    f"unknown parameter {redact_error(repr(name))} in {redact_url(self.url)} (known: {known})"
                )


def split_url(url: str) -> SplitResult:
    """`urlsplit(url)`, remembering its secrets first (for a driver's error
    about it, `redact_error`); a URL it cannot split (a raw `[` in a
    password: "Invalid IPv6 URL") is `InvalidUsage`, one redacted line."""
    redact_url(url)
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise InvalidUsage(f"malformed URL {redact_url(url)!r}: {redact_error(str(exc))}") from exc


def parse_url(url: str) -> ParsedUrl:
    """Splits `url`; a repeated or malformed query parameter is `InvalidUsage`."""
    parts = split_url(url)
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        # Its message quotes the field: with a raw '?' in a password, a piece of it.
        raise InvalidUsage(f"malformed URL {redact_url(url)!r}: {redact_error(str(exc))}") from exc
    if not parts.scheme:
        raise InvalidUsage(f"malformed URL {redact_url(url)!r}: no scheme (e.g. mem://, file:///path)")
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            raise InvalidUsage(f"parameter {name!r} given twice in {redact_url(url)}")
        params[name] = value
    return ParsedUrl(url, parts.scheme.lower(), parts.netloc, parts.path, params)


def driver_url(url: str, *, drop: Iterable[str] = ()) -> str:
    """`url` as a `postgresql://` DSN for the driver: same user, password, host
    and database, and only the `PG_PASSTHROUGH` parameters not in `drop`
    (coordsim's own parameters would be sent to the server as settings)."""
    keep = PG_PASSTHROUGH.difference(drop)
    parts = split_url(url)
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k in keep]
    return urlunsplit(parts._replace(scheme="postgresql", query=urlencode(kept)))


def with_query_param(url: str, name: str, value: str) -> str:
    """`url` with `name=value` appended to its query (e.g. an `application_name`
    that says whose connections these are)."""
    parts = split_url(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), (name, value)]
    return urlunsplit(parts._replace(query=urlencode(query)))
