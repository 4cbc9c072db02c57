"""The one way to open a persist location: `open_location` (a Blob and a
Consensus), or one half of it (`open_blob`, `open_consensus`), by URL. Nothing
else constructs an implementation (tests/test_opening.py checks it), so the
product, the harness and the conformance suites open them alike.

| URL                                   | Blob      | Consensus          |
|---------------------------------------|-----------|--------------------|
| `mem://`                              | MemBlob   | MemConsensus       |
| `file:///abs/dir[?fsync=false]`       | FileBlob  | —                  |
| `s3://bucket/prefix[?endpoint=…&region=…]` | S3Blob | —                  |
| `postgres://…`, `postgresql://…[?pool_size=N]` | — | PostgresConsensus |

Postgres URLs also take the libpq parameters of `sim.runtime.urls.PG_PASSTHROUGH`
(`password`, `sslmode`, `connect_timeout`, `application_name`, …), passed to
the driver. `mem://` opens a fresh, empty store each time (there is no
process-wide registry; share a store by passing the object). Unknown schemes or parameters are
`InvalidUsage`, one line. Heavy client libraries are imported only when their
scheme is used. `yields=False` opens an in-memory store that does not yield
before each call, for a wrapper that already does (`sim.load.latent`'s modeled
round trip); other schemes ignore it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final, NamedTuple, Self, final

from sim.runtime.errors import InvalidUsage
from sim.runtime.urls import PG_PASSTHROUGH, ParsedUrl, driver_url, parse_url, redact_url

if TYPE_CHECKING:
    from persist.location import Blob, Consensus

__all__ = ["S3_ENDPOINT_ENV", "Location", "open_blob", "open_consensus", "open_location"]

#: Where S3 lives when an `s3://` URL names no endpoint (plus the AWS variables).
S3_ENDPOINT_ENV: Final = "COORDSIM_S3_ENDPOINT"

_BOOL = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def _bool_param(u: ParsedUrl, name: str, default: bool) -> bool:
    raw = u.params.get(name)
    if raw is None:
        return default
    if raw.lower() not in _BOOL:
        raise InvalidUsage(f"parameter {name}={raw!r} in {redact_url(u.url)} must be true or false")
    return _BOOL[raw.lower()]


def _int_param(u: ParsedUrl, name: str, default: int, *, minimum: int = 1) -> int:
    raw = u.params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InvalidUsage(f"parameter {name}={raw!r} in {redact_url(u.url)} must be an integer >= {minimum}")
    return value


def _require_empty_mem(u: ParsedUrl) -> None:
    u.require_params(())
    if u.netloc or u.path not in ("", "/"):
        raise InvalidUsage(f"mem:// takes no name or path, got {redact_url(u.url)}")


@final
class Location(NamedTuple):
    """A persist location: what a `persist.client.PersistClient` runs on
    (`PersistClient(*location, rt)`). Closing it closes both halves."""

    blob: Blob
    consensus: Consensus

    async def close(self) -> None:
        try:
            await self.consensus.close()
        finally:
            await self.blob.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def open_location(*, blob: str = "mem://", consensus: str = "mem://", yields: bool = True) -> Location:
    """Opens the persist location whose halves `blob` and `consensus` name
    (default: a fresh, empty one in memory). On failure nothing stays open.

    Raises:
        InvalidUsage: a bad URL (one line).
        ExternalError: a server cannot be reached.
    """
    opened_blob = await open_blob(blob, yields=yields)
    try:
        return Location(opened_blob, await open_consensus(consensus, yields=yields))
    except BaseException:
        await opened_blob.close()
        raise


async def open_blob(url: str, *, yields: bool = True) -> Blob:
    """Opens the Blob that `url` names (see the module docstring)."""
    u = parse_url(url)
    if u.scheme == "mem":
        _require_empty_mem(u)
        from persist.mem import MemBlob

        return MemBlob(yields=yields)
    if u.scheme == "file":
        u.require_params(("fsync",))
        if u.netloc not in ("", "localhost") or not u.path.startswith("/"):
            raise InvalidUsage(f"file blob URL must be file:///absolute/path, got {redact_url(url)}")
        from persist.file import FileBlob

        try:
            return FileBlob(u.path, fsync=_bool_param(u, "fsync", True))
        except OSError as exc:
            raise InvalidUsage(f"cannot use {u.path} as a file blob: {exc.strerror}") from exc
    if u.scheme == "s3":
        u.require_params(("endpoint", "region"))
        if not u.netloc:
            raise InvalidUsage(f"s3 URL needs a bucket: s3://bucket/prefix, got {redact_url(url)}")
        from persist.s3 import S3Blob

        endpoint = u.params.get("endpoint") or os.environ.get(S3_ENDPOINT_ENV) or None
        return await S3Blob.open(
            u.netloc,
            u.path.strip("/"),
            endpoint=endpoint,
            region=u.params.get("region", "us-east-1"),
        )
    raise InvalidUsage(
        f"unknown blob URL scheme {u.scheme!r} in {redact_url(url)}: "
        "expected mem://, file:///path or s3://bucket/prefix"
    )


async def open_consensus(url: str, *, yields: bool = True) -> Consensus:
    """Opens the Consensus that `url` names (see the module docstring)."""
    u = parse_url(url)
    if u.scheme == "mem":
        _require_empty_mem(u)
        from persist.mem import MemConsensus

        return MemConsensus(yields=yields)
    if u.scheme in ("postgres", "postgresql"):
        from sim.runtime.pg import ISOLATION_PARAM, isolation_of  # asyncpg: only for Postgres

        u.require_params(PG_PASSTHROUGH | {"pool_size", ISOLATION_PARAM})
        pool_size = _int_param(u, "pool_size", 8)
        from persist.postgres import PostgresConsensus

        return await PostgresConsensus.open(driver_url(url), pool_size=pool_size, isolation=isolation_of(url))
    raise InvalidUsage(
        f"unknown consensus URL scheme {u.scheme!r} in {redact_url(url)}: "
        "expected mem:// or postgres://"
    )
