"""S3 requests: the clients coordsim makes and the tier of a request that failed.

The invariant this module protects is the error tier: a failed write is
`Determinate` only when the request provably did not apply (the connection was
refused, S3 answered 4xx or asked us to slow down), so a request that can
change a visible key is never resent (a resend could fail determinately after
the first send applied): `open_client(..., attempts=1)` makes a client that
sends each request once. `persist.s3.S3Blob` is built on it.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from typing import TYPE_CHECKING, Final

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.httpsession import AIOHTTPSession
from aiobotocore.session import get_session
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)

from sim.runtime.errors import Determinate, Indeterminate
from sim.runtime.urls import redact_text, redact_url

if TYPE_CHECKING:
    from aiobotocore.session import AioSession, ClientCreatorContext
    from types_aiobotocore_s3 import S3Client

__all__ = [
    "NOT_FOUND_CODES",
    "S3_ERRORS",
    "classify",
    "create_bucket",
    "describe",
    "error_code",
    "http_status",
    "open_client",
]

# Everything a botocore call (or reading a streamed body) may raise for a failure
# outside the process. Anything else escaping is a bug and is not relabelled.
S3_ERRORS: Final = (BotoCoreError, ClientError, aiohttp.ClientError, asyncio.TimeoutError, OSError)

# Codes with which S3 (and compatible servers) refuse a request to shed load; the
# request was not applied whatever the status (503 SlowDown, 429, ...).
_THROTTLING_CODES: Final = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
    }
)
NOT_FOUND_CODES: Final = frozenset({"NoSuchKey", "NotFound", "404"})


def classify(exc: BaseException, *, write: bool) -> type[Determinate] | type[Indeterminate]:
    """The tier of a failed S3 request (see `persist.location.Blob`).

    Reads are always `Determinate`. A write is `Determinate` only from this
    allow-list: the TCP connection never opened (refused, unresolvable, connect
    timeout), S3 answered with a 4xx status or a throttling code, or botocore
    refused locally before sending (no credentials, invalid parameters).
    Everything else (read timeouts, a connection lost mid-request, 5xx, unknown)
    is `Indeterminate`.
    """
    if not write:
        return Determinate
    if isinstance(exc, ClientError):
        code = error_code(exc)
        status = http_status(exc)
        if code in _THROTTLING_CODES or (status is not None and 400 <= status < 500):
            return Determinate
        return Indeterminate
    if isinstance(exc, ConnectTimeoutError):
        return Determinate
    if isinstance(exc, EndpointConnectionError):
        # aiobotocore maps every aiohttp ClientConnectionError here, including a
        # reset of an established connection mid-request; only a failed connect
        # proves that no byte of the request left.
        cause = exc.kwargs.get("error")
        if isinstance(
            cause, aiohttp.ClientConnectorError | ConnectionRefusedError | socket.gaierror
        ):
            return Determinate
        return Indeterminate
    if isinstance(exc, NoCredentialsError | PartialCredentialsError | ParamValidationError):
        return Determinate
    return Indeterminate


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def describe(exc: BaseException) -> str:
    """One line saying what went wrong, without botocore's boilerplate."""
    if isinstance(exc, ClientError):
        code = error_code(exc) or "error"
        status = http_status(exc)
        message = str(exc.response.get("Error", {}).get("Message", ""))
        text = code if status is None else f"{code} (HTTP {status})"
        if message and message != code:
            text += f": {message}"
    elif isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
        text = _connect_failure(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return redact_text(" ".join(text.split()))


def _connect_failure(exc: EndpointConnectionError | ConnectTimeoutError) -> str:
    """`Connection refused` rather than aiohttp's nested repr of the same thing."""
    cause = exc.kwargs.get("error")
    os_error = getattr(cause, "os_error", cause)
    code = os_error.errno if isinstance(os_error, OSError) else None
    if code is not None and code in errno.errorcode:
        return os.strerror(code)
    if isinstance(exc, ConnectTimeoutError):
        return "connect timed out"
    return str(cause or exc)



class _SendOnceSession(AIOHTTPSession):
    """aiobotocore's HTTP session, minus aiohttp's silent resend of a PUT or DELETE
    whose connection dropped: after a resend, a refused connection would look like
    proof that nothing applied although the first send may have. (Private aiohttp
    state; `test_write_cut_off_mid_request_is_indeterminate_and_not_retried`
    notices if it stops working.)"""

    async def _get_session(self, proxy_url: str | None) -> aiohttp.ClientSession:
        session: aiohttp.ClientSession = await super()._get_session(proxy_url)  # type: ignore[misc]
        session._retry_connection = False
        return session


def open_client(
    session: AioSession, endpoint: str | None, region: str, *, attempts: int
) -> ClientCreatorContext[S3Client]:
    """An S3 client (an async context manager) for `endpoint` (None: AWS
    itself) in `region`, making at most `attempts` attempts per request;
    `attempts == 1`: every request is sent once."""
    config = _client_config(endpoint, attempts=attempts)
    return session.create_client("s3", region_name=region, endpoint_url=endpoint, config=config)


def _client_config(endpoint: str | None, *, attempts: int) -> AioConfig:
    """Short connect timeout and few attempts: an unreachable endpoint fails fast.
    `attempts == 1` also turns off aiohttp's own resend (see `_SendOnceSession`)."""
    return AioConfig(
        http_session_cls=_SendOnceSession if attempts == 1 else AIOHTTPSession,
        connect_timeout=2,
        read_timeout=30,
        retries={"mode": "standard", "total_max_attempts": attempts},
        max_pool_connections=32,
        # S3-compatible servers (moto, MinIO) do not route virtual-host buckets.
        s3={"addressing_style": "path"} if endpoint else None,
    )


async def create_bucket(endpoint: str, bucket: str, *, region: str = "us-east-1") -> None:
    """Creates `bucket` at `endpoint` unless this account already owns it.

    Raises:
        Determinate: the server is unreachable or refused (e.g. the name is taken
            by another account); Indeterminate: the outcome is unknown.
    """
    where = redact_url(endpoint)
    async with open_client(get_session(), endpoint, region, attempts=2) as client:
        try:
            if region == "us-east-1":
                await client.create_bucket(Bucket=bucket)
            else:
                await client.create_bucket(
                    Bucket=bucket,
                    CreateBucketConfiguration={"LocationConstraint": region},  # type: ignore[typeddict-item]
                )
        except S3_ERRORS as exc:
            if isinstance(exc, ClientError) and error_code(exc) == "BucketAlreadyOwnedByYou":
                return
            tier = classify(exc, write=True)
            if tier is Determinate and isinstance(exc, EndpointConnectionError):
                raise Determinate(f"S3 endpoint {where} unreachable: {describe(exc)}") from exc
            raise tier(f"S3 create bucket {bucket!r} at {where} failed: {describe(exc)}") from exc
