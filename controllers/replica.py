"""A simulated cluster replica (clusterd): dataflows that follow persist shards,
and peeks served from their arrangements or straight from persist.

Paths (each cost is a named latency; see `REPLICA_LATENCIES`):
- **Command delivery**: the controller's commands arrive in order, each after a
  `replica.command` hop (FIFO: a message never overtakes an earlier one).
- **Dataflow**: register a reader on the input shard; its since is the
  dataflow's `as_of`. Hydrate: `snapshot(as_of)` (`replica.hydrate_row` CPU per
  row). Then follow `listen(as_of)`: each batch costs `replica.maintain_row` per
  update, goes through the transform into the arrangement and advances the
  frontier (reported to the controller at once). The arrangement compacts only
  as far as the controller's `ReplicaAllowCompaction` allows (the controller
  owns the read holds), never past an in-flight peek's `as_of`, and the
  reader's persist since follows, so the shard compacts.
- **Peek on an index/view**: hold `as_of`, wait until the frontier is beyond
  it, read the arrangement at exactly `as_of`, apply the peek's transform
  (`replica.peek` + `replica.peek_row` per row read), answer after a
  `replica.response` hop.
- **Peek on a table** (persist fast path): a short-lived reader,
  `snapshot(as_of)` (waits for the upper to pass `as_of`), expire.
- **crash()** cancels everything and drops all state; leases of its readers
  lapse (nobody heartbeats them). **restart(history)** starts a new
  incarnation that replays the controller's command history (reconciliation).

CPU work holds one of the replica's `workers` modeled cores (`Runtime.cpu`), so
hydration delays peeks on the same replica, as a busy clusterd does.

The replica protocol is `controllers.replica_commands`, the costs
`controllers.replica_costs`, and a peek of an arrangement, with the answer
both paths compute (`evaluate`), `controllers.replica_peeks`.
"""

from __future__ import annotations

import asyncio
import collections
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeAlias, final

import anyio

from controllers.arrangement import Arrangement, Maintainer
from controllers.commands import PeekError, PeekResponse
from controllers.replica_commands import (
    ReplicaAllowCompaction,
    ReplicaCreateDataflow,
    ReplicaDropDataflow,
    ReplicaPeek,
)
from controllers.replica_costs import replica_cost
from controllers.replica_peeks import BELOW_SINCE, ArrangedPeek, evaluate
from controllers.transform import CompiledTransforms, decode_row
from persist.frontier import Frontier
from persist.machine import LeaseExpiredError
from sim.runtime.errors import InvalidUsage
from sim.runtime.tasks import started_after

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from anyio.abc import TaskGroup

    from controllers.commands import PeekRows
    from controllers.replica_commands import ReplicaCommand
    from controllers.transform import CompiledTransform, Row
    from persist.client import PersistClient
    from persist.read import ReadHandle
    from sim.runtime.core import Runtime

__all__ = ["Dataflow", "FrontierSink", "PeekSink", "Replica", "ReplicaStatistics"]

#: Bounds of a replica's decoded-row and compiled-transform caches (entries).
_CACHED_ROWS: Final = 100_000
_CACHED_TRANSFORMS: Final = 1_000

#: A "never" upper for a shard that was closed (its upper became empty).
_NEVER: Final = 2**63 - 1


@final
@dataclass(frozen=True, slots=True)
class ReplicaStatistics:
    incarnations: int
    hydrated_rows: int
    maintained_updates: int
    peeks_answered: int
    fast_path_peeks: int


@final
@dataclass
class Dataflow:
    """One dataflow on a replica: its arrangement and what bounds its
    compaction (the controller's `allowed`, the `holds` of the peeks reading
    it), shared with those peeks (`controllers.replica_peeks`)."""

    cmd: ReplicaCreateDataflow
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    arrangement: Arrangement | None = None
    output_columns: tuple[str, ...] = ()
    allowed: int = 0
    holds: list[int] = field(default_factory=list)
    #: Called on the next loop turn after the next change (the peeks waiting
    #: for the arrangement to pass their as_of).
    on_change: list[Callable[[], None]] = field(default_factory=list)
    reader: ReadHandle | None = None
    #: The last peek's evaluation: (the arrangement's read, the compiled
    #: transform, the answer). Reads that fold in the same updates are the
    #: same tuple (`Arrangement.read`), so a peek repeated over an unchanged
    #: collection is answered without evaluating again (issue 20).
    evaluated: tuple[tuple[tuple[bytes, int], ...], CompiledTransform, PeekRows | PeekError] | None = None

    def notify(self) -> None:
        waiting, self.on_change = self.on_change, []
        if waiting:
            loop = asyncio.get_running_loop()
            for callback in waiting:
                loop.call_soon(callback)


@final
@dataclass
class _Life:
    """One incarnation's fate: tasks of a crashed incarnation must not act (e.g.
    expire their leases) even if the replica has been restarted meanwhile."""

    crashed: bool = False


#: Called with a replica's peek answers (after the response hop).
PeekSink: TypeAlias = "Callable[[Replica, PeekResponse], None]"
#: Called with `(replica, dataflow id, new upper)` whenever a frontier advances.
FrontierSink: TypeAlias = "Callable[[Replica, int, Frontier], None]"


@final
class Replica:
    """One replica of a cluster. `run()` is its process: start it in the owner's
    task group; `drop()` ends it; `crash()`/`restart()` model a failure."""

    def __init__(
        self,
        cluster_id: int,
        replica_id: int,
        persist: PersistClient,
        rt: Runtime,
        *,
        workers: int = 1,
        compaction_window: int = 1000,
        listen_poll_s: float | None = None,
        on_peek: PeekSink,
        on_frontier: FrontierSink,
    ) -> None:
        self.cluster_id = cluster_id
        #: None: PubSub tells this replica of a shard's new state at once;
        #: seconds: it polls Consensus this often (`PersistListen.POLL`).
        self._listen_poll_s = listen_poll_s
        self.replica_id = replica_id
        self._persist = persist
        self._rt = rt
        self._pool = rt.core_pool(workers, f"replica-{cluster_id}-{replica_id}")
        self._window = compaction_window
        self._on_peek = on_peek
        self._on_frontier = on_frontier
        self._inbox: collections.deque[tuple[float, ReplicaCommand]] = collections.deque()
        self._inbox_event = anyio.Event()
        self._last_delivery = 0.0
        self._scope = anyio.CancelScope()
        self._incarnation: anyio.CancelScope | None = None
        self._crashed = False
        self._life = _Life()
        self._dropped = False
        self._lifecycle = anyio.Event()  # set (and replaced) on every crash and restart
        self._dataflows: dict[int, Dataflow] = {}
        self._peeks: dict[int, anyio.CancelScope | ArrangedPeek] = {}
        self._stats = collections.Counter[str]()
        self._rows: dict[bytes, Row] = {}
        self._compile = CompiledTransforms(_CACHED_TRANSFORMS)

    def __repr__(self) -> str:
        return f"Replica({self.cluster_id}, {self.replica_id})"

    @property
    def crashed(self) -> bool:
        return self._crashed

    # --- owner's interface ---------------------------------------------------------------

    def send(self, cmd: ReplicaCommand) -> None:
        """Queues `cmd` for delivery after a network hop; lost while crashed."""
        if self._crashed or self._dropped:
            return
        now = self._rt.now()
        deliver = max(self._last_delivery, now + replica_cost(self._rt, "replica.command"))
        self._last_delivery = deliver
        self._inbox.append((deliver, cmd))
        self._inbox_event.set()

    def crash(self) -> None:
        """Kills the process: every task ends, all state (arrangements, pending
        peeks, queued commands) is lost."""
        if self._crashed:
            return
        self._crashed = True
        self._life.crashed = True
        self._inbox.clear()
        self._lifecycle_changed()
        self._stop_arranged_peeks()
        if self._incarnation is not None:
            self._incarnation.cancel()

    def restart(self, history: Sequence[ReplicaCommand]) -> None:
        """Starts a new incarnation that first receives `history`."""
        if not self._crashed:
            raise InvalidUsage(f"{self!r} is running; crash it before restarting")
        self._crashed = False
        self._life = _Life()
        self._last_delivery = 0.0
        for cmd in history:
            self.send(cmd)
        self._lifecycle_changed()

    def _lifecycle_changed(self) -> None:
        self._lifecycle.set()
        self._lifecycle = anyio.Event()

    def drop(self) -> None:
        """Shuts the replica down for good (gracefully: readers are expired)."""
        self._dropped = True
        self._stop_arranged_peeks()
        self._scope.cancel()

    def frontier(self, dataflow_id: int) -> Frontier:
        """The dataflow's upper on this replica (`Frontier(0)` until hydrated)."""
        df = self._dataflows.get(dataflow_id)
        if df is None or df.arrangement is None:
            return Frontier.MINIMUM
        return Frontier.at(df.arrangement.upper)

    def since(self, dataflow_id: int) -> int | None:
        df = self._dataflows.get(dataflow_id)
        return None if df is None or df.arrangement is None else df.arrangement.since

    def statistics(self) -> ReplicaStatistics:
        s = self._stats
        return ReplicaStatistics(
            s["incarnations"], s["hydrated_rows"], s["maintained"], s["peeks"], s["fast_path"]
        )

    async def run(self) -> None:
        """The replica process, until `drop()`; crashes end only an incarnation."""
        with self._scope:
            while True:
                if self._crashed:
                    await self._lifecycle.wait()
                    continue
                self._stats["incarnations"] += 1
                with anyio.CancelScope() as incarnation:
                    self._incarnation = incarnation
                    try:
                        async with anyio.create_task_group() as tg, asyncio.TaskGroup() as peeks:
                            await self._serve(tg, peeks)
                    finally:
                        self._incarnation = None
                        self._stop_arranged_peeks()
                        self._dataflows = {}
                        self._peeks = {}

    def _stop_arranged_peeks(self) -> None:
        """Ends the peeks that are callbacks, not tasks (the incarnation's end
        cancels the tasks)."""
        for peek in list(self._peeks.values()):
            if isinstance(peek, ArrangedPeek):
                peek.cancel()

    # --- the process ---------------------------------------------------------------------

    async def _serve(self, tg: TaskGroup, peeks: asyncio.TaskGroup) -> None:
        """Delivers commands in order; dataflows run in `tg`, peeks in `peeks`
        (an asyncio group: a task there costs half of one in anyio's, and a
        replica starts one per peek)."""
        while True:
            if not self._inbox:
                await self._inbox_event.wait()
                self._inbox_event = anyio.Event()
                continue
            deliver, cmd = self._inbox[0]
            wait = deliver - self._rt.now()
            if wait > 0:
                await self._rt.sleep(wait)
                continue  # re-check: a crash may have cleared the inbox meanwhile
            self._inbox.popleft()
            self._handle(cmd, tg, peeks)

    def _handle(self, cmd: ReplicaCommand, tg: TaskGroup, peeks: asyncio.TaskGroup) -> None:
        if isinstance(cmd, ReplicaCreateDataflow):
            if cmd.id not in self._dataflows:
                df = Dataflow(cmd)
                self._dataflows[cmd.id] = df
                tg.start_soon(self._dataflow, df)
        elif isinstance(cmd, ReplicaDropDataflow):
            dropped = self._dataflows.pop(cmd.id, None)
            if dropped is not None:
                dropped.scope.cancel()
                dropped.notify()  # peeks waiting on it find it gone
        elif isinstance(cmd, ReplicaAllowCompaction):
            target = self._dataflows.get(cmd.id)
            if target is not None:
                target.allowed = max(target.allowed, cmd.since)
                self._compact_arrangement(target)  # the reader's since follows on the next batch
        elif isinstance(cmd, ReplicaPeek):
            if cmd.peek_id in self._peeks:
                return
            if cmd.shard_id is None:
                peek = ArrangedPeek(self, cmd, self._dataflows.get(cmd.target_id))
                self._peeks[cmd.peek_id] = peek
                peek.start()
            else:
                scope = anyio.CancelScope()
                self._peeks[cmd.peek_id] = scope
                peeks.create_task(self._fast_path_peek(cmd, scope))
        else:
            running = self._peeks.pop(cmd.peek_id, None)
            if running is not None:
                running.cancel()

    def _cpu(self, seconds: float) -> Awaitable[None]:
        """Modeled CPU on the replica's workers; await it (the hold itself, not a
        coroutine around it: see `Runtime.cpu`)."""
        return self._rt.cpu(seconds, self._pool)

    # --- dataflows -----------------------------------------------------------------------

    async def _dataflow(self, df: Dataflow) -> None:
        cmd, life = df.cmd, self._life
        with df.scope:
            df.reader = await self._persist.open_reader(cmd.shard_id, heartbeat=False, poll_s=self._listen_poll_s)
            try:
                await self._follow(df)
            finally:
                if not life.crashed:  # a crash leaves the lease to lapse
                    with anyio.CancelScope(shield=True):
                        await df.reader.expire()

    async def _reopen(self, df: Dataflow, needed: int) -> ReadHandle:
        """A new reader in place of the dataflow's, whose lease expired (a step
        of the process's clock past persist's lease): it must still read times
        from `needed` on."""
        assert df.reader is not None
        df.reader = reader = await self._persist.reopen_reader(
            df.reader, heartbeat=False, poll_s=self._listen_poll_s
        )
        if not reader.since.less_equal(needed):
            raise LeaseExpiredError(
                f"the reader of shard {df.cmd.shard_id} expired, and the shard was compacted to "
                f"{reader.since} meanwhile, past {needed}"
            )
        return reader

    async def _follow(self, df: Dataflow) -> None:
        compiled = df.cmd.transform.compile(df.cmd.input_columns)
        maintainer = Maintainer(compiled)
        assert df.reader is not None
        as_of = df.reader.since.ts
        if as_of is None:
            raise InvalidUsage(f"shard {df.cmd.shard_id} can no longer be read (empty since)")
        while True:
            try:
                snapshot = await df.reader.snapshot(as_of)
                break
            except LeaseExpiredError:
                await self._reopen(df, as_of)
        await self._cpu(len(snapshot) * replica_cost(self._rt, "replica.hydrate_row"))
        self._stats["hydrated_rows"] += len(snapshot)
        df.arrangement = Arrangement(as_of, maintainer.initial(snapshot))
        df.output_columns = compiled.columns
        self._advanced(df)
        # A listen cut short by the reader's lease expiring starts again, on a
        # reopened reader, from what the arrangement has taken in.
        while not await self._listen(df, maintainer):
            await self._reopen(df, df.arrangement.upper - 1)

    async def _listen(self, df: Dataflow, maintainer: Maintainer) -> bool:
        """Maintains the arrangement from its upper on; False if the reader's
        lease expired first."""
        reader, arrangement = df.reader, df.arrangement
        assert reader is not None
        assert arrangement is not None
        batches = aiter(reader.listen(arrangement.upper - 1))
        expired = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._heartbeat, reader)
                async for batch in batches:
                    n = len(batch.updates)
                    await self._cpu(n * replica_cost(self._rt, "replica.maintain_row"))
                    self._stats["maintained"] += n
                    previous = arrangement.upper
                    upper = _NEVER if batch.progress.ts is None else batch.progress.ts
                    arrangement.insert(maintainer.step(batch.updates), upper)
                    self._advanced(df)
                    await self._compact(df, reader, previous)
                tg.cancel_scope.cancel()
        except* LeaseExpiredError:
            expired = True
        finally:
            # Close the listen now (not whenever the garbage collector gets to it,
            # which would put its cleanup at an arbitrary point of the schedule).
            aclose = getattr(batches, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
        return not expired

    def _advanced(self, df: Dataflow) -> None:
        assert df.arrangement is not None
        df.notify()
        self._on_frontier(self, df.cmd.id, Frontier.at(df.arrangement.upper))

    def _compact_arrangement(self, df: Dataflow) -> None:
        arr = df.arrangement
        if arr is not None:
            arr.compact(min(df.allowed, arr.upper - 1, *df.holds))

    async def _compact(self, df: Dataflow, reader: ReadHandle, listen_frontier: int) -> None:
        self._compact_arrangement(df)
        arr = df.arrangement
        assert arr is not None
        # The reader's since must stay below the listen's progress, which the listen
        # only moves past `listen_frontier` when asked for its next batch.
        persist_target = min(arr.since, listen_frontier - 1)
        current = reader.since.ts
        step = max(1, self._window // 4)
        if current is not None and persist_target - current >= step:
            await reader.downgrade_since(persist_target)

    def _heartbeat_period(self) -> float:
        return self._persist.config.machine.lease_ms / 1000 / 4

    async def _heartbeat(self, reader: ReadHandle) -> None:
        """Renews the reader's lease every period; a crash stops it, so the
        lease lapses."""
        await self._rt.sleep(self._heartbeat_period())
        await self._renewals(reader)

    async def _renewals(self, reader: ReadHandle) -> None:
        """`_heartbeat` from its first renewal on (`started_after` starts it
        when that falls due)."""
        period = self._heartbeat_period()
        while True:
            await reader.downgrade_since(reader.since)
            await self._rt.sleep(period)

    # --- peeks ---------------------------------------------------------------------------

    async def _fast_path_peek(self, cmd: ReplicaPeek, scope: anyio.CancelScope) -> None:
        life = self._life
        with scope:
            result = await self._fast_path(cmd)
            await self._rt.sleep(replica_cost(self._rt, "replica.response"))
            if life.crashed:  # a dead process sends nothing
                return
            self._stats["peeks"] += 1
            if self._peeks.get(cmd.peek_id) is scope:
                del self._peeks[cmd.peek_id]
            self._on_peek(self, PeekResponse(cmd.peek_id, result))

    async def _fast_path(self, cmd: ReplicaPeek) -> PeekRows | PeekError:
        assert cmd.shard_id is not None
        self._stats["fast_path"] += 1
        life = self._life
        reader = await self._persist.open_reader(cmd.shard_id, heartbeat=False, poll_s=self._listen_poll_s)
        try:
            while True:
                if not reader.since.less_equal(cmd.as_of):
                    return PeekError(
                        BELOW_SINCE,
                        f"as_of {cmd.as_of} of table {cmd.target_id} is below its since {reader.since}",
                        since=reader.since.ts,
                    )
                # The snapshot may wait for the upper to pass `as_of`: keep the lease
                # (and so the since hold) alive meanwhile. Renewals start when the
                # first falls due, which almost no snapshot lasts until.
                try:
                    async with started_after(self._heartbeat_period(), functools.partial(self._renewals, reader)):
                        snapshot = await reader.snapshot(cmd.as_of)
                    break
                except LeaseExpiredError:
                    # A step of the process's clock past the lease: read again on
                    # a new reader (holding the since the old one held).
                    reader = await self._persist.reopen_reader(
                        reader, heartbeat=False, poll_s=self._listen_poll_s
                    )
        finally:
            if not life.crashed:
                with anyio.CancelScope(shield=True):
                    await reader.expire()
        await self._cpu(
            replica_cost(self._rt, "replica.peek") + len(snapshot) * replica_cost(self._rt, "replica.peek_row")
        )
        compiled = self._compile(cmd.transform, cmd.columns)
        decoded = self._decoded
        return evaluate(compiled, ((u.key, decoded(u.key), u.diff) for u in snapshot))

    # Peeks read the same few rows and run the same few transforms over and
    # over: decoding and compiling them once per replica saves most of a
    # point peek's Python time. Both caches are bounded by clearing when full
    # (deterministic, and the working set refills at once).

    def _decoded(self, key: bytes) -> Row:
        row = self._rows.get(key)
        if row is None:
            if len(self._rows) >= _CACHED_ROWS:
                self._rows.clear()
            row = self._rows[key] = decode_row(key)
        return row
