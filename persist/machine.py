"""The shard state machine: pure commands applied through the CaS loop of seed 002.

Every command is a pure function `ShardState -> ShardState | Refusal`. The
`Machine` applies one by the loop of seed 002: take the latest known state,
expire leases, apply the command, `compare_and_set` the diff at `seqno + 1`;
on a mismatch fetch the newer state and go again. Commands are written to be
idempotent (an append carries a token, a downgrade is a max), so after an
`Indeterminate` CaS the loop simply re-applies the command to the fresh state:
if the first attempt landed, the command sees its own effect and does nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, final

import anyio

from persist.frontier import Frontier
from persist.location import Blob, CaSResult, Consensus, SeqNo, VersionedData
from persist.state import (
    Garbage,
    HollowBatch,
    ReaderState,
    ShardState,
    WriterState,
    apply_diff,
    decode_diff,
    decode_rollup,
    diff_states,
    encode_diff,
    encode_rollup,
)
from sim.runtime.errors import (
    CoordsimError,
    Determinate,
    ExternalError,
    Indeterminate,
    InvalidUsage,
)
from sim.runtime.retry import RetryPolicy, retry_external

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sim.runtime.core import Runtime

__all__ = [
    "LeaseExpired",
    "LeaseExpiredError",
    "Machine",
    "MachineConfig",
    "Refusal",
    "Rejected",
    "UpperMismatch",
    "raise_refusal",
    "rollup_key",
]


# --- Refusals: expected outcomes, not errors --------------------------------------------


@final
@dataclass(frozen=True)
class UpperMismatch:
    """The shard's upper was not the expected one; `current` is the true upper."""

    current: Frontier


@final
@dataclass(frozen=True)
class LeaseExpired:
    role: str  # "writer" | "reader"
    id: str


@final
@dataclass(frozen=True)
class Rejected:
    reason: str


Refusal = UpperMismatch | LeaseExpired | Rejected


class LeaseExpiredError(CoordsimError):
    """A handle's lease expired (its id is retired for good); open a new handle."""


def raise_refusal(refusal: Refusal | None, shard_id: str) -> None:
    """Turns a handle's refusal into its error (an expired lease, a rejected
    command); `UpperMismatch` is an answer, not an error, and is left to the caller."""
    if isinstance(refusal, LeaseExpired):
        raise LeaseExpiredError(f"{refusal.role} {refusal.id} of shard {shard_id} expired; reopen it")
    if isinstance(refusal, Rejected):
        raise InvalidUsage(f"shard {shard_id}: {refusal.reason}")


# --- Commands ---------------------------------------------------------------------------


def expire_leases(s: ShardState, now_ms: int) -> ShardState:
    """Drops writers and readers whose lease ran out; part of every transition."""
    writers = {w: st for w, st in s.writers.items() if st.lease_expiry_ms >= now_ms}
    readers = {r: st for r, st in s.readers.items() if st.lease_expiry_ms >= now_ms}
    if len(writers) == len(s.writers) and len(readers) == len(s.readers):
        return s
    return _with_readers(replace(s, writers=writers), readers)


def _with_readers(s: ShardState, readers: Mapping[str, ReaderState]) -> ShardState:
    """Sets readers and recomputes the shard since (min over readers; it never
    moves back, and stays put when there are no readers)."""
    since = s.since
    if readers:
        since = max(s.since, min(r.since for r in readers.values()))
    return replace(s, readers=dict(readers), since=since)


def register_writer(s: ShardState, writer_id: str, now_ms: int, lease_ms: int) -> ShardState | Refusal:
    if s.tombstone:
        return Rejected("shard is tombstoned")
    if writer_id in s.writers:
        return s
    w = WriterState(now_ms + lease_ms, s.upper)
    return replace(s, writers={**s.writers, writer_id: w})


def register_reader(
    s: ShardState, reader_id: str, now_ms: int, lease_ms: int, *, since: Frontier | None = None
) -> ShardState | Refusal:
    """A new reader at the shard's since, or at `since` if that is later (a
    reader reopened after its lease expired takes back the since it held, in
    the same transition, if the shard has not compacted past it meanwhile)."""
    if s.tombstone:
        return Rejected("shard is tombstoned")
    if reader_id in s.readers:
        return s
    r = ReaderState(s.since if since is None else max(s.since, since), s.seqno, now_ms + lease_ms)
    return _with_readers(s, {**s.readers, reader_id: r})


def register(s: ShardState, name: str, value: str) -> ShardState | Refusal:
    """Records `value` under `name` (unchanged, and so no CaS, if it already is)."""
    if s.tombstone:
        return Rejected("shard is tombstoned")
    if s.registrations.get(name) == value:
        return s
    return replace(s, registrations={**s.registrations, name: value})


def expire_writer(s: ShardState, writer_id: str) -> ShardState:
    return replace(s, writers={w: st for w, st in s.writers.items() if w != writer_id})


def expire_reader(s: ShardState, reader_id: str) -> ShardState:
    return _with_readers(s, {r: st for r, st in s.readers.items() if r != reader_id})


def heartbeat_writer(s: ShardState, writer_id: str, now_ms: int, lease_ms: int) -> ShardState | Refusal:
    w = s.writers.get(writer_id)
    if w is None:
        return LeaseExpired("writer", writer_id)
    return replace(s, writers={**s.writers, writer_id: replace(w, lease_expiry_ms=now_ms + lease_ms)})


def append(
    s: ShardState,
    *,
    writer_id: str,
    token: str,
    batch: HollowBatch,
    expected_upper: Frontier | None,
    now_ms: int,
    lease_ms: int,
) -> ShardState | Refusal:
    """Adds `batch` (description `[batch.lower, batch.upper)`) and advances the upper.

    `expected_upper` None is a plain `append` by possibly replicated writers:
    it needs the shard upper to be `batch.lower`, except that a batch wholly
    below the upper was already written by a replica (definite data) and is a
    no-op. Otherwise it is `compare_and_append`: the upper must be exactly it.
    """
    w = s.writers.get(writer_id)
    if w is None:
        return LeaseExpired("writer", writer_id)
    if w.last_token == token:
        return s  # this very append already landed (a retry after Indeterminate)
    lower = Frontier.at(batch.lower)
    w = WriterState(now_ms + lease_ms, max(w.upper, batch.upper), token)
    if expected_upper is not None and s.upper != expected_upper:
        return UpperMismatch(s.upper)
    if expected_upper is None and s.upper != lower:
        if batch.upper <= s.upper:
            return replace(s, writers={**s.writers, writer_id: w})
        return UpperMismatch(s.upper)
    batches = list(s.batches)
    if batch.key is None and batches and batches[-1].upper == lower:
        # An empty append only extends the last batch's description: no blob, no
        # new batch, which keeps idle tables' group-commit appends free.
        batches[-1] = replace(batches[-1], upper=batch.upper)
    elif batch.upper != lower:
        batches.append(batch)
    return replace(s, upper=batch.upper, batches=tuple(batches), writers={**s.writers, writer_id: w})


def downgrade_since(
    s: ShardState, *, reader_id: str, new_since: Frontier, seqno_hold: int, now_ms: int, lease_ms: int
) -> ShardState | Refusal:
    """Moves a reader's since and seqno hold forward (never back) and renews its
    lease; with `new_since` equal to the current since this is a heartbeat."""
    r = s.readers.get(reader_id)
    if r is None:
        return LeaseExpired("reader", reader_id)
    r = ReaderState(max(r.since, new_since), max(r.seqno_hold, seqno_hold), now_ms + lease_ms)
    return _with_readers(s, {**s.readers, reader_id: r})


def apply_compaction(
    s: ShardState, *, inputs: tuple[tuple[str | None, int], ...], output: HollowBatch
) -> ShardState | Refusal:
    """Replaces the consecutive batches `inputs` (identified by key and lower)
    with `output`; refused if they are no longer all there (another compaction
    won). The replaced blobs become garbage as of the new seqno.

    Idempotent: if `output` is already referenced (in the batches, or as garbage
    after a later merge replaced it), this very result landed on an earlier
    attempt whose CaS reported `Indeterminate`; refusing it would make the
    compactor delete a blob that the state (and readers) still reach."""
    # Batches are sorted by lower and partition time: binary searches, not scans,
    # so a shard with a long backlog of batches still compacts in O(log n) each.
    i = bisect.bisect_left(s.batches, output.lower, key=lambda b: b.lower)
    if output.key is not None and i < len(s.batches) and s.batches[i].key == output.key:
        return s
    n = len(inputs)
    if tuple((b.key, b.lower) for b in s.batches[i : i + n]) != inputs:
        if output.key is not None and any(g.key == output.key for g in s.garbage):
            return s  # landed, then merged again by a later compaction
        return Rejected("compaction inputs are gone")
    # The last input may since have been extended by empty appends.
    merged = replace(output, upper=s.batches[i + n - 1].upper)
    new_batches = (*s.batches[:i], merged, *s.batches[i + n :])
    seqno = s.seqno + 1
    # Garbage stays ordered by (seqno, key): the new entries go at the end.
    added = sorted(k for k, _ in inputs if k is not None and k != output.key)
    return replace(s, batches=new_batches, garbage=s.garbage + tuple(Garbage(k, seqno, "batch") for k in added))


def tombstone(s: ShardState) -> ShardState | Refusal:
    """Retires a finished shard (seed 002): once its upper and since are both
    empty nothing can be written or read, so every batch becomes garbage, every
    handle is dropped and new ones are refused. The state itself stays, as the
    tombstone."""
    if s.tombstone:
        return s
    if not (s.upper.is_empty and s.since.is_empty):
        return Rejected(f"shard is not finished (upper {s.upper}, since {s.since})")
    seqno = s.seqno + 1
    keys = sorted(b.key for b in s.batches if b.key is not None)
    garbage = s.garbage + tuple(Garbage(k, seqno, "batch") for k in keys)
    return replace(s, tombstone=True, batches=(), writers={}, readers={}, garbage=garbage)


def add_rollup(s: ShardState, seqno: int) -> ShardState:
    if seqno in s.rollups:
        return s
    return replace(s, rollups=tuple(sorted((*s.rollups, seqno))))


def finish_gc(s: ShardState, *, deleted: frozenset[str], dropped_rollups: frozenset[int]) -> ShardState:
    return replace(
        s,
        garbage=tuple(g for g in s.garbage if g.key not in deleted),
        rollups=tuple(r for r in s.rollups if r not in dropped_rollups),
    )


# --- The machine ------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class MachineConfig:
    rollup_interval: int = 128
    lease_ms: int = 60_000
    poll_interval_s: float = 0.05
    scan_page: int = 256
    retry: RetryPolicy = field(default_factory=RetryPolicy)


def rollup_key(shard_id: str, seqno: int) -> str:
    """Rollups are named by seqno: the state at a seqno is a pure function of the
    log, so whoever writes it writes the same bytes."""
    return f"{shard_id}/rollup/v{seqno:020d}"


class Machine:
    """One shard's state, kept current through Consensus, shared by a client's handles."""

    def __init__(
        self, shard_id: str, blob: Blob, consensus: Consensus, rt: Runtime, cfg: MachineConfig
    ) -> None:
        self.shard_id = shard_id
        self.blob = blob
        self.consensus = consensus
        self.rt = rt
        self.cfg = cfg
        self._state: ShardState | None = None
        self._changed = asyncio.Event()
        self.cas_attempts: Counter[str] = Counter()
        self.cas_mismatches: Counter[str] = Counter()
        self.rollups_written = 0
        self.rollup_failures = 0
        self.fetches = 0

    @property
    def state(self) -> ShardState:
        """The latest state this process knows (not linearized: see `fetch`)."""
        assert self._state is not None, "machine used before open()"
        return self._state

    def _set(self, state: ShardState) -> None:
        if self._state is None or state.seqno > self._state.seqno:
            self._state = state
            self._changed.set()
            self._changed = asyncio.Event()

    # Reading the state.

    async def fetch(self) -> ShardState | None:
        """The latest state (linearized: reads the Consensus head), or None if the
        shard was never initialized. Catches up from the cached state by diffs,
        or rebuilds from the newest rollup plus the diffs after it."""
        while True:
            self.fetches += 1
            head = await retry_external(
                self.rt, lambda: self.consensus.head(self.shard_id), idempotent=True, policy=self.cfg.retry
            )
            if head is None:
                return None
            cached = self._state
            if cached is not None and cached.seqno == head.seqno.value:
                return cached
            hd = decode_diff(head.data)
            if cached is not None and cached.seqno >= (hd.latest_rollup or 0):
                state = await self._replay(cached, cached.seqno + 1, head.seqno.value)
            else:
                base: ShardState | None = None
                start = 0
                if hd.latest_rollup is not None:
                    key = rollup_key(self.shard_id, hd.latest_rollup)
                    data = await retry_external(
                        self.rt, functools.partial(self.blob.get, key), idempotent=True, policy=self.cfg.retry
                    )
                    if data is None:
                        continue  # garbage-collected under us: a newer rollup exists
                    base = decode_rollup(data)
                    start = base.seqno + 1
                state = await self._replay(base, start, head.seqno.value)
            if state is None:
                continue  # truncated under us; start over from the new head
            self._set(state)
            return self._state

    async def _replay(self, base: ShardState | None, start: int, end: int) -> ShardState | None:
        """Applies the diffs `start..=end` to `base`; None if some were truncated."""
        state = base
        seqno = start
        while seqno <= end:
            page = await retry_external(
                self.rt,
                functools.partial(self.consensus.scan, self.shard_id, SeqNo(seqno), self.cfg.scan_page),
                idempotent=True,
                policy=self.cfg.retry,
            )
            if not page or page[0].seqno.value != seqno:
                return None
            for entry in page:
                if entry.seqno.value > end:
                    break
                state = apply_diff(state, decode_diff(entry.data))
                seqno = entry.seqno.value + 1
        return state

    async def open(self) -> ShardState:
        """Fetches the state, initializing the shard if it was never written."""
        state = await self.fetch()
        while state is None:
            init = ShardState(shard_id=self.shard_id, seqno=0)
            diff = diff_states(None, init, "init")
            self.cas_attempts["init"] += 1
            try:
                result = await self.consensus.compare_and_set(
                    self.shard_id, None, VersionedData(SeqNo(0), encode_diff(diff))
                )
            except (Determinate, Indeterminate):
                result = CaSResult.EXPECTATION_MISMATCH  # re-read: maybe it landed
            if result is CaSResult.COMMITTED:
                self._set(init)
            state = await self.fetch()
        return state

    async def wait_for_change(self) -> ShardState:
        """Waits until this process commits a newer state, or a poll interval
        passes, then returns the latest state (other processes are seen by polling)."""
        event = self._changed
        with anyio.move_on_after(self.cfg.poll_interval_s):
            await event.wait()
        state = await self.fetch()
        assert state is not None
        return state

    # Applying commands.

    async def apply(
        self, kind: str, command: Callable[[ShardState], ShardState | Refusal]
    ) -> tuple[ShardState, Refusal | None]:
        """Applies `command` through the CaS loop.

        Returns the resulting state and None, or the state the command was
        refused on and the refusal. A refusal is only ever returned after the
        command was re-evaluated on freshly fetched state, so it is linearized.

        Raises:
            Indeterminate: the command may have applied but could not be
                confirmed because its handle's lease expired meanwhile.
            ExternalError: Consensus kept failing past the retry deadline.
        """
        state = self.state
        fresh = False
        uncertain = False
        start = self.rt.now()
        attempt = 0
        while True:
            result = command(expire_leases(state, self.rt.wall_ms()))
            if isinstance(result, (UpperMismatch, LeaseExpired, Rejected)):
                if not fresh:
                    state, fresh = await self._fresh(), True
                    continue
                if uncertain and isinstance(result, LeaseExpired):
                    raise Indeterminate(f"{kind} on {self.shard_id} may have applied; its lease then expired")
                return state, result
            if result == state:
                return state, None
            new = result.with_seqno(state.seqno + 1)
            diff = diff_states(state, new, kind)
            self.cas_attempts[kind] += 1
            try:
                outcome = await self.consensus.compare_and_set(
                    self.shard_id, SeqNo(state.seqno), VersionedData(SeqNo(new.seqno), encode_diff(diff))
                )
            except (Determinate, Indeterminate) as exc:
                uncertain = uncertain or isinstance(exc, Indeterminate)
                if self.rt.now() - start >= self.cfg.retry.deadline_s:
                    raise
                await self.rt.sleep(self.cfg.retry.backoff(self.rt, attempt))
                attempt += 1
                state, fresh = await self._fresh(), True
                continue
            if outcome is CaSResult.COMMITTED:
                self._set(new)
                await self._maybe_rollup(new)
                return new, None
            self.cas_mismatches[kind] += 1
            state, fresh = await self._fresh(), True

    async def _fresh(self) -> ShardState:
        state = await self.fetch()
        assert state is not None, "an initialized shard has a head"
        return state

    async def _maybe_rollup(self, state: ShardState) -> None:
        """Writes a rollup once a rollup interval of diffs has accumulated since the
        last one (whoever commits next does it, so a crash only delays it)."""
        if state.seqno - (state.latest_rollup or 0) < self.cfg.rollup_interval:
            return
        data = encode_rollup(state)
        key = rollup_key(self.shard_id, state.seqno)
        seqno = state.seqno
        try:
            await retry_external(
                self.rt, lambda: self.blob.set(key, data), idempotent=True, policy=self.cfg.retry
            )
            self.rollups_written += 1
            await self.apply("add_rollup", lambda s: add_rollup(s, seqno))
        except ExternalError:
            # The command that got us here has committed; failing it now would
            # report a landed append as failed. The next commit tries again. (A
            # rollup blob written but never added is left behind: a known leak.)
            self.rollup_failures += 1
