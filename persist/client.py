"""Persist handles: write and read durable, definite collections (seed 002).

`PersistClient(blob, consensus, runtime)` is an async context manager: it owns
the background tasks (compaction, GC, lease heartbeats) of every handle it
opens, and cancels them on exit. `open(shard_id)` returns a `WriteHandle` and
a `ReadHandle`; each handle holds a lease in the shard state, renewed by its
heartbeat. A handle whose lease expired gets `LeaseExpiredError` on its next
use and must be reopened (`reopen_writer`, `reopen_reader`: a new id on the
re-read state, as Materialize re-registers an expired handle). An operation
refused with `LeaseExpiredError` did not take effect (one that may have, before
the lease ran out, raises `Indeterminate`), so it is retried on the new handle.

Writes put the batch into Blob under a writer-owned, write-once key and then
reference it from the state through the CaS loop; an idempotency token per
write makes the retry after an `Indeterminate` CaS safe.

This module has the client and the write side; `persist/read.py` the read side.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, final

import anyio

from persist.codec import DecodedBatches, Update, encode_batch
from persist.compaction import compact_once, plan_merge
from persist.frontier import Frontier
from persist.gc import collect, plan_gc
from persist.machine import (
    LeaseExpired,
    LeaseExpiredError,
    Machine,
    MachineConfig,
    UpperMismatch,
    append,
    expire_writer,
    heartbeat_writer,
    raise_refusal,
    register,
    register_reader,
    register_writer,
    tombstone,
)
from persist.read import Listen, ListenBatch, ReadHandle
from persist.state import HollowBatch
from sim.runtime.errors import ExternalError, InvalidUsage
from sim.runtime.retry import retry_external
from sim.runtime.tasks import TaskOwner

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from anyio.abc import TaskGroup

    from persist.location import Blob, Consensus
    from sim.runtime.core import Runtime

__all__ = [
    "Appended",
    "Listen",
    "ListenBatch",
    "PersistClient",
    "PersistConfig",
    "PersistStatistics",
    "ReadHandle",
    "UpperMismatch",
    "WriteHandle",
]


@final
@dataclass(frozen=True)
class Appended:
    """A successful append; `upper` is the shard's upper after it."""

    upper: Frontier


@final
@dataclass(frozen=True)
class PersistConfig:
    machine: MachineConfig = field(default_factory=MachineConfig)
    heartbeat_fraction: float = 0.25  # heartbeat every lease * this
    compaction: bool = True
    compactions_per_round: int = 16  # then other shards (and GC) get a turn
    backpressure_batches: int = 24  # writers wait while a shard has more batches


@final
@dataclass(frozen=True)
class PersistStatistics:
    """Counters of one client since it started, over all its shards."""

    cas_attempts: Mapping[str, int]  # Consensus compare_and_sets, by command kind
    cas_mismatches: Mapping[str, int]  # ... of which lost to a concurrent transition
    batches_written: int  # by appends (compaction outputs are counted in compactions)
    bytes_written: int  # encoded batch bytes written by appends
    compactions: int  # merges applied
    compactions_discarded: int  # merges whose inputs were gone (their blob deleted)
    gc_deleted_blobs: int  # batch blobs and rollups deleted by GC
    gc_truncated_entries: int  # Consensus diffs truncated by GC
    rollups_written: int
    state_fetches: int  # reads of the Consensus head (linearized state fetches)
    backpressure_waits: int  # times a writer waited for compaction to catch up
    maintenance_errors: int  # compaction/GC rounds cut short by an external error
    lease_reopens: int  # handles reopened after their lease expired


@dataclass
class _Counters:
    batches_written: int = 0
    bytes_written: int = 0
    compactions: int = 0
    compactions_discarded: int = 0
    gc_deleted_blobs: int = 0
    gc_truncated_entries: int = 0
    backpressure_waits: int = 0
    maintenance_errors: int = 0
    lease_reopens: int = 0
    pending: list[str] = field(default_factory=list)


class PersistClient(TaskOwner):
    """Opens shards on one Blob + Consensus location."""

    def __init__(
        self, blob: Blob, consensus: Consensus, runtime: Runtime, *, config: PersistConfig = PersistConfig()
    ) -> None:
        self.blob = blob
        self.consensus = consensus
        self.rt = runtime
        self.config = config
        self._machines: dict[str, Machine] = {}
        #: Readers of this process decode each batch once.
        self.decoded = DecodedBatches()
        self._tg: TaskGroup | None = None
        self._counters = _Counters()
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._truncated_below: dict[str, int] = {}
        self._compactor_id = self._new_id("c")

    def _start_background(self, tg: TaskGroup) -> None:
        tg.start_soon(self._maintenance)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{self.rt.unique_hex(64)}"

    async def machine(self, shard_id: str) -> Machine:
        m = self._machines.get(shard_id)
        if m is None:
            m = Machine(shard_id, self.blob, self.consensus, self.rt, self.config.machine)
            self._machines[shard_id] = m
        if m._state is None:
            await m.open()
        return m

    async def open(self, shard_id: str) -> tuple[WriteHandle, ReadHandle]:
        """A writer and a reader on `shard_id`, creating the shard if it is new."""
        return await self.open_writer(shard_id), await self.open_reader(shard_id)

    async def open_writer(self, shard_id: str, *, heartbeat: bool = True) -> WriteHandle:
        m = await self.machine(shard_id)
        wid = self._new_id("w")
        lease = m.cfg.lease_ms
        state, refusal = await m.apply("register_writer", lambda s: register_writer(s, wid, self.rt.wall_ms(), lease))
        raise_refusal(refusal, shard_id)
        handle = WriteHandle(self, m, wid, state.upper, heartbeat=heartbeat)
        if heartbeat:
            self._spawn_heartbeat(handle)
        return handle

    async def open_reader(
        self, shard_id: str, *, heartbeat: bool = True, poll_s: float | None = None, since: Frontier | None = None
    ) -> ReadHandle:
        """A reader of `shard_id`. `poll_s`: a reader in another process that
        has no PubSub (`ReadHandle`); None: this process's view, current at once.
        `since`: hold this since if the shard's since has not passed it (else
        the reader starts at the shard's since, as without it)."""
        m = await self.machine(shard_id)
        rid = self._new_id("r")
        lease = m.cfg.lease_ms
        state, refusal = await m.apply(
            "register_reader", lambda s: register_reader(s, rid, self.rt.wall_ms(), lease, since=since)
        )
        raise_refusal(refusal, shard_id)
        handle = ReadHandle(self, m, rid, state.readers[rid].since, poll_s=poll_s)
        if heartbeat:
            self._spawn_heartbeat(handle)
        return handle

    async def register(self, shard_id: str, name: str, value: str) -> None:
        """Records `value` under `name` in the shard's state: one compare-and-set
        through the CaS loop, none if it is already recorded. What an owner
        records when it sets a shard up (Materialize's applier version,
        schemas, critical since handles and their epochs); the state keeps it,
        nothing else reads it.

        Raises:
            InvalidUsage: the shard is tombstoned.
            ExternalError: Consensus kept failing past the retry deadline.
        """
        m = await self.machine(shard_id)
        _, refusal = await m.apply(f"register_{name.split('/', 1)[0]}", lambda s: register(s, name, value))
        raise_refusal(refusal, shard_id)

    async def reopen_writer(self, old: WriteHandle) -> WriteHandle:
        """A new writer in place of `old`, whose lease expired (a step of the
        process's clock past the lease, say): a new writer id registered on
        the re-read state, its `upper` the shard's; heartbeating if `old` did.
        `old` is retired. Counted in `lease_reopens`.

        Raises:
            InvalidUsage: the shard was tombstoned meanwhile.
            ExternalError: Consensus kept failing past the retry deadline
                (`old` stays retired: call again).
        """
        old._expired = True
        new = await self.open_writer(old.shard_id, heartbeat=old._heartbeat)
        self._counters.lease_reopens += 1
        return new

    async def reopen_reader(
        self, old: ReadHandle, *, heartbeat: bool = True, poll_s: float | None = None
    ) -> ReadHandle:
        """A new reader in place of `old`, whose lease expired: a new reader
        id registered on the re-read state, holding `old.since` again if the
        shard has not compacted past it meanwhile (another reader let it move:
        then the new `since` is later, and the caller must check it against
        what it still has to read). `old`'s listens end with it. Counted in
        `lease_reopens`.

        Raises:
            InvalidUsage: the shard was tombstoned meanwhile.
            ExternalError: Consensus kept failing past the retry deadline.
        """
        old._expired = True
        new = await self.open_reader(old.shard_id, heartbeat=heartbeat, poll_s=poll_s, since=old.since)
        self._counters.lease_reopens += 1
        return new

    def _spawn_heartbeat(self, handle: WriteHandle | ReadHandle) -> None:
        if self._tg is None:
            raise InvalidUsage("PersistClient must be used as `async with PersistClient(...)`")
        self._tg.start_soon(self._heartbeat, handle)

    async def _heartbeat(self, handle: WriteHandle | ReadHandle) -> None:
        """Renews `handle`'s lease every `lease * heartbeat_fraction` until the
        handle expires (by `expire()`, a failed use, or a refused renewal)."""
        lease = handle._m.cfg.lease_ms
        while True:
            await self.rt.sleep(lease / 1000 * self.config.heartbeat_fraction)
            if handle._expired:  # set by expire() or a failed use while we slept
                return
            try:
                renewed = await handle._renew_lease()
            except ExternalError:
                # The location is down past the retry deadline: try again next
                # period. If it stays down the lease lapses, which is what a lease
                # is for; crashing the client's task group would help nobody.
                continue
            if not renewed:
                return

    # Background maintenance: compaction and GC, one shard at a time.

    def _request_maintenance(self, shard_id: str) -> None:
        if shard_id not in self._counters.pending:
            self._counters.pending.append(shard_id)
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        self._wake.set()

    async def maintain(self, shard_id: str) -> None:
        """Asks for a round of compaction and GC on `shard_id` now (after a restart,
        say, or when an operator wants the state small) and waits for it."""
        m = await self.machine(shard_id)
        await m.fetch()  # GC plans from the state: see other processes' reader holds
        self._request_maintenance(shard_id)
        await self.wait_idle()

    async def wait_idle(self) -> None:
        """Waits until no compaction or GC work is pending (tests, benchmarks)."""
        await self._idle.wait()

    async def _maintenance(self) -> None:
        while True:
            if not self._counters.pending:
                self._idle.set()
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            shard_id = self._counters.pending[0]
            m = self._machines[shard_id]
            try:
                more = await self._maintain(m)
            except ExternalError:
                # Compaction and GC are best effort and resumable: whatever the
                # failed round did not finish is planned again from the state.
                # Counted, backed off, retried; a failing location must not take
                # the client (and every handle's lease heartbeat) down with it.
                self._counters.maintenance_errors += 1
                await self.rt.sleep(self.config.machine.retry.cap_s)
                continue
            if not more:
                self._counters.pending.remove(shard_id)
            elif len(self._counters.pending) > 1:
                self._counters.pending.append(self._counters.pending.pop(0))  # round robin

    async def _maintain(self, m: Machine) -> bool:
        """One bounded round of compaction then GC on `m`; True if work remains."""
        more = False
        state = m.state
        if state.upper.is_empty and state.since.is_empty and not state.tombstone:
            await m.apply("tombstone", tombstone)
        if self.config.compaction:
            for _ in range(self.config.compactions_per_round):
                outcome = await compact_once(m, self._compactor_id, self.decoded)
                if outcome is None:
                    break
                if outcome:
                    self._counters.compactions += 1
                else:
                    self._counters.compactions_discarded += 1
                    await m.fetch()
            else:
                more = True
        truncated = self._truncated_below.get(m.shard_id, 0)
        if plan_gc(m.state).has_work(truncated):
            result = await collect(m)
            self._counters.gc_deleted_blobs += result.deleted_blobs
            self._counters.gc_truncated_entries += result.truncated_entries
            self._truncated_below[m.shard_id] = max(truncated, result.truncated_below)
        return more

    async def _backpressure(self, m: Machine) -> None:
        """Holds a writer while compaction is behind (seed 002: persist
        backpressures writers rather than let the batch list grow without bound,
        which would make every state transition and read slower)."""
        limit = self.config.backpressure_batches
        if not self.config.compaction:
            return
        state = m.state
        while len(state.batches) > limit and plan_merge(state.batches) is not None:
            self._counters.backpressure_waits += 1
            self._request_maintenance(m.shard_id)
            try:
                state = await m.wait_for_change()
            except ExternalError:
                return  # the append has landed: do not report it failed over a wait

    def statistics(self) -> PersistStatistics:
        attempts: dict[str, int] = {}
        mismatches: dict[str, int] = {}
        rollups = fetches = 0
        for m in self._machines.values():
            for k, v in m.cas_attempts.items():
                attempts[k] = attempts.get(k, 0) + v
            for k, v in m.cas_mismatches.items():
                mismatches[k] = mismatches.get(k, 0) + v
            rollups += m.rollups_written
            fetches += m.fetches
        c = self._counters
        return PersistStatistics(
            MappingProxyType(dict(sorted(attempts.items()))),
            MappingProxyType(dict(sorted(mismatches.items()))),
            c.batches_written,
            c.bytes_written,
            c.compactions,
            c.compactions_discarded,
            c.gc_deleted_blobs,
            c.gc_truncated_entries,
            rollups,
            fetches,
            c.backpressure_waits,
            c.maintenance_errors,
            c.lease_reopens,
        )


def _check_times(updates: Sequence[Update], lower: Frontier, upper: Frontier) -> None:
    if lower.is_empty:
        raise InvalidUsage("cannot append at or after the empty frontier (the shard is closed)")
    if upper < lower:
        raise InvalidUsage(f"new upper {upper} is less than lower {lower}")
    assert lower.ts is not None
    for u in updates:
        if u.ts < lower.ts or (upper.ts is not None and u.ts >= upper.ts):
            raise InvalidUsage(f"update at ts {u.ts} is outside [{lower.ts}, {upper})")


@final
class WriteHandle:
    """Appends to one shard. One request at a time (seed 002's backpressure)."""

    def __init__(
        self, client: PersistClient, machine: Machine, writer_id: str, upper: Frontier, *, heartbeat: bool = True
    ) -> None:
        self._client = client
        self._m = machine
        self.writer_id = writer_id
        self.shard_id = machine.shard_id
        self.upper = upper
        self._expired = False
        self._heartbeat = heartbeat  # kept by a handle reopened in its place
        self._lock = anyio.Lock()

    async def append(
        self, updates: Iterable[Update], lower: Frontier | int, upper: Frontier | int
    ) -> Appended | UpperMismatch:
        """Appends `updates` (times in `[lower, upper)`) by possibly replicated writers
        writing identical data: a range already written by a replica is skipped.
        Returns `UpperMismatch` if the shard's upper is below `lower` (a gap)."""
        rows, lo, hi = list(updates), Frontier.of(lower), Frontier.of(upper)
        _check_times(rows, lo, hi)
        while True:
            result = await self._write(rows, lo, hi, expected=None)
            if isinstance(result, Appended):
                return result
            current = result.current
            if current < lo or current.is_empty:
                return result
            # A replica wrote [lower, current) already: append only the rest.
            assert current.ts is not None
            rows = [u for u in rows if u.ts >= current.ts]
            lo = current

    async def compare_and_append(
        self, updates: Iterable[Update], expected_upper: Frontier | int, new_upper: Frontier | int
    ) -> Appended | UpperMismatch:
        """Appends `updates` iff the shard's upper is `expected_upper`, linearized
        with every other writer; else returns `UpperMismatch(current upper)`.

        Raises:
            LeaseExpiredError: this writer's lease expired; the append was not
                applied (determinate: reopen the writer and retry).
            Indeterminate: the append may have applied before the lease
                expired, or Consensus failed mid-way past the retry deadline.
        """
        rows, lo, hi = list(updates), Frontier.of(expected_upper), Frontier.of(new_upper)
        _check_times(rows, lo, hi)
        return await self._write(rows, lo, hi, expected=lo)

    async def _write(
        self, rows: list[Update], lower: Frontier, upper: Frontier, *, expected: Frontier | None
    ) -> Appended | UpperMismatch:
        if self._expired:
            raise LeaseExpiredError(f"writer {self.writer_id} of shard {self.shard_id} expired; reopen it")
        async with self._lock:
            rt, blob, counters = self._client.rt, self._client.blob, self._client._counters
            token = rt.unique_hex()
            key: str | None = None
            size = 0
            if rows:
                data = encode_batch(rows)
                key = f"{self.shard_id}/b/{self.writer_id}/{token}"
                size = len(data)
                await retry_external(rt, functools.partial(blob.set, key, data), idempotent=True)
                self._client.decoded.wrote(key, tuple(rows))
            assert lower.ts is not None
            batch = HollowBatch(key, lower.ts, upper, 0, len(rows), size)
            lease = self._m.cfg.lease_ms
            state, refusal = await self._m.apply(
                "append" if expected is None else "compare_and_append",
                lambda s: append(
                    s, writer_id=self.writer_id, token=token, batch=batch,
                    expected_upper=expected, now_ms=rt.wall_ms(), lease_ms=lease,
                ),
            )
            if refusal is not None:
                if key is not None:
                    # The refusal is definite (re-checked on fresh state), so the blob
                    # is ours alone; if deleting it fails it leaks, the answer stands.
                    with contextlib.suppress(ExternalError):
                        await retry_external(rt, functools.partial(blob.delete, key), idempotent=True)
                if isinstance(refusal, UpperMismatch):
                    self.upper = refusal.current
                    return refusal
                self._expired = isinstance(refusal, LeaseExpired)
                raise_refusal(refusal, self.shard_id)
            if rows:
                counters.batches_written += 1
                counters.bytes_written += size
                self._client._request_maintenance(self.shard_id)
                await self._client._backpressure(self._m)
            if state.upper.is_empty:
                self._client._request_maintenance(self.shard_id)  # maybe finished
            self.upper = state.upper
            return Appended(state.upper)

    async def fetch_recent_upper(self) -> Frontier:
        """The shard's upper, linearized (reads the Consensus head)."""
        state = await self._m.fetch()
        assert state is not None
        self.upper = state.upper
        return state.upper

    async def expire(self) -> None:
        """Retires this writer; it cannot be used again."""
        self._expired = True
        await self._m.apply("expire_writer", lambda s: expire_writer(s, self.writer_id))

    async def _renew_lease(self) -> bool:
        """One heartbeat (`PersistClient._heartbeat`); False once the lease is gone."""
        lease = self._m.cfg.lease_ms
        _, refusal = await self._m.apply(
            "heartbeat_writer",
            lambda s: heartbeat_writer(s, self.writer_id, self._client.rt.wall_ms(), lease),
        )
        if refusal is not None:
            self._expired = True
        return refusal is None
