"""S3Blob: a Blob in an S3 bucket (or any S3-compatible server), via aiobotocore.

The invariant this module protects is the error tier: a failed `set` or
`delete` is `Determinate` only when the request provably did not apply (the
connection was refused, S3 answered 4xx or asked us to slow down), so a
request that can change a visible key is never resent (a resend could fail
determinately after the first send applied); botocore's retries are kept for
reads and for steps nobody can observe (multipart parts). How a failure is
classified, and the clients that send a write once, are `persist.s3_client`.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final
from urllib.parse import urlsplit

import anyio
from aiobotocore.session import get_session
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)

from persist.location import Blob, check_blob_key
from persist.s3_client import (
    NOT_FOUND_CODES,
    S3_ERRORS,
    classify,
    describe,
    error_code,
    http_status,
    open_client,
)
from sim.runtime.errors import Determinate, ExternalError, InvalidUsage
from sim.runtime.tasks import AsyncExitStack
from sim.runtime.urls import redact_url

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import CompletedPartTypeDef, PaginatorConfigTypeDef

__all__ = ["S3Blob", "S3BlobStatistics"]

MIB: Final = 1024 * 1024
#: S3 rejects multipart parts below 5 MiB (except the last) and uploads of > 10,000 parts.
MIN_PART_SIZE: Final = 5 * MIB
MAX_PART_SIZE: Final = 5 * 1024 * MIB
MAX_PARTS: Final = 10_000
MAX_KEY_BYTES: Final = 1024
_PART_CONCURRENCY: Final = 4
_ABORT_GRACE_SECONDS: Final = 5.0



@final
@dataclass(frozen=True, slots=True)
class S3BlobStatistics:
    """Requests an `S3Blob` has started, by kind (failed ones included)."""

    gets: int
    puts: int
    multipart_sets: int
    parts: int
    deletes: int
    lists: int
    list_pages: int


@final
class S3Blob(Blob):
    """A Blob whose keys are objects `prefix/key` in one S3 bucket.

    Open it with `S3Blob.open`. `set` is one PutObject below `multipart_threshold`
    bytes and a multipart upload at or above it; both replace the object
    atomically (S3 never shows a partial object). S3 is strongly consistent, so
    a `get` after a `set` sees it.

    Limit beyond the Blob contract: `prefix/key` may be at most 1024 bytes of
    UTF-8 (S3's key limit); longer keys raise `InvalidUsage`.
    """

    def __init__(
        self,
        *,
        stack: AsyncExitStack,
        client: S3Client,
        write_client: S3Client,
        bucket: str,
        prefix: str,
        where: str,
        multipart_threshold: int,
        part_size: int,
    ) -> None:
        """Internal: use `S3Blob.open`, which builds and checks the clients."""
        self._stack = stack
        # Reads and unobservable steps (parts, abort) go through `_client`, which
        # retries; PutObject, CompleteMultipartUpload and DeleteObject go through
        # `_write_client`, which never does: a retry after a timed-out attempt
        # could fail determinately although the first attempt applied.
        self._client = client
        self._write_client = write_client
        self.bucket = bucket
        self.prefix = prefix
        self._root = f"{prefix}/" if prefix else ""
        self._where = where
        self._multipart_threshold = multipart_threshold
        self._part_size = part_size
        #: Internal knob: MaxKeys per ListObjectsV2 page (None: S3's 1000). Tests set
        #: it to exercise pagination without writing thousands of keys.
        self.list_page_size: int | None = None
        self._gets = self._puts = self._multipart_sets = self._parts = 0
        self._deletes = self._lists = self._list_pages = 0

    @classmethod
    async def open(
        cls,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str = "us-east-1",
        multipart_threshold: int = 8 * MIB,
        part_size: int = 8 * MIB,
        check: bool = True,
    ) -> S3Blob:
        """Connects to `bucket` and returns a Blob storing keys under `prefix`.

        Args:
            bucket: an existing bucket.
            prefix: joined to keys with "/" ("a/b" and key "k" give object
                "a/b/k"); surrounding slashes are ignored. "" stores keys as is.
            endpoint: an S3-compatible server's URL (path-style addressing is
                used); None means AWS itself. Credentials come from botocore's
                default chain (the AWS_* environment variables, config files, ...).
            region: the bucket's region.
            multipart_threshold: values of at least this many bytes are uploaded
                in parts.
            part_size: bytes per part (>= 5 MiB; grown if a value would need more
                than 10,000 parts).
            check: make one cheap request (HeadBucket) now, so a wrong endpoint,
                bucket or credentials fail here rather than at first use.

        Raises:
            InvalidUsage: a malformed argument.
            Determinate: the check failed; the message says why, in one line.
        """
        if not isinstance(bucket, str) or not bucket or "/" in bucket:
            raise InvalidUsage(
                f"S3 bucket name must be a non-empty str without '/', got {bucket!r}"
            )
        if multipart_threshold < 1:
            raise InvalidUsage(f"multipart_threshold must be >= 1, got {multipart_threshold}")
        if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
            raise InvalidUsage(f"part_size must be in [5 MiB, 5 GiB], got {part_size}")
        where = redact_url(endpoint) if endpoint else f"AWS S3 ({region})"
        if endpoint is not None:
            parts = urlsplit(endpoint)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise InvalidUsage(
                    f"S3 endpoint must be an http(s)://host[:port] URL, got {where!r}"
                )
        stack = AsyncExitStack()
        try:
            session = get_session()
            client = await stack.enter_async_context(
                open_client(session, endpoint, region, attempts=2)
            )
            write_client = await stack.enter_async_context(
                open_client(session, endpoint, region, attempts=1)
            )
            blob = cls(
                stack=stack,
                client=client,
                write_client=write_client,
                bucket=bucket,
                prefix=prefix.strip("/"),
                where=where,
                multipart_threshold=multipart_threshold,
                part_size=part_size,
            )
            if check:
                await blob._check()
        except BaseException:
            await stack.aclose()
            raise
        return blob

    async def close(self) -> None:
        """Closes both HTTP clients. Idempotent."""
        await self._stack.aclose()

    def statistics(self) -> S3BlobStatistics:
        return S3BlobStatistics(
            gets=self._gets,
            puts=self._puts,
            multipart_sets=self._multipart_sets,
            parts=self._parts,
            deletes=self._deletes,
            lists=self._lists,
            list_pages=self._list_pages,
        )

    def __repr__(self) -> str:
        return f"S3Blob(bucket={self.bucket!r}, prefix={self.prefix!r}, at {self._where})"

    # --- Blob -----------------------------------------------------------------------------

    async def get(self, key: str) -> bytes | None:
        name = self._object_name(key)
        self._gets += 1
        try:
            response = await self._client.get_object(Bucket=self.bucket, Key=name)
            async with response["Body"] as body:
                return await body.read()
        except S3_ERRORS as exc:
            if isinstance(exc, ClientError) and error_code(exc) in NOT_FOUND_CODES:
                return None
            raise self._error("get", key, exc, write=False) from exc

    async def set(self, key: str, value: bytes) -> None:
        name = self._object_name(key)
        value = bytes(value)
        if len(value) >= self._multipart_threshold:
            await self._set_multipart(key, name, value)
            return
        self._puts += 1
        try:
            await self._write_client.put_object(Bucket=self.bucket, Key=name, Body=value)
        except S3_ERRORS as exc:
            raise self._error("set", key, exc, write=True) from exc

    async def delete(self, key: str) -> bool:
        """Removes `key`; returns True iff a value was there. Idempotent.

        A HeadObject decides the return value, then DeleteObject removes the key.
        Race: two concurrent deletes of one key may both return True, and a `set`
        landing between the two requests is deleted with the call returning True.
        Persist writes each key once and deletes it once, so neither arises there.
        """
        name = self._object_name(key)
        self._deletes += 1
        try:
            await self._client.head_object(Bucket=self.bucket, Key=name)
        except S3_ERRORS as exc:
            if isinstance(exc, ClientError) and error_code(exc) in NOT_FOUND_CODES:
                return False
            raise self._error("delete", key, exc, write=False) from exc
        try:
            await self._write_client.delete_object(Bucket=self.bucket, Key=name)
        except S3_ERRORS as exc:
            raise self._error("delete", key, exc, write=True) from exc
        return True

    async def list_keys(self, prefix: str = "") -> list[str]:
        self._lists += 1
        config: PaginatorConfigTypeDef = {}
        if self.list_page_size is not None:
            config["PageSize"] = self.list_page_size
        keys: list[str] = []
        strip = len(self._root)
        try:
            paginator = self._client.get_paginator("list_objects_v2")
            pages = paginator.paginate(
                Bucket=self.bucket, Prefix=self._root + prefix, PaginationConfig=config
            )
            async for page in pages:
                self._list_pages += 1
                keys.extend(obj["Key"][strip:] for obj in page.get("Contents", []) if "Key" in obj)
        except S3_ERRORS as exc:
            raise self._error("list", prefix, exc, write=False) from exc
        keys.sort()
        return keys

    # --- internals ------------------------------------------------------------------------

    def _object_name(self, key: str) -> str:
        check_blob_key(key)
        name = self._root + key
        if len(name.encode("utf-8")) > MAX_KEY_BYTES:
            raise InvalidUsage(
                f"S3 blob key {key!r} too long: prefix + key exceeds S3's {MAX_KEY_BYTES}-byte limit"
            )
        return name

    def _error(self, op: str, key: str, exc: BaseException, *, write: bool) -> ExternalError:
        tier = classify(exc, write=write)
        return tier(
            f"S3 {op} {key!r} in bucket {self.bucket!r} at {self._where} failed: {describe(exc)}"
        )

    async def _check(self) -> None:
        """HeadBucket, with the failure told in the user's terms."""
        try:
            await self._client.head_bucket(Bucket=self.bucket)
        except S3_ERRORS as exc:
            raise Determinate(self._check_message(exc)) from exc

    def _check_message(self, exc: BaseException) -> str:
        bucket, where = self.bucket, self._where
        if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
            return f"S3 endpoint {where} unreachable: {describe(exc)}"
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return (
                f"S3 at {where}: no usable AWS credentials "
                "(set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
            )
        if isinstance(exc, ClientError):
            status = http_status(exc)
            if status == 404 or error_code(exc) == "NoSuchBucket":
                return f"S3 bucket {bucket!r} not found at {where}"
            if status == 403:
                return f"S3 bucket {bucket!r} at {where}: access denied (check the AWS credentials)"
        return f"S3 bucket {bucket!r} at {where} unusable: {describe(exc)}"

    async def _set_multipart(self, key: str, name: str, value: bytes) -> None:
        """Uploads `value` in parts; only CompleteMultipartUpload changes what readers
        see, so a failure before it is `Determinate` whatever the failing step."""
        self._multipart_sets += 1
        try:
            created = await self._client.create_multipart_upload(
                Bucket=self.bucket, Key=name, ChecksumAlgorithm="CRC32"
            )
        except S3_ERRORS as exc:
            raise self._error("set", key, exc, write=False) from exc
        upload_id = created["UploadId"]
        try:
            parts = await self._upload_parts(name, upload_id, value)
        except BaseException as exc:
            await self._abort(name, upload_id)
            if isinstance(exc, S3_ERRORS):
                raise self._error("set", key, exc, write=False) from exc
            raise
        try:
            await self._write_client.complete_multipart_upload(
                Bucket=self.bucket, Key=name, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException as exc:
            # Best effort even when the outcome is open: if Complete applied, Abort
            # finds no upload; if not, it frees the parts. Either way the tier stands.
            await self._abort(name, upload_id)
            if isinstance(exc, S3_ERRORS):
                raise self._error("set", key, exc, write=True) from exc
            raise

    async def _upload_parts(
        self, name: str, upload_id: str, value: bytes
    ) -> list[CompletedPartTypeDef]:
        """Uploads the parts, a few at a time; the first failure cancels the rest and
        is raised as itself (not wrapped in an ExceptionGroup)."""
        size = max(self._part_size, -(-len(value) // MAX_PARTS))
        offsets = range(0, len(value), size)
        parts: list[CompletedPartTypeDef] = [{} for _ in offsets]
        failures: list[Exception] = []
        limiter = anyio.CapacityLimiter(_PART_CONCURRENCY)

        async def upload(index: int, offset: int, scope: anyio.CancelScope) -> None:
            async with limiter:
                self._parts += 1
                try:
                    response = await self._client.upload_part(
                        Bucket=self.bucket,
                        Key=name,
                        UploadId=upload_id,
                        PartNumber=index + 1,
                        Body=value[offset : offset + size],
                        ChecksumAlgorithm="CRC32",
                    )
                except S3_ERRORS as exc:
                    failures.append(exc)
                    scope.cancel()
                    return
            part: CompletedPartTypeDef = {"PartNumber": index + 1, "ETag": response["ETag"]}
            if checksum := response.get("ChecksumCRC32"):
                part["ChecksumCRC32"] = checksum
            parts[index] = part

        async with anyio.create_task_group() as tg:
            for index, offset in enumerate(offsets):
                tg.start_soon(upload, index, offset, tg.cancel_scope)
        if failures:
            raise failures[0]
        return parts

    async def _abort(self, name: str, upload_id: str) -> None:
        # Shielded and bounded: runs while a cancellation unwinds too. A failed
        # abort only leaves invisible parts behind (a bucket lifecycle rule for
        # incomplete uploads reclaims them), so its error must not mask the cause.
        with anyio.move_on_after(_ABORT_GRACE_SECONDS, shield=True):
            with suppress(*S3_ERRORS):
                await self._client.abort_multipart_upload(
                    Bucket=self.bucket, Key=name, UploadId=upload_id
                )
