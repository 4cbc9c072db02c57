"""The persist location: Blob and Consensus, the two storage primitives of seed 002.

Everything durable in coordsim sits on these two interfaces, so their contracts
(and the error tiers every caller relies on to decide whether a retry is safe)
live here, in the docstrings. Implementations are sibling modules chosen by URL
(`persist.open`).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Self, final

from sim.runtime.errors import InvalidUsage

__all__ = [
    "Blob",
    "CaSResult",
    "Consensus",
    "SeqNo",
    "VersionedData",
]


# --- Value types ------------------------------------------------------------------------


@final
@dataclass(frozen=True, order=True, slots=True)
class SeqNo:
    """A sequence number of one key's Consensus log (seed 002: a state's version)."""

    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise InvalidUsage(f"SeqNo must be >= 0, got {self.value}")

    @classmethod
    def minimum(cls) -> Self:
        """The sequence number of the first entry ever written to a key."""
        return cls(0)

    def next(self) -> SeqNo:
        return SeqNo(self.value + 1)

    def __str__(self) -> str:
        return f"v{self.value}"


@final
@dataclass(frozen=True, slots=True)
class VersionedData:
    """One entry of a Consensus log: opaque bytes at a sequence number."""

    seqno: SeqNo
    data: bytes


@final
class CaSResult(enum.Enum):
    """Outcome of `Consensus.compare_and_set`: an expected result, not an error."""

    COMMITTED = "committed"
    EXPECTATION_MISMATCH = "expectation-mismatch"


# --- Blob -------------------------------------------------------------------------------


class Blob(ABC):
    """A durable map from `str` keys to (possibly large) byte values.

    Persist writes every key at most once and never modifies it, so Blob need not
    be linearizable: a reader that misses a key just written may retry.

    Keys are non-empty strings of at most 1024 characters; an invalid key raises
    `InvalidUsage`. Every method may raise `ExternalError`: failed reads are
    `Determinate` (nothing was changed); failed writes and deletes are
    `Indeterminate` unless the implementation knows the request never arrived.
    """

    @abstractmethod
    async def get(self, key: str) -> bytes | None:
        """Returns the value stored at `key`, or None if there is none."""

    @abstractmethod
    async def set(self, key: str, value: bytes) -> None:
        """Maps `key` to `value`, replacing any previous value, atomically.

        Atomic means a concurrent or later `get` sees either the previous value
        or all of `value`, never a prefix. Idempotent: setting the same value
        twice is the same as once.
        """

    @abstractmethod
    async def delete(self, key: str) -> bool:
        """Removes `key`. Returns True iff a value was there. Idempotent."""

    @abstractmethod
    async def list_keys(self, prefix: str = "") -> list[str]:
        """Returns every key that starts with `prefix`, sorted.

        Keys set (or deleted) concurrently with the call may or may not appear.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook, most impls hold nothing
        """Releases connections. The Blob must not be used afterwards."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def check_blob_key(key: str) -> None:
    """Raises `InvalidUsage` unless `key` is a valid Blob key (shared by impls)."""
    if not isinstance(key, str) or not key or len(key) > 1024:
        raise InvalidUsage(f"invalid blob key {key!r}: must be a non-empty str of <= 1024 chars")


# --- Consensus --------------------------------------------------------------------------


class Consensus(ABC):
    """A linearizable, durable, per-key log of `VersionedData` (seed 002).

    Each key holds a totally ordered sequence of entries with strictly
    increasing, gap-free sequence numbers. Linearizable means: once a
    `compare_and_set` has returned COMMITTED, every later `head` (in real time,
    from any process) returns that entry or a newer one.

    Keys are non-empty strings of at most 256 characters. Misuse raises
    `InvalidUsage`. Failures of the store raise `ExternalError`: reads (`head`,
    `scan`) raise `Determinate`; `compare_and_set` and `truncate` raise
    `Determinate` only when the store says the statement did not apply (e.g.
    SQLSTATE 40001), else `Indeterminate`.
    """

    @abstractmethod
    async def head(self, key: str) -> VersionedData | None:
        """Returns the entry with the greatest seqno of `key`, or None if the key
        has never been written.

        Linearizable: reflects every `compare_and_set` committed before the call.
        """

    @abstractmethod
    async def compare_and_set(
        self, key: str, expected: SeqNo | None, new: VersionedData
    ) -> CaSResult:
        """Appends `new` iff the head of `key` is at `expected`.

        `expected` None means "the key has never been written". Requires
        `new.seqno == expected.next()` (or `SeqNo.minimum()` when `expected` is
        None), else `InvalidUsage`: this gap-free rule is what lets exactly one of
        any number of racing writers win each seqno.

        Returns COMMITTED if `new` is now the head, EXPECTATION_MISMATCH if the
        head was elsewhere (nothing written). After an `Indeterminate` error the
        caller must read `head` to learn whether `new` was written.
        """

    @abstractmethod
    async def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        """Returns up to `limit` (>= 1) entries of `key` with seqno >= `from_seqno`,
        in ascending seqno order, without gaps. Empty if there are none (including
        when they were truncated away).
        """

    @abstractmethod
    async def truncate(self, key: str, seqno: SeqNo) -> int:
        """Deletes every entry of `key` with seqno < `seqno`; returns how many.

        Refuses (`InvalidUsage`) a `seqno` above the head, or a key never written,
        so the head itself always survives. Idempotent.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook, most impls hold nothing
        """Releases connections. The Consensus must not be used afterwards."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def check_consensus_key(key: str) -> None:
    """Raises `InvalidUsage` unless `key` is a valid Consensus key."""
    if not isinstance(key, str) or not key or len(key) > 256:
        raise InvalidUsage(f"invalid consensus key {key!r}: must be a non-empty str of <= 256 chars")


def check_cas_seqnos(expected: SeqNo | None, new: VersionedData) -> None:
    """Enforces the gap-free rule of `Consensus.compare_and_set`."""
    want = SeqNo.minimum() if expected is None else expected.next()
    if new.seqno != want:
        raise InvalidUsage(
            f"compare_and_set: new.seqno must be {want} when expected is {expected}, got {new.seqno}"
        )


def check_scan_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidUsage(f"scan limit must be >= 1, got {limit}")
