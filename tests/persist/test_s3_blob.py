"""S3Blob against a real S3-compatible server, and its error classification.

The `s3` tests use the session's server (`tests/fixtures/s3.py`) and a fresh
random prefix each; the classification tests are plain unit tests on synthetic
botocore exceptions, plus two tiny fake servers for the transport failures.
"""

from __future__ import annotations

import asyncio
import errno
import random
import time
import uuid
from collections import namedtuple
from typing import TYPE_CHECKING

import aiohttp
import pytest
import pytest_asyncio
from aiobotocore.session import get_session
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from persist.s3 import MIB, S3Blob
from persist.s3_client import classify
from sim.runtime.errors import Determinate, Indeterminate, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from types_aiobotocore_s3 import S3Client


def _prefix() -> str:
    return f"test-{uuid.uuid4().hex}"


@pytest_asyncio.fixture
async def blob(s3_endpoint: str, s3_bucket: str) -> AsyncIterator[S3Blob]:
    b = await S3Blob.open(s3_bucket, _prefix(), endpoint=s3_endpoint)
    try:
        yield b
    finally:
        await b.close()


@pytest_asyncio.fixture
async def raw_client(s3_endpoint: str) -> AsyncIterator[S3Client]:
    """A plain client, to look at objects behind the Blob's back."""
    async with get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=s3_endpoint
    ) as client:
        yield client


@pytest.fixture
def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests against fake endpoints: botocore signs every request, and with no
    credentials it would ask the EC2 metadata service, which is not on 127.0.0.1."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "coordsim-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "coordsim-test")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


async def _set_many(blob: S3Blob, keys: list[str], *, concurrency: int = 32) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(key: str) -> None:
        async with gate:
            await blob.set(key, key.encode())

    await asyncio.gather(*(one(k) for k in keys))


# --- Against the server -----------------------------------------------------------------


@pytest.mark.s3
@pytest.mark.asyncio
async def test_get_set_delete(blob: S3Blob) -> None:
    assert await blob.get("k") is None
    await blob.set("k", b"one")
    assert await blob.get("k") == b"one"
    await blob.set("k", b"two")
    await blob.set("k", b"two")
    assert await blob.get("k") == b"two"
    await blob.set("empty", b"")
    assert await blob.get("empty") == b""
    assert await blob.delete("k") is True
    assert await blob.delete("k") is False
    assert await blob.get("k") is None
    assert await blob.list_keys() == ["empty"]


@pytest.mark.s3
@pytest.mark.asyncio
async def test_list_keys_filters_by_prefix_and_sorts(blob: S3Blob) -> None:
    keys = ["b", "a/2", "a/1", "a", "ä", "z/é", "a/10", "ab"]
    await _set_many(blob, keys)
    assert await blob.list_keys() == sorted(keys)
    assert await blob.list_keys("a/") == ["a/1", "a/10", "a/2"]
    assert await blob.list_keys("a") == ["a", "a/1", "a/10", "a/2", "ab"]
    assert await blob.list_keys("nothing") == []


@pytest.mark.s3
@pytest.mark.asyncio
async def test_prefix_is_joined_with_a_slash_and_stripped(
    s3_endpoint: str, s3_bucket: str, raw_client: S3Client
) -> None:
    root = _prefix()
    async with await S3Blob.open(s3_bucket, f"/{root}/a/b/", endpoint=s3_endpoint) as inner:
        assert inner.prefix == f"{root}/a/b"
        await inner.set("k", b"v")
        assert await inner.list_keys() == ["k"]
    head = await raw_client.head_object(Bucket=s3_bucket, Key=f"{root}/a/b/k")
    assert head["ContentLength"] == 1
    async with await S3Blob.open(s3_bucket, root, endpoint=s3_endpoint) as outer:
        assert await outer.list_keys() == ["a/b/k"]
        assert await outer.get("a/b/k") == b"v"


# ~10 s against moto (it serves ~130 PUTs/s), hence `slow`; the small-page test
# below covers the same paginator loop by default.
@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.asyncio
async def test_list_keys_pages_past_1000_keys(blob: S3Blob) -> None:
    keys = [f"k{i:05d}" for i in range(1003)]
    shuffled = random.Random(1).sample(keys, len(keys))
    await _set_many(blob, shuffled)
    before = blob.statistics().list_pages
    assert await blob.list_keys() == keys
    assert blob.statistics().list_pages - before == 2  # S3's 1000 per page, then 3


@pytest.mark.s3
@pytest.mark.asyncio
async def test_list_keys_pages_with_small_pages(blob: S3Blob) -> None:
    keys = [f"p/{i:02d}" for i in range(20)]
    await _set_many(blob, keys)
    blob.list_page_size = 7
    before = blob.statistics().list_pages
    assert await blob.list_keys("p/") == keys
    assert blob.statistics().list_pages - before == 3


@pytest.mark.s3
@pytest.mark.asyncio
async def test_large_value_goes_through_multipart(
    blob: S3Blob, s3_bucket: str, raw_client: S3Client
) -> None:
    value = random.Random(2).randbytes(10 * MIB + 12345)
    await blob.set("big", value)
    stats = blob.statistics()
    assert (stats.multipart_sets, stats.parts, stats.puts) == (1, 2, 0)
    assert await blob.get("big") == value
    head = await raw_client.head_object(Bucket=s3_bucket, Key=f"{blob.prefix}/big")
    assert head["ETag"].strip('"').endswith("-2"), head["ETag"]
    assert head["ContentLength"] == len(value)


@pytest.mark.s3
@pytest.mark.asyncio
async def test_multipart_threshold_is_inclusive(
    s3_endpoint: str, s3_bucket: str, raw_client: S3Client
) -> None:
    async with await S3Blob.open(
        s3_bucket, _prefix(), endpoint=s3_endpoint, multipart_threshold=1000
    ) as b:
        await b.set("below", b"x" * 999)
        await b.set("at", b"y" * 1000)
        assert (b.statistics().puts, b.statistics().multipart_sets) == (1, 1)
        assert await b.get("below") == b"x" * 999
        assert await b.get("at") == b"y" * 1000
        head = await raw_client.head_object(Bucket=s3_bucket, Key=f"{b.prefix}/at")
        assert head["ETag"].strip('"').endswith("-1")
        uploads = await raw_client.list_multipart_uploads(Bucket=s3_bucket, Prefix=b.prefix)
        assert uploads.get("Uploads", []) == []


@pytest.mark.s3
@pytest.mark.asyncio
async def test_invalid_keys_are_usage_errors(blob: S3Blob) -> None:
    for key in ["", "x" * 1025]:
        with pytest.raises(InvalidUsage):
            await blob.get(key)
        with pytest.raises(InvalidUsage):
            await blob.set(key, b"")
        with pytest.raises(InvalidUsage):
            await blob.delete(key)
    # Valid for the contract, too long for S3 once prefixed.
    with pytest.raises(InvalidUsage, match="1024-byte"):
        await blob.set("é" * 1000, b"")


@pytest.mark.s3
@pytest.mark.asyncio
async def test_missing_bucket_is_a_clear_determinate_error(s3_endpoint: str) -> None:
    bucket = f"coordsim-missing-{uuid.uuid4().hex[:12]}"
    with pytest.raises(Determinate) as info:
        await S3Blob.open(bucket, endpoint=s3_endpoint)
    assert str(info.value) == f"S3 bucket {bucket!r} not found at {s3_endpoint}"
    # Unchecked, each operation says what S3 said; a failed write there did not apply.
    async with await S3Blob.open(bucket, endpoint=s3_endpoint, check=False) as b:
        for op in (b.get("k"), b.set("k", b"v"), b.list_keys()):
            with pytest.raises(Determinate, match="NoSuchBucket") as err:
                await op
            assert "\n" not in str(err.value)
        assert await b.delete("k") is False  # HeadObject cannot tell a missing bucket


@pytest.mark.asyncio
@pytest.mark.usefixtures("fake_aws_credentials")
async def test_unreachable_endpoint_fails_fast_with_one_line() -> None:
    start = time.monotonic()
    with pytest.raises(Determinate) as info:
        await S3Blob.open("bucket", endpoint="http://127.0.0.1:1")
    assert time.monotonic() - start < 5
    assert str(info.value) == "S3 endpoint http://127.0.0.1:1 unreachable: Connection refused"
    # The refused connection proves a write never left: Determinate, not Indeterminate.
    async with await S3Blob.open("bucket", endpoint="http://127.0.0.1:1", check=False) as b:
        with pytest.raises(Determinate, match="Connection refused"):
            await b.set("k", b"v")
        with pytest.raises(Determinate):
            await b.delete("k")


@pytest.mark.asyncio
async def test_open_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidUsage):
        await S3Blob.open("", check=False)
    with pytest.raises(InvalidUsage):
        await S3Blob.open("a/b", check=False)
    with pytest.raises(InvalidUsage):
        await S3Blob.open("b", part_size=MIB, check=False)
    with pytest.raises(InvalidUsage):
        await S3Blob.open("b", multipart_threshold=0, check=False)
    for endpoint in ("127.0.0.1:9000", "ftp://host", "http://"):
        with pytest.raises(InvalidUsage, match="endpoint"):
            await S3Blob.open("b", endpoint=endpoint, check=False)


# --- Classification ---------------------------------------------------------------------


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": "msg"},
            "ResponseMetadata": {
                "HTTPStatusCode": status,
                "HTTPHeaders": {},
                "RequestId": "",
                "HostId": "",
                "RetryAttempts": 0,
            },
        },
        "PutObject",
    )


_ConnectionKey = namedtuple(
    "_ConnectionKey", "host port is_ssl ssl proxy proxy_auth proxy_headers_hash"
)


def _refused() -> aiohttp.ClientConnectorError:
    key = _ConnectionKey("127.0.0.1", 1, False, True, None, None, None)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(errno.ECONNREFUSED, "refused"))  # type: ignore[arg-type]


_URL = "http://127.0.0.1:9/b/k"

WRITE_CASES: list[tuple[str, BaseException, type[Exception]]] = [
    ("access-denied", _client_error("AccessDenied", 403), Determinate),
    ("no-such-bucket", _client_error("NoSuchBucket", 404), Determinate),
    ("invalid-request", _client_error("InvalidRequest", 400), Determinate),
    ("precondition-failed", _client_error("PreconditionFailed", 412), Determinate),
    ("slow-down", _client_error("SlowDown", 503), Determinate),
    ("throttling-any-status", _client_error("Throttling", 400), Determinate),
    ("internal-error", _client_error("InternalError", 500), Indeterminate),
    ("service-unavailable", _client_error("ServiceUnavailable", 503), Indeterminate),
    ("bad-gateway", _client_error("502", 502), Indeterminate),
    ("refused", EndpointConnectionError(endpoint_url=_URL, error=_refused()), Determinate),
    (
        "reset-mid-request",
        EndpointConnectionError(
            endpoint_url=_URL, error=aiohttp.ClientOSError(errno.ECONNRESET, "reset")
        ),
        Indeterminate,
    ),
    ("connect-timeout", ConnectTimeoutError(endpoint_url=_URL, error="timeout"), Determinate),
    ("read-timeout", ReadTimeoutError(endpoint_url=_URL, error="timeout"), Indeterminate),
    ("closed", ConnectionClosedError(endpoint_url=_URL, error="closed"), Indeterminate),
    ("no-credentials", NoCredentialsError(), Determinate),
    ("unknown", RuntimeError("?"), Indeterminate),
]


@pytest.mark.parametrize(("exc", "tier"), [pytest.param(e, t, id=n) for n, e, t in WRITE_CASES])
def test_classify_write(exc: BaseException, tier: type[Exception]) -> None:
    assert classify(exc, write=True) is tier


@pytest.mark.parametrize("exc", [pytest.param(e, id=n) for n, e, _ in WRITE_CASES])
def test_classify_read_is_always_determinate(exc: BaseException) -> None:
    assert classify(exc, write=False) is Determinate


def _http(status: str, body: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 %s\r\nContent-Type: application/xml\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (status.encode(), len(body), body)
    )


_INTERNAL_ERROR = _http(
    "500 Internal Server Error", b"<Error><Code>InternalError</Code><Message>boom</Message></Error>"
)


async def _fake_server(
    answer: Callable[[str], bytes | None],
) -> tuple[asyncio.Server, str, list[str]]:
    """An HTTP server on 127.0.0.1 that reads each request's headers and sends
    `answer(method)`, or hangs up without a word when that is None. Returns the
    server, its URL and the methods of the requests seen so far."""
    seen: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method = head.split(b" ", 1)[0].decode()
            seen.append(method)
            response = answer(method)
            if response is not None:
                writer.write(response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", seen


@pytest.mark.asyncio
@pytest.mark.usefixtures("fake_aws_credentials")
async def test_write_cut_off_mid_request_is_indeterminate_and_not_resent() -> None:
    server, url, seen = await _fake_server(lambda _: None)
    async with server, await S3Blob.open("bucket", endpoint=url, check=False) as b:
        with pytest.raises(Indeterminate):
            await b.set("k", b"v")
        assert seen == ["PUT"]  # neither botocore nor aiohttp sent it again
        with pytest.raises(Determinate):
            await b.get("k")


@pytest.mark.asyncio
@pytest.mark.usefixtures("fake_aws_credentials")
async def test_write_answered_500_is_indeterminate_and_not_retried() -> None:
    server, url, seen = await _fake_server(lambda _: _INTERNAL_ERROR)
    async with server, await S3Blob.open("bucket", endpoint=url, check=False) as b:
        with pytest.raises(Indeterminate, match=r"InternalError \(HTTP 500\): boom") as info:
            await b.set("k", b"v")
        assert "\n" not in str(info.value)
        assert seen == ["PUT"]
        seen.clear()
        with pytest.raises(Determinate, match="InternalError"):
            await b.get("k")
        assert seen == ["GET", "GET"]  # reads keep botocore's retry


@pytest.mark.asyncio
@pytest.mark.usefixtures("fake_aws_credentials")
async def test_failed_part_aborts_the_upload_and_is_determinate() -> None:
    initiated = _http(
        "200 OK",
        b"<InitiateMultipartUploadResult><Bucket>bucket</Bucket><Key>k</Key>"
        b"<UploadId>u1</UploadId></InitiateMultipartUploadResult>",
    )
    answers = {"POST": initiated, "PUT": _INTERNAL_ERROR, "DELETE": _http("204 No Content")}
    server, url, seen = await _fake_server(answers.get)
    async with (
        server,
        await S3Blob.open(
            "bucket", endpoint=url, check=False, multipart_threshold=1, part_size=5 * MIB
        ) as b,
    ):
        # Two parts; a failed part means CompleteMultipartUpload was never sent.
        with pytest.raises(Determinate, match="InternalError"):
            await b.set("k", bytes(6 * MIB))
        assert seen[0] == "POST"
        assert seen[-1] == "DELETE"  # the upload was aborted
        assert "PUT" in seen
