"""The read side of persist handles (seed 002): `ReadHandle` and its `Listen`.

A reader holds the shard's since back (what it may still read) and, while it
reads a state, that state's seqno (so GC keeps the blobs it references). Both
ride on its lease, renewed by a heartbeat the owning `PersistClient` runs;
`downgrade_since` lets compaction forward times up to the new since.
`snapshot(as_of)` waits for `as_of` to be complete; a `Listen` hands out every
later update in time order with its progress.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

from persist.codec import Update, consolidated_sums, sum_batch
from persist.frontier import Frontier
from persist.machine import (
    LeaseExpired,
    LeaseExpiredError,
    Machine,
    downgrade_since,
    expire_reader,
    raise_refusal,
)
from sim.runtime.errors import InvalidUsage
from sim.runtime.retry import retry_external

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from persist.client import PersistClient
    from persist.state import ShardState

__all__ = ["Listen", "ListenBatch", "ReadHandle"]


@final
@dataclass(frozen=True)
class ListenBatch:
    """Every update with a time in `[previous progress, progress)`."""

    updates: list[Update]
    progress: Frontier


@final
class ReadHandle:
    """Reads one shard at times at or beyond its since, which it holds back."""

    def __init__(
        self, client: PersistClient, machine: Machine, reader_id: str, since: Frontier, *, poll_s: float | None = None
    ) -> None:
        self._client = client
        self._m = machine
        #: A reader in a process of its own without PubSub (a replica under
        #: `PersistListen.POLL`): it learns of new states only when it polls
        #: Consensus, every `poll_s`, and reads the state of its last poll.
        self._poll_s = poll_s
        self._polled = machine.state
        self.reader_id = reader_id
        self.shard_id = machine.shard_id
        self.since = since
        self._expired = False
        self._reading: list[int] = []  # seqnos of states being read from right now
        self._listens: list[Listen] = []

    def _check(self) -> None:
        if self._expired:
            raise LeaseExpiredError(f"reader {self.reader_id} of shard {self.shard_id} expired; reopen it")

    def _check_as_of(self, as_of: int) -> None:
        if not self.since.less_equal(as_of):
            raise InvalidUsage(f"cannot read shard {self.shard_id} as of {as_of}: below its since {self.since}")

    async def _wait_upper_beyond(self, ts: int) -> ShardState:
        if self._poll_s is not None:
            state = self._polled
            while state.upper.less_equal(ts):
                await self._m.rt.sleep(self._poll_s)
                fetched = await self._m.fetch()
                assert fetched is not None
                state = self._polled = fetched
            return state
        state = self._m.state
        while state.upper.less_equal(ts):
            state = await self._m.wait_for_change()
        return state

    async def _fetch(self, state: ShardState, lo: int, hi: Frontier) -> list[Update]:
        """Every update of `state`'s batches with a time in `[lo, hi)`."""
        out: list[Update] = []
        hi_ts = hi.ts  # None: no upper bound

        def take(key: str, decoded: tuple[Update, ...]) -> None:
            if hi_ts is None:
                out.extend(u for u in decoded if u[2] >= lo)
            else:
                out.extend(u for u in decoded if lo <= u[2] < hi_ts)

        await self._read_batches(state, lo, hi, take)
        return out

    async def _read_batches(
        self, state: ShardState, lo: int, hi: Frontier, take: Callable[[str, tuple[Update, ...]], None]
    ) -> None:
        """Fetches every batch of `state` that may hold a time in `[lo, hi)`
        and hands it, decoded, to `take` (with its blob key), in order."""
        rt, blob = self._client.rt, self._client.blob
        if self.reader_id not in state.readers:
            # Expired (by another process's transition): our since and seqno hold no
            # longer protect anything, so nothing read now could be trusted.
            self._expired = True
            self._check()
        self._reading.append(state.seqno)
        try:
            for b in state.batches:
                # A batch's times lie in [lower, upper), or at its since if compaction
                # forwarded them there: skip batches that cannot reach [lo, hi).
                if b.key is None or hi.less_equal(b.lower):
                    continue
                if b.upper.ts is not None and b.upper.ts <= lo and b.since < lo:
                    continue
                key = b.key
                data = await retry_external(rt, functools.partial(blob.get, key), idempotent=True)
                if data is None:
                    # Our seqno hold protects this blob unless our lease expired (and
                    # the hold with it): say so; anything else is a GC bug.
                    fresh = await self._m.fetch()
                    if fresh is not None and self.reader_id not in fresh.readers:
                        self._expired = True
                        self._check()
                    raise InvalidUsage(f"shard {self.shard_id}: batch {key} vanished while held (GC bug)")
                take(key, self._client.decoded.decode(key, data))
        finally:
            self._reading.remove(state.seqno)

    async def snapshot(self, as_of: int) -> list[Update]:
        """The collection's contents at `as_of`: consolidated updates, each at time
        `as_of`. Waits while `as_of` is not yet complete (`as_of >= upper`).

        What `consolidate_at(self._fetch(state, 0, as_of + 1), as_of)` gives, with
        each batch wholly in range added as its per-`(key, value)` sums, summed
        once per batch (`DecodedBatches.summed`): a point read of a busy table
        otherwise re-adds every update since the last compaction (issue 20)."""
        self._check()
        self._check_as_of(as_of)
        state = await self._wait_upper_beyond(as_of)
        acc: dict[tuple[bytes, bytes], int] = {}
        get = acc.get
        decoded_batches = self._client.decoded

        def take(key: str, decoded: tuple[Update, ...]) -> None:
            batch = decoded_batches.summed(key, decoded)
            if batch.min_ts is None or batch.max_ts is None:
                return
            if not (batch.min_ts >= 0 and batch.max_ts <= as_of):  # straddles as_of
                batch = sum_batch(u for u in decoded if 0 <= u[2] <= as_of)
            for k, diff in batch.sums.items():
                acc[k] = get(k, 0) + diff

        await self._read_batches(state, 0, Frontier.at(as_of + 1), take)
        return consolidated_sums(acc, as_of)

    def listen(self, as_of: int) -> Listen:
        """Every update at times after `as_of`, in time order by batches, with
        progress; together with `snapshot(as_of)` it reproduces the collection."""
        self._check()
        self._check_as_of(as_of)
        listen = Listen(self, as_of + 1)
        self._listens.append(listen)
        return listen

    async def downgrade_since(self, new_since: Frontier | int) -> None:
        """Promises never to read before `new_since`, letting compaction forward
        times up to it. Must stay below the progress of this handle's listens."""
        self._check()
        since = Frontier.of(new_since)
        for listen in self._listens:
            if not since.less_than(listen.frontier) and not since.is_empty:
                raise InvalidUsage(
                    f"since {since} must stay below the progress {listen.frontier} of an active listen"
                )
        await self._update(since)

    async def _update(self, since: Frontier) -> None:
        lease = self._m.cfg.lease_ms
        # The hold is computed from the state the command is applied to: this handle
        # reads only states at least that new from now on (the machine never goes
        # back), except those it is reading right now. A hold taken from a stale
        # cached state would keep GC from reclaiming anything newer.
        state, refusal = await self._m.apply(
            "downgrade_since",
            lambda s: downgrade_since(
                s, reader_id=self.reader_id, new_since=since,
                seqno_hold=min(self._reading, default=s.seqno),
                now_ms=self._client.rt.wall_ms(), lease_ms=lease,
            ),
        )
        if refusal is not None:
            self._expired = isinstance(refusal, LeaseExpired)
            raise_refusal(refusal, self.shard_id)
        self.since = state.readers[self.reader_id].since
        if state.garbage or (state.since.is_empty and state.upper.is_empty):
            self._client._request_maintenance(self.shard_id)

    async def fetch_recent_upper(self) -> Frontier:
        """The shard's upper, linearized (reads the Consensus head)."""
        self._check()
        state = await self._m.fetch()
        assert state is not None
        return state.upper

    async def expire(self) -> None:
        self._expired = True
        await self._m.apply("expire_reader", lambda s: expire_reader(s, self.reader_id))

    async def _renew_lease(self) -> bool:
        """One heartbeat (`PersistClient._heartbeat`): renews the lease and the
        seqno hold at the same since; False once the lease is gone."""
        try:
            await self._update(self.since)
        except LeaseExpiredError:
            return False
        return True


@final
class Listen:
    """An async iterator of `ListenBatch`es (see `ReadHandle.listen`)."""

    def __init__(self, handle: ReadHandle, frontier: int) -> None:
        self._h = handle
        self.frontier = frontier  # every update before this was handed out

    def __aiter__(self) -> AsyncIterator[ListenBatch]:
        return self._iterate()

    def close(self) -> None:
        """Stops holding the handle's since back (iteration's end also does this)."""
        if self in self._h._listens:
            self._h._listens.remove(self)

    async def _iterate(self) -> AsyncIterator[ListenBatch]:
        try:
            while True:
                self._h._check()
                state = await self._h._wait_upper_beyond(self.frontier)
                upper = state.upper
                rows = await self._h._fetch(state, self.frontier, upper)
                rows.sort(key=lambda u: u.ts)
                if upper.ts is not None:
                    # Before the yield: once the consumer holds the batch, `frontier`
                    # must say how far it has been given data.
                    self.frontier = upper.ts
                yield ListenBatch(rows, upper)
                if upper.is_empty:
                    return
        finally:
            self.close()
