"""The compute controller: clusters, replicas, dataflows, and catalog_ts-gated peeks.

Paths:
- **Deterministic commands** (`send`, in derived order) update the controller's
  view — tables it can peek through persist, dataflows per cluster — and go on
  to every replica of the affected cluster. `AdvanceCatalogFrontier(ts)` moves
  the **catalog frontier**: every catalog change at times `< ts` is applied.
- **Peek**: held while `catalog_ts >= frontier` (the controller might not yet
  know an object the query saw). Once the frontier is beyond it, the collection
  is looked up in the controller's *current* state: missing (never created, or
  dropped at or before that point) answers `42P01` at once, as Materialize does
  for an object dropped under an in-flight query. Otherwise the peek goes to
  every replica of the cluster that holds the collection (an index or view), or
  of the peek's cluster for a table (persist fast path); each replica answers
  once its frontier is beyond `as_of`, with exactly the contents at `as_of`.
  The first answer wins; later ones are dropped and the other replicas are told
  to cancel.
- **Compaction and read holds**: the controller, not the replicas, decides how
  far each dataflow's arrangement may compact (as Materialize's compute
  controller owns the read capabilities): its *since* starts where the first
  replica hydrated and follows `upper - compaction_window` (or the catalog's
  `AllowCompaction`), never past a read hold, in steps sent to every replica
  as `ReplicaAllowCompaction`. `read_floor`/`read_hold` let the coordinator
  choose a peek timestamp at or above that since and keep it readable until
  the answer (`coordinator/peeks.py`), so a replica never finds a peek's
  `as_of` compacted away (except one rehydrating after a crash, whose since
  starts at its shard's).
- **Replica crash/restart**: a restarted or newly created replica is sent the
  cluster's history — its live dataflows, compaction bounds, and in-flight
  peeks — so it rehydrates and answers what is still pending (reconciliation).

Responses (`PeekResponse`, `FrontierUppers` when a collection's upper advances
on some replica, `DroppedIds`) go to the owner's sink — a callable or an
unbounded anyio memory object stream: the event loop's controller-response
queue, or `PeekWaiters` for per-peek waiters in the decoupled design.

One module past 500 lines on purpose: the paths above all read and change one
state (collections, clusters and their replicas, peeks waiting and in flight),
which they must keep consistent with each other.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias, final

from anyio.streams.memory import MemoryObjectSendStream

from controllers.commands import (
    UNKNOWN_CLUSTER,
    UNKNOWN_COLLECTION,
    AdvanceCatalogFrontier,
    CancelPeek,
    ComputeResponse,
    CreateCluster,
    CreateDataflow,
    CreateReplica,
    CreateTable,
    DeterministicCommand,
    DropCluster,
    DropDataflow,
    DroppedIds,
    DropReplica,
    DropTable,
    FrontierUppers,
    Peek,
    PeekCanceled,
    PeekError,
    PeekResponse,
)
from controllers.frontier import CatalogFollower, ReadHold
from controllers.replica import Replica
from controllers.replica_commands import (
    ReplicaAllowCompaction,
    ReplicaCancel,
    ReplicaCommand,
    ReplicaCreateDataflow,
    ReplicaDropDataflow,
    ReplicaPeek,
)
from controllers.transform import CompiledTransforms
from persist.frontier import Frontier
from sim.runtime.errors import InvalidUsage
from sim.runtime.tasks import TaskOwner

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import TaskGroup

    from persist.client import PersistClient
    from sim.runtime.core import Runtime

__all__ = [
    "UNDEFINED_COLUMN",
    "UNSUPPORTED",
    "ComputeCommand",
    "ComputeConfig",
    "ComputeController",
    "ComputeStatistics",
    "PeekWaiters",
    "ResponseSink",
]

#: SQLSTATE of a transform naming a column its input does not have.
UNDEFINED_COLUMN = "42703"
#: SQLSTATE of a dataflow shape the simulator does not model (an input that is
#: not a table).
UNSUPPORTED = "0A000"

#: Everything the compute controller takes: the deterministic commands (it
#: keeps tables too, to peek them through persist) and the peek commands.
ComputeCommand: TypeAlias = DeterministicCommand | Peek | CancelPeek

#: Where responses go; must not block (the controller calls it from its tasks).
ResponseSink: TypeAlias = "Callable[[ComputeResponse], None]"


@final
@dataclass(frozen=True, slots=True)
class ComputeConfig:
    """`compaction_window`: timestamps below a dataflow's upper that stay
    peekable (1000, as Materialize's default 1 s logical compaction window)."""

    compaction_window: int = 1000
    #: Known-bad variant (DESIGN.md §2): serve peeks without waiting for the catalog
    #: frontier to pass their `catalog_ts`, so a peek may not find an object its
    #: query saw (`select-unknown-table`). Anomaly tests only.
    ignore_catalog_ts: bool = False
    #: How the replicas (clusterd processes) learn that a shard moved
    #: (`coordinator.config.PersistListen`): None, PubSub pushes it at once;
    #: seconds, they poll Consensus this often.
    listen_poll_s: float | None = None


@final
@dataclass(frozen=True, slots=True)
class ComputeStatistics:
    peeks: int
    peeks_waited_on_catalog: int
    peek_errors: int
    responses_dropped: int
    replicas_restarted: int


@final
@dataclass
class _Table:
    cmd: CreateTable


@final
@dataclass
class _Dataflow:
    cmd: CreateDataflow
    columns: tuple[str, ...] = ()
    error: PeekError | None = None  # set when the dataflow cannot be built
    allowed: int = 0  # the catalog's AllowCompaction bound
    upper: Frontier = Frontier.MINIMUM
    since: int | None = None  # what replicas may compact to; None until one hydrated
    holds: list[int] = field(default_factory=list)


@final
@dataclass
class _Cluster:
    id: int
    replicas: dict[int, Replica] = field(default_factory=dict)
    dataflows: list[int] = field(default_factory=list)


@final
@dataclass
class _InFlight:
    peek: Peek
    cluster_id: int
    command: ReplicaPeek


@final
class ComputeController(CatalogFollower, TaskOwner):
    """Owned via `async with`: replicas run as tasks in its task group."""

    def __init__(
        self,
        persist: PersistClient,
        rt: Runtime,
        respond: ResponseSink | MemoryObjectSendStream[ComputeResponse],
        *,
        config: ComputeConfig = ComputeConfig(),
    ) -> None:
        super().__init__()
        self._persist = persist
        self._rt = rt
        # An anyio memory stream must be unbounded: the controller never blocks.
        self._respond: ResponseSink = (
            respond.send_nowait if isinstance(respond, MemoryObjectSendStream) else respond
        )
        self.config = config
        self._tables: dict[int, _Table] = {}
        self._dataflows: dict[int, _Dataflow] = {}
        self._clusters: dict[int, _Cluster] = {}
        self._waiting: list[Peek] = []  # gated on the catalog frontier, arrival order
        self._in_flight: dict[int, _InFlight] = {}
        self._peek_ids: set[int] = set()  # membership only
        self._compile = CompiledTransforms()  # every peek checks its columns
        self._tg: TaskGroup | None = None
        self._stats = collections.Counter[str]()

    # --- inspection ------------------------------------------------------------------------

    def upper(self, collection_id: int) -> Frontier:
        """A dataflow's upper on its most advanced replica."""
        df = self._dataflows.get(collection_id)
        if df is None:
            raise InvalidUsage(f"unknown dataflow {collection_id}")
        return df.upper

    def read_floor(self, collection_id: int) -> int | None:
        """A dataflow's since (the least time a peek may read it at), or None if
        this controller knows no hydrated dataflow `collection_id`."""
        df = self._dataflows.get(collection_id)
        return None if df is None else df.since

    def read_hold(self, collection_id: int, ts: int) -> ReadHold:
        """Holds the dataflow peekable at `ts`; below its since (or before it
        hydrated) is `InvalidUsage`."""
        df = self._dataflows.get(collection_id)
        if df is None or df.since is None or ts < df.since:
            since = None if df is None else df.since
            raise InvalidUsage(f"dataflow {collection_id}: cannot hold {ts} (since {since})")
        df.holds.append(ts)
        return ReadHold(collection_id, ts, self._release)

    def _release(self, hold: ReadHold) -> None:
        df = self._dataflows.get(hold.id)
        if df is not None:
            df.holds.remove(hold.ts)
            self._maybe_compact(df)

    def _maybe_compact(self, df: _Dataflow, *, force: bool = False) -> None:
        """Moves the dataflow's since towards `upper - window` (or `allowed`),
        never past a hold, in steps of a quarter window (each step is one
        message to every replica) unless `force`d by an AllowCompaction."""
        upper = df.upper.ts
        if df.since is None or upper is None:
            return
        target = min(max(upper - self.config.compaction_window, df.allowed), upper - 1, *df.holds)
        step = 1 if force else max(1, self.config.compaction_window // 4)
        if target - df.since >= step:
            df.since = target
            self._broadcast(df.cmd.cluster_id, ReplicaAllowCompaction(df.cmd.id, target))

    def replica(self, cluster_id: int, replica_id: int) -> Replica:
        cluster = self._clusters.get(cluster_id)
        if cluster is None or replica_id not in cluster.replicas:
            raise InvalidUsage(f"unknown replica {replica_id} of cluster {cluster_id}")
        return cluster.replicas[replica_id]

    def pending_peeks(self) -> tuple[int, ...]:
        """Peeks not yet answered: waiting on the catalog, then in flight."""
        return tuple(p.peek_id for p in self._waiting) + tuple(self._in_flight)

    def statistics(self) -> ComputeStatistics:
        s = self._stats
        return ComputeStatistics(
            s["peeks"], s["gated"], s["errors"], s["dropped_responses"], s["restarts"]
        )

    # --- failures --------------------------------------------------------------------------

    def crash_replica(self, cluster_id: int, replica_id: int) -> None:
        self.replica(cluster_id, replica_id).crash()

    def restart_replica(self, cluster_id: int, replica_id: int) -> None:
        """Restarts a crashed replica from the cluster's command history."""
        self._stats["restarts"] += 1
        self.replica(cluster_id, replica_id).restart(self._history(self._clusters[cluster_id]))

    def _history(self, cluster: _Cluster) -> list[ReplicaCommand]:
        out: list[ReplicaCommand] = []
        for df_id in cluster.dataflows:
            df = self._dataflows[df_id]
            if df.error is None:
                out.append(self._replica_create(df))
                if df.since:
                    out.append(ReplicaAllowCompaction(df_id, df.since))
        out += [f.command for f in self._in_flight.values() if f.cluster_id == cluster.id]
        return out

    # --- commands --------------------------------------------------------------------------

    def send(self, cmd: ComputeCommand) -> None:
        """Applies one command. Deterministic ones must come in derived order;
        never blocks (the work happens in replica tasks)."""
        if isinstance(cmd, Peek):
            self._peek(cmd)
        elif isinstance(cmd, CancelPeek):
            self._cancel(cmd.peek_id)
        elif isinstance(cmd, AdvanceCatalogFrontier):
            self._advance(cmd.ts)
        elif isinstance(cmd, CreateTable):
            self._tables[cmd.id] = _Table(cmd)
        elif isinstance(cmd, DropTable):
            if self._tables.pop(cmd.id, None) is not None:
                self._fail_peeks(lambda f: f.peek.collection_id == cmd.id, UNKNOWN_COLLECTION, "was dropped")
                self._respond(DroppedIds((cmd.id,)))
        elif isinstance(cmd, CreateCluster):
            self._clusters.setdefault(cmd.id, _Cluster(cmd.id))
        elif isinstance(cmd, DropCluster):
            self._drop_cluster(cmd.id)
        elif isinstance(cmd, CreateReplica):
            self._create_replica(cmd)
        elif isinstance(cmd, DropReplica):
            cluster = self._clusters.get(cmd.cluster_id)
            replica = None if cluster is None else cluster.replicas.pop(cmd.replica_id, None)
            if replica is not None:
                replica.drop()
        elif isinstance(cmd, CreateDataflow):
            self._create_dataflow(cmd)
        elif isinstance(cmd, DropDataflow):
            self._drop_dataflow(cmd.id)
        else:
            df = self._dataflows.get(cmd.id)
            if df is not None and cmd.since > df.allowed:
                df.allowed = cmd.since
                self._maybe_compact(df, force=True)

    def _advance(self, ts: int) -> None:
        if not self._advance_catalog_frontier(ts):
            return
        ready = [p for p in self._waiting if p.catalog_ts < ts]
        self._waiting = [p for p in self._waiting if p.catalog_ts >= ts]
        for p in ready:
            self._dispatch(p)

    def _create_replica(self, cmd: CreateReplica) -> None:
        if self._tg is None:
            raise InvalidUsage("ComputeController must be used as `async with ComputeController(...)`")
        cluster = self._clusters.get(cmd.cluster_id)
        if cluster is None:
            raise InvalidUsage(f"replica {cmd.replica_id} of unknown cluster {cmd.cluster_id}")
        if cmd.replica_id in cluster.replicas:
            return
        replica = Replica(
            cmd.cluster_id,
            cmd.replica_id,
            self._persist,
            self._rt.derive(f"replica-{cmd.cluster_id}-{cmd.replica_id}"),
            workers=cmd.workers,
            compaction_window=self.config.compaction_window,
            listen_poll_s=self.config.listen_poll_s,
            on_peek=self._on_replica_peek,
            on_frontier=self._on_replica_frontier,
        )
        cluster.replicas[cmd.replica_id] = replica
        for c in self._history(cluster):
            replica.send(c)
        self._tg.start_soon(replica.run)

    def _drop_cluster(self, cluster_id: int) -> None:
        cluster = self._clusters.pop(cluster_id, None)
        if cluster is None:
            return
        for df_id in list(cluster.dataflows):  # the catalog drops them first; be safe
            self._drop_dataflow(df_id)
        for replica in cluster.replicas.values():
            replica.drop()
        self._fail_peeks(lambda f: f.cluster_id == cluster_id, UNKNOWN_CLUSTER, "lost its cluster")

    def _replica_create(self, df: _Dataflow) -> ReplicaCreateDataflow:
        table = self._tables[df.cmd.input_id].cmd
        return ReplicaCreateDataflow(df.cmd.id, table.shard_id, table.columns, df.cmd.transform)

    def _create_dataflow(self, cmd: CreateDataflow) -> None:
        if cmd.id in self._dataflows:
            return
        cluster = self._clusters.get(cmd.cluster_id)
        if cluster is None:
            raise InvalidUsage(f"dataflow {cmd.id} on unknown cluster {cmd.cluster_id}")
        df = _Dataflow(cmd)
        self._dataflows[cmd.id] = df
        cluster.dataflows.append(cmd.id)
        table = self._tables.get(cmd.input_id)
        if table is None:
            what = "a dataflow" if cmd.input_id in self._dataflows else "nothing"
            df.error = PeekError(
                UNSUPPORTED if what == "a dataflow" else UNKNOWN_COLLECTION,
                f"{cmd.kind} {cmd.id}: input {cmd.input_id} is {what}; only tables are modeled as inputs",
            )
            return
        try:
            df.columns = cmd.transform.output_columns(table.cmd.columns)
        except InvalidUsage as exc:
            df.error = PeekError(UNDEFINED_COLUMN, f"{cmd.kind} {cmd.id}: {exc}")
            return
        self._broadcast(cmd.cluster_id, self._replica_create(df))

    def _drop_dataflow(self, df_id: int) -> None:
        df = self._dataflows.pop(df_id, None)
        if df is None:
            return
        cluster = self._clusters.get(df.cmd.cluster_id)
        if cluster is not None:
            cluster.dataflows.remove(df_id)
        self._broadcast(df.cmd.cluster_id, ReplicaDropDataflow(df_id))
        self._fail_peeks(lambda f: f.peek.collection_id == df_id, UNKNOWN_COLLECTION, "was dropped")
        self._respond(DroppedIds((df_id,)))

    def _broadcast(self, cluster_id: int, cmd: ReplicaCommand, *, skip: Replica | None = None) -> None:
        cluster = self._clusters.get(cluster_id)
        if cluster is not None:
            for replica in cluster.replicas.values():
                if replica is not skip:
                    replica.send(cmd)

    # --- peeks -------------------------------------------------------------------------------

    def _peek(self, peek: Peek) -> None:
        if peek.peek_id in self._peek_ids:
            raise InvalidUsage(f"peek id {peek.peek_id} was already used")
        self._peek_ids.add(peek.peek_id)
        self._stats["peeks"] += 1
        if peek.catalog_ts < self.catalog_frontier or self.config.ignore_catalog_ts:
            self._dispatch(peek)
        else:
            self._stats["gated"] += 1
            self._waiting.append(peek)

    def _answer(self, peek_id: int, result: PeekError | PeekCanceled) -> None:
        if isinstance(result, PeekError):
            self._stats["errors"] += 1
        self._respond(PeekResponse(peek_id, result))

    def _dispatch(self, peek: Peek) -> None:
        """Routes a peek whose catalog_ts the frontier has passed."""
        cid = peek.collection_id
        table, df = self._tables.get(cid), self._dataflows.get(cid)
        if table is not None:
            if peek.cluster_id not in self._clusters:
                self._answer(peek.peek_id, PeekError(UNKNOWN_CLUSTER, f"unknown cluster {peek.cluster_id}"))
                return
            cluster_id, columns = peek.cluster_id, table.cmd.columns
            command = ReplicaPeek(peek.peek_id, cid, peek.as_of, peek.transform, table.cmd.shard_id, columns)
        elif df is not None:
            if df.error is not None:
                self._answer(peek.peek_id, df.error)
                return
            cluster_id, columns = df.cmd.cluster_id, df.columns
            command = ReplicaPeek(peek.peek_id, cid, peek.as_of, peek.transform)
        else:
            self._answer(peek.peek_id, PeekError(UNKNOWN_COLLECTION, f"unknown collection {cid}"))
            return
        try:
            self._compile(peek.transform, columns)
        except InvalidUsage as exc:
            self._answer(peek.peek_id, PeekError(UNDEFINED_COLUMN, str(exc)))
            return
        self._in_flight[peek.peek_id] = _InFlight(peek, cluster_id, command)
        self._broadcast(cluster_id, command)

    def _cancel(self, peek_id: int) -> None:
        for i, p in enumerate(self._waiting):
            if p.peek_id == peek_id:
                del self._waiting[i]
                self._answer(peek_id, PeekCanceled())
                return
        f = self._in_flight.pop(peek_id, None)
        if f is not None:
            self._broadcast(f.cluster_id, ReplicaCancel(peek_id))
            self._answer(peek_id, PeekCanceled())

    def _fail_peeks(self, which: Callable[[_InFlight], bool], code: str, why: str) -> None:
        for peek_id, f in list(self._in_flight.items()):
            if which(f):
                del self._in_flight[peek_id]
                self._broadcast(f.cluster_id, ReplicaCancel(peek_id))
                self._answer(peek_id, PeekError(code, f"collection {f.peek.collection_id} {why}"))

    # --- replica responses ---------------------------------------------------------------------

    def _on_replica_peek(self, replica: Replica, response: PeekResponse) -> None:
        f = self._in_flight.get(response.peek_id)
        if f is None or f.cluster_id != replica.cluster_id:
            self._stats["dropped_responses"] += 1  # another replica answered first
            return
        del self._in_flight[response.peek_id]
        self._broadcast(f.cluster_id, ReplicaCancel(response.peek_id), skip=replica)
        if isinstance(response.result, PeekError):
            self._stats["errors"] += 1
        self._respond(response)

    def _on_replica_frontier(self, replica: Replica, df_id: int, upper: Frontier) -> None:
        df = self._dataflows.get(df_id)
        if df is None or df.cmd.cluster_id != replica.cluster_id:
            return
        if df.since is None:
            # The first hydrated replica's as_of: the dataflow is readable from here.
            df.since = replica.since(df_id)
        if upper > df.upper:
            df.upper = upper
            self._respond(FrontierUppers(df_id, upper))
            self._maybe_compact(df)


@final
class PeekWaiters:
    """A `ResponseSink` that hands each `PeekResponse` to whoever waits for that
    peek (the decoupled design's reply path); other responses go to `inner`."""

    def __init__(self, inner: ResponseSink | None = None) -> None:
        self._inner = inner
        self._results: dict[int, PeekResponse] = {}
        # asyncio's events, not anyio's: one per peek (see `oracle.batching._Batch`).
        self._events: dict[int, asyncio.Event] = {}

    def __call__(self, response: ComputeResponse) -> None:
        if isinstance(response, PeekResponse):
            self._results[response.peek_id] = response
            event = self._events.pop(response.peek_id, None)
            if event is not None:
                event.set()
        elif self._inner is not None:
            self._inner(response)

    async def wait(self, peek_id: int) -> PeekResponse:
        """The response to `peek_id` (consumed: a second wait would block)."""
        while peek_id not in self._results:
            event = self._events.setdefault(peek_id, asyncio.Event())
            await event.wait()
        return self._results.pop(peek_id)
