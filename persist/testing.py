"""Conformance suites for Blob and Consensus, run on every implementation.

Pytest-free so any caller (tests, `coordsim location check`) can run them:
`await check_blob(make)` / `await check_consensus(make)` where `make` opens a
fresh handle. Each check works under fresh random keys so runs never interfere,
even against a shared server.

With `reliable=False` (the fault-injecting wrappers) operations may fail: the
checks then retry `Determinate` errors, resolve `Indeterminate` writes by reading
back, and assert only what the contract still promises.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, TypeVar

import anyio

from persist.location import Blob, CaSResult, Consensus, SeqNo, VersionedData
from sim.runtime.conformance import ConformanceFailure, expect, fresh_name
from sim.runtime.errors import Determinate, ExternalError, Indeterminate, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["ConformanceFailure", "check_blob", "check_consensus"]

T = TypeVar("T")





async def _retry(reliable: bool, op: Callable[[], Awaitable[T]], attempts: int = 200) -> T:
    """Runs a read (or idempotent write): retries Determinate and, since the op is
    idempotent, Indeterminate errors too, when the store is unreliable."""
    for _ in range(attempts - 1):
        try:
            return await op()
        except ExternalError:
            if reliable:
                raise
    return await op()


async def _expect_invalid(
    what: str, op: Callable[[], Awaitable[object]], *, reliable: bool = True
) -> None:
    """Misuse must raise InvalidUsage; on an unreliable store an injected
    external error may come first, so those are retried."""
    try:
        await _retry(reliable, op)
    except InvalidUsage:
        return
    raise ConformanceFailure(f"{what}: expected InvalidUsage")


# --- Blob -------------------------------------------------------------------------------


async def check_blob(
    make: Callable[[], Awaitable[Blob]], *, reliable: bool = True, large_size: int = 1 << 20
) -> None:
    """Runs every Blob check against `await make()`.

    Args:
        make: opens a handle on the store under test.
        reliable: False for fault-injecting stores.
        large_size: bytes of the large-value check (S3 uses > 8 MiB for multipart).
    """
    blob = await make()
    try:
        await _blob_basics(blob, reliable)
        await _blob_keys_and_listing(blob, reliable)
        await _blob_values(blob, reliable, large_size)
        await _blob_concurrency(blob, reliable)
        await _blob_misuse(blob)
    finally:
        await blob.close()


async def _blob_basics(blob: Blob, reliable: bool) -> None:
    key = fresh_name("blob")
    expect(await _retry(reliable, lambda: blob.get(key)) is None, "get of a missing key is None")
    await _retry(reliable, lambda: blob.set(key, b"one"))
    expect(await _retry(reliable, lambda: blob.get(key)) == b"one", "get returns what set wrote")
    await _retry(reliable, lambda: blob.set(key, b"two"))
    expect(await _retry(reliable, lambda: blob.get(key)) == b"two", "set replaces the value")
    await _retry(reliable, lambda: blob.set(key, b"two"))
    expect(await _retry(reliable, lambda: blob.get(key)) == b"two", "set is idempotent")
    if reliable:
        expect(await blob.delete(key) is True, "delete of a present key returns True")
        expect(await blob.delete(key) is False, "delete of a missing key returns False")
    else:
        await _retry(reliable, lambda: blob.delete(key))
    expect(await _retry(reliable, lambda: blob.get(key)) is None, "get after delete is None")


async def _blob_keys_and_listing(blob: Blob, reliable: bool) -> None:
    prefix = fresh_name("list") + "/"
    suffixes = ["a", "b/c", "b/d/e", "x y", "ü-ß", "a//b", ".hidden", "..", "%41", "b/", "z" * 200]
    for s in suffixes:
        await _retry(reliable, lambda s=s: blob.set(prefix + s, s.encode()))  # type: ignore[misc]
    for s in suffixes:
        got = await _retry(reliable, lambda s=s: blob.get(prefix + s))  # type: ignore[misc]
        expect(got == s.encode(), f"key {prefix + s!r} round-trips")
    listed = await _retry(reliable, lambda: blob.list_keys(prefix))
    expect(listed == sorted(prefix + s for s in suffixes), f"list_keys(prefix) is exact and sorted: {listed}")
    sub = await _retry(reliable, lambda: blob.list_keys(prefix + "b/"))
    expect(
        sub == sorted(prefix + s for s in suffixes if s.startswith("b/")),
        f"list_keys of a sub-prefix: {sub}",
    )
    everything = await _retry(reliable, lambda: blob.list_keys())
    expect(set(listed) <= set(everything), "list_keys() includes every key")
    expect(everything == sorted(everything), "list_keys() is sorted")
    expect(await _retry(reliable, lambda: blob.list_keys(fresh_name("none"))) == [], "empty listing")
    for s in suffixes:
        await _retry(reliable, lambda s=s: blob.delete(prefix + s))  # type: ignore[misc]
    expect(await _retry(reliable, lambda: blob.list_keys(prefix)) == [], "deleted keys are not listed")


async def _blob_values(blob: Blob, reliable: bool, large_size: int) -> None:
    key = fresh_name("values")
    for value in (b"", bytes(range(256)) * 4, b"\x00" * 3):
        await _retry(reliable, lambda v=value: blob.set(key, v))  # type: ignore[misc]
        got = await _retry(reliable, lambda: blob.get(key))
        expect(got == value, f"a {len(value)}-byte value round-trips exactly")
    large = uuid.uuid4().bytes * (large_size // 16 + 1)
    large = large[:large_size]
    await _retry(reliable, lambda: blob.set(key, large))
    got = await _retry(reliable, lambda: blob.get(key))
    expect(got == large, f"a {large_size}-byte value round-trips exactly")
    await _retry(reliable, lambda: blob.delete(key))


async def _blob_concurrency(blob: Blob, reliable: bool) -> None:
    prefix = fresh_name("concurrent") + "/"
    key = prefix + "atomic"
    old, new = b"o" * 200_000, b"n" * 300_000
    await _retry(reliable, lambda: blob.set(key, old))
    seen: list[bytes | None] = []

    async def writer(i: int) -> None:
        await _retry(reliable, lambda: blob.set(f"{prefix}k{i:03d}", str(i).encode()))

    async def overwrite() -> None:
        await _retry(reliable, lambda: blob.set(key, new))

    async def reader() -> None:
        for _ in range(20):
            seen.append(await _retry(reliable, lambda: blob.get(key)))

    async with anyio.create_task_group() as tg:
        for i in range(32):
            tg.start_soon(writer, i)
        tg.start_soon(reader)
        tg.start_soon(overwrite)
        tg.start_soon(reader)
    expect(all(v in (old, new) for v in seen), "a concurrent get sees the old or the new value, whole")
    keys = await _retry(reliable, lambda: blob.list_keys(prefix + "k"))
    expect(keys == [f"{prefix}k{i:03d}" for i in range(32)], "32 concurrent sets all land")
    for k in [*keys, key]:
        await _retry(reliable, lambda k=k: blob.delete(k))  # type: ignore[misc]


async def _blob_misuse(blob: Blob) -> None:
    await _expect_invalid("empty key", lambda: blob.get(""))
    await _expect_invalid("overlong key", lambda: blob.set("k" * 1025, b""))


# --- Consensus --------------------------------------------------------------------------


async def check_consensus(
    make: Callable[[], Awaitable[Consensus]], *, reliable: bool = True, racers: int = 32
) -> None:
    """Runs every Consensus check against `await make()`.

    Args:
        make: opens a handle on the store under test.
        reliable: False for fault-injecting stores.
        racers: tasks racing `compare_and_set` on one key.
    """
    consensus = await make()
    try:
        await _consensus_basics(consensus, reliable)
        await _consensus_scan(consensus, reliable)
        await _consensus_truncate(consensus, reliable)
        await _consensus_race(consensus, reliable, racers)
        await _consensus_misuse(consensus)
    finally:
        await consensus.close()


async def _cas(
    c: Consensus, reliable: bool, key: str, expected: SeqNo | None, data: bytes
) -> CaSResult:
    """A single writer's CaS; an Indeterminate outcome is resolved by reading the
    head back (sound because no one else writes this key)."""
    new = VersionedData(SeqNo.minimum() if expected is None else expected.next(), data)
    for _ in range(200):
        try:
            return await c.compare_and_set(key, expected, new)
        except Determinate:
            if reliable:
                raise
        except Indeterminate:
            if reliable:
                raise
            head = await _retry(reliable, lambda: c.head(key))
            if head == new:
                return CaSResult.COMMITTED
            if head is not None and head.seqno >= new.seqno:
                return CaSResult.EXPECTATION_MISMATCH
    raise ConformanceFailure("compare_and_set kept failing")


async def _write_log(c: Consensus, reliable: bool, key: str, n: int) -> list[VersionedData]:
    entries: list[VersionedData] = []
    expected: SeqNo | None = None
    for i in range(n):
        data = f"{key}:{i}".encode()
        result = await _cas(c, reliable, key, expected, data)
        expect(result is CaSResult.COMMITTED, f"single-writer CaS #{i} commits")
        expected = SeqNo.minimum() if expected is None else expected.next()
        entries.append(VersionedData(expected, data))
    return entries


async def _consensus_basics(c: Consensus, reliable: bool) -> None:
    key = fresh_name("basics")
    expect(await _retry(reliable, lambda: c.head(key)) is None, "head of a new key is None")
    first = VersionedData(SeqNo(0), b"first")
    expect(
        await _cas(c, reliable, key, None, b"first") is CaSResult.COMMITTED,
        "CaS(expected=None) on a new key commits",
    )
    expect(await _retry(reliable, lambda: c.head(key)) == first, "head is the committed entry")
    expect(
        await _cas(c, reliable, key, None, b"again") is CaSResult.EXPECTATION_MISMATCH,
        "CaS(expected=None) on a written key mismatches",
    )
    stale = await c.compare_and_set(key, SeqNo(5), VersionedData(SeqNo(6), b"x")) if reliable else None
    expect(stale in (None, CaSResult.EXPECTATION_MISMATCH), "CaS with a wrong expectation mismatches")
    expect(await _retry(reliable, lambda: c.head(key)) == first, "a mismatched CaS writes nothing")
    second = await _cas(c, reliable, key, SeqNo(0), b"second")
    expect(second is CaSResult.COMMITTED, "CaS at the head commits")
    head = await _retry(reliable, lambda: c.head(key))
    expect(head == VersionedData(SeqNo(1), b"second"), "head moves to the new entry")
    other = fresh_name("basics-other")
    expect(await _retry(reliable, lambda: c.head(other)) is None, "keys are independent")
    big = bytes(range(256)) * 1024
    expect(
        await _cas(c, reliable, key, SeqNo(1), big) is CaSResult.COMMITTED, "a 256 KiB entry commits"
    )
    got = await _retry(reliable, lambda: c.head(key))
    expect(got is not None and got.data == big, "a 256 KiB entry round-trips exactly")


async def _consensus_scan(c: Consensus, reliable: bool) -> None:
    key = fresh_name("scan")
    entries = await _write_log(c, reliable, key, 10)
    expect(await _retry(reliable, lambda: c.scan(key, SeqNo(0), 100)) == entries, "scan all")
    expect(await _retry(reliable, lambda: c.scan(key, SeqNo(0), 3)) == entries[:3], "scan limit")
    expect(await _retry(reliable, lambda: c.scan(key, SeqNo(4), 3)) == entries[4:7], "scan from")
    expect(await _retry(reliable, lambda: c.scan(key, SeqNo(9), 5)) == entries[9:], "scan the head")
    expect(await _retry(reliable, lambda: c.scan(key, SeqNo(10), 5)) == [], "scan past the head")
    expect(await _retry(reliable, lambda: c.scan(fresh_name("none"), SeqNo(0), 5)) == [], "scan a new key")


async def _consensus_truncate(c: Consensus, reliable: bool) -> None:
    key = fresh_name("truncate")
    entries = await _write_log(c, reliable, key, 10)
    if reliable:
        expect(await c.truncate(key, SeqNo(5)) == 5, "truncate returns the count deleted")
        expect(await c.truncate(key, SeqNo(5)) == 0, "truncate is idempotent")
        expect(await c.truncate(key, SeqNo(3)) == 0, "truncate below the low mark deletes nothing")
    else:
        await _retry(reliable, lambda: c.truncate(key, SeqNo(5)))
    expect(await _retry(reliable, lambda: c.scan(key, SeqNo(0), 100)) == entries[5:], "truncated")
    await _expect_invalid(
        "truncate above the head", lambda: c.truncate(key, SeqNo(11)), reliable=reliable
    )
    await _expect_invalid(
        "truncate a never-written key",
        lambda: c.truncate(fresh_name("n"), SeqNo(0)),
        reliable=reliable,
    )
    await _retry(reliable, lambda: c.truncate(key, SeqNo(9)))
    expect(await _retry(reliable, lambda: c.scan(key, SeqNo(0), 100)) == entries[9:], "head survives")
    expect(await _retry(reliable, lambda: c.head(key)) == entries[9], "head after truncate")
    expect(
        await _cas(c, reliable, key, SeqNo(9), b"after") is CaSResult.COMMITTED,
        "CaS continues after truncate",
    )


async def _consensus_race(c: Consensus, reliable: bool, racers: int) -> None:
    """`racers` tasks race CaS on one key until it reaches `target` entries:
    exactly one winner per seqno, a gap-free log, every entry its winner's value."""
    key = fresh_name("race")
    target = 3 * racers
    committed: dict[int, bytes] = {}
    attempted: dict[int, set[bytes]] = {}
    double_wins: list[int] = []
    refused = [0]

    async def racer(r: int) -> None:
        attempt = 0
        while True:
            head = await _retry(reliable, lambda: c.head(key))
            if head is not None and head.seqno.value + 1 >= target:
                return
            expected = None if head is None else head.seqno
            new = VersionedData(
                SeqNo.minimum() if expected is None else expected.next(), f"r{r}-{attempt}".encode()
            )
            attempt += 1
            attempted.setdefault(new.seqno.value, set()).add(new.data)
            try:
                result = await c.compare_and_set(key, expected, new)
            except Determinate:
                # Definitely not applied: a store at SERIALIZABLE (CockroachDB,
                # Postgres) answers a lost race so (40001); the caller retries,
                # within a bound, so a store that always fails cannot hang the suite.
                refused[0] += 1
                expect(refused[0] <= 100 * target, f"compare_and_set failed Determinate {refused[0]} times")
                continue
            except ExternalError:
                if reliable:
                    raise
                continue
            if result is CaSResult.COMMITTED:
                if new.seqno.value in committed:
                    double_wins.append(new.seqno.value)
                committed[new.seqno.value] = new.data

    async with anyio.create_task_group() as tg:
        for r in range(racers):
            tg.start_soon(racer, r)

    expect(not double_wins, f"two writers won seqnos {double_wins}")
    log = await _retry(reliable, lambda: c.scan(key, SeqNo(0), target + 10))
    expect([e.seqno.value for e in log] == list(range(target)), "the raced log is gap-free")
    for e in log:
        won = committed.get(e.seqno.value)
        if won is not None:
            expect(e.data == won, f"seqno {e.seqno} holds its reported winner's value")
        expect(e.data in attempted.get(e.seqno.value, set()), f"seqno {e.seqno} holds a value written at it")
    if reliable:
        expect(sorted(committed) == list(range(target)), "every seqno had exactly one reported winner")


async def _consensus_misuse(c: Consensus) -> None:
    key = fresh_name("misuse")
    await _expect_invalid("empty key", lambda: c.head(""))
    await _expect_invalid(
        "CaS(None) must write SeqNo(0)",
        lambda: c.compare_and_set(key, None, VersionedData(SeqNo(1), b"")),
    )
    await _expect_invalid(
        "CaS must write expected+1",
        lambda: c.compare_and_set(key, SeqNo(3), VersionedData(SeqNo(5), b"")),
    )
    await _expect_invalid("scan limit 0", lambda: c.scan(key, SeqNo(0), 0))
