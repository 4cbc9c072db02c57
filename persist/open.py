"""Opens Blob and Consensus implementations by URL.

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
scheme is used.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from sim.runtime.errors import InvalidUsage
from sim.runtime.pg import ISOLATION_PARAM, isolation_of
from sim.runtime.urls import PG_PASSTHROUGH, ParsedUrl, driver_url, parse_url, redact_url

if TYPE_CHECKING:
    from persist.location import Blob, Consensus

__all__ = ["S3_ENDPOINT_ENV", "open_blob", "open_consensus"]

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


async def open_blob(url: str) -> Blob:
    """Opens the Blob that `url` names (see the module docstring)."""
    u = parse_url(url)
    if u.scheme == "mem":
        _require_empty_mem(u)
        from persist.mem import MemBlob

        return MemBlob()
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


async def open_consensus(url: str) -> Consensus:
    """Opens the Consensus that `url` names (see the module docstring)."""
    u = parse_url(url)
    if u.scheme == "mem":
        _require_empty_mem(u)
        from persist.mem import MemConsensus

        return MemConsensus()
    if u.scheme in ("postgres", "postgresql"):
        u.require_params(PG_PASSTHROUGH | {"pool_size", ISOLATION_PARAM})
        pool_size = _int_param(u, "pool_size", 8)
        from persist.postgres import PostgresConsensus

        return await PostgresConsensus.open(driver_url(url), pool_size=pool_size, isolation=isolation_of(url))
    raise InvalidUsage(
        f"unknown consensus URL scheme {u.scheme!r} in {redact_url(url)}: "
        "expected mem:// or postgres://"
    )
