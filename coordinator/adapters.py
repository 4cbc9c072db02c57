"""Several serving processes ("adapters", issue 36) of the decoupled design on
one deployment: each adapter is a `DecoupledCoordinator` with its own sessions,
peek batching (its own `BatchingOracle` clients), group-commit task and pool of
`cores` modeled cores; they share the timestamp oracle's durable rows, the one
durable catalog, the table shards in persist and the controllers.

The controllers and their command tasks (the catalog subscription that feeds
them) run once for the deployment, here — the seeds' direction of controllers
in a process of their own that every adapter reaches. The catalog is opened
once, which bumps its epoch and fences older incarnations; each adapter then
*joins* it at that epoch with its own handle (`DurableCatalog.join`), so the
adapters of one deployment never fence each other, while a newer incarnation
(a restart, a split brain) fences all of them alike.

**Writes across adapters.** Each adapter's group commit takes its `write_ts`
from the shared oracle (unique, increasing across adapters), appends every
table at it through the shared storage controller (compare-and-append on each
shard's upper), and only once that append is durable runs `apply_write(ts)`,
then acknowledges. Two adapters' commits race: one whose append finds a table
already advanced past its `ts` by the other lost the race; its writes there
were not written, so it commits them again at a fresh `write_ts` (never
acknowledged twice, never lost; `coordinator.group_commit`). A peek on adapter
B issued after a write was acknowledged on A takes its `read_ts` from the same
oracle, after A's `apply_write(ts)` completed, so `read_ts >= ts`, and waits
for the tables' uppers to pass it: it sees the write. UPDATE and DELETE
(read, then write the diffs) hold the deployment's one write lock across the
adapters (in virtual mode a shared lock; across OS processes it needs a lock
service or txn-wal's optimistic commit: a later increment).

**DDL across adapters.** DDL on A is a compare-and-append on the catalog shard
at `write_ts("catalog")`, ending with `apply_write("catalog")` before the
reply. A statement on B starts with the catalog timeline's `read_ts`, which is
then at or past A's DDL; B's catalog handle is synced up to it before planning
(`DecoupledCoordinator._catalog_at_read_ts`), and B's commands carry that
`catalog_ts`, which the shared controllers wait for (their catalog frontier,
fed by the subscription) before acting. A DDL on B is planned on B's cache,
which may lag A's DDL: its compare-and-append then finds the catalog's upper
moved and B re-plans on the refreshed cache; and a plan that fails or is a
no-op (`already exists`, `depends on it`, `IF NOT EXISTS`) is only answered
once a linearized sync shows the cache was current, else planned again.

Virtual mode only for now: every adapter is a simulated process on the one
deterministic loop, and clients are spread over them round robin by `connect`.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING, Self, final

import anyio

from controllers.compute import PeekWaiters
from coordinator.decoupled import AdapterHost, DecoupledCoordinator, follow_catalog
from coordinator.environment import open_adapter_incarnation, open_incarnation
from coordinator.session import Coordinator, CoordinatorStatistics, Result, Session
from coordinator.statements import SqlError, SqlState
from sim.runtime.errors import InvalidUsage
from sim.runtime.tasks import AsyncExitStack, Ready

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable
    from types import TracebackType

    from anyio.abc import TaskGroup

    from controllers.commands import DeterministicCommand
    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment, Incarnation
    from coordinator.events import EventSink
    from coordinator.statements import Statement
    from sim.runtime.core import Runtime

__all__ = ["MultiAdapterCoordinator", "adapter_actor"]


def adapter_actor(actor: str, index: int) -> str:
    """The name of adapter `index` (1-based) of coordinator `actor` in events."""
    return f"{actor}/adapter-{index}"


@final
class MultiAdapterCoordinator(Coordinator, AdapterHost):
    """`config.adapters` decoupled adapters on one deployment (see the module
    docstring); owned via `async with`. Its statistics are the adapters' summed."""

    def __init__(
        self,
        config: CoordinatorConfig,
        env: Environment,
        rt: Runtime,
        *,
        events: EventSink | None = None,
        actor: str = "coordinator",
    ) -> None:
        if config.adapters < 2:
            raise InvalidUsage(f"{config.name}: a multi-adapter coordinator needs adapters >= 2")
        super().__init__(config, events=events, actor=actor)
        self._env = env
        self._rt = rt
        self.waiters = PeekWaiters()
        self.peek_ids = itertools.count(1)
        self.write_lock = anyio.Lock()
        self._shared: Incarnation | None = None
        self._stack: AsyncExitStack | None = None
        self._round_robin = itertools.count()
        #: Adapter i runs on its own Runtime stream (adapter 1 on `rt` itself).
        self.adapters = [
            DecoupledCoordinator(
                config,
                env,
                rt if i == 1 else rt.derive(f"adapter-{i}"),
                events=events,
                actor=adapter_actor(actor, i),
                host=self,
            )
            for i in range(1, config.adapters + 1)
        ]

    # --- AdapterHost -----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def open_adapter(self, rt: Runtime, actor: str) -> AsyncIterator[Incarnation]:
        shared = self._shared
        if shared is None:
            raise InvalidUsage("adapters start inside their MultiAdapterCoordinator")
        epoch = shared.catalog.epoch()
        assert epoch is not None
        async with open_adapter_incarnation(
            self._env, self.config, rt, shared, epoch=epoch, events=self.event_sink, actor=actor
        ) as inc:
            yield inc

    # --- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            # The deployment's own process: persist, the catalog (opened: the
            # epoch every adapter joins) and the controllers.
            self._shared = await stack.enter_async_context(
                open_incarnation(
                    self._env, self.config, self._rt, self.waiters,
                    derive_commands=False, events=self.event_sink, actor=self.actor,
                )
            )  # fmt: skip
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            await self._start_command_tasks(tg, self._shared)
            for adapter in self.adapters:
                await stack.enter_async_context(adapter)
            self._stack = stack.pop_all()
        return self

    async def _start_command_tasks(self, tg: TaskGroup, inc: Incarnation) -> None:
        """Both controllers' command tasks; returns once they caught up."""
        storage_ready, compute_ready = anyio.Event(), anyio.Event()

        async def to_compute(cmd: DeterministicCommand) -> None:
            inc.compute.send(cmd)

        tg.start_soon(follow_catalog, inc, self._rt, inc.storage.apply, storage_ready)
        tg.start_soon(follow_catalog, inc, self._rt, to_compute, compute_ready)
        await storage_ready.wait()
        await compute_ready.wait()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        stack, self._stack = self._stack, None
        assert stack is not None
        return await stack.__aexit__(et, e, tb)

    # --- the client API --------------------------------------------------------------

    def connect(self) -> Session:
        """A new client connection, on the next adapter round robin."""
        adapter = self.adapters[next(self._round_robin) % len(self.adapters)]
        return Session(adapter, next(self._session_ids))

    def execute(self, session: Session, statement: Statement) -> Awaitable[Result]:
        # Sessions from `connect` name their adapter; this is for one that does not.
        if session.coordinator is not self:
            return session.coordinator.execute(session, statement)
        return Ready(
            Result.failed(SqlError(SqlState.FEATURE_NOT_SUPPORTED, "connect() to pick an adapter"))
        )

    def statistics(self) -> CoordinatorStatistics:
        """The adapters' counters summed (oracle calls are each adapter's own
        clients'; `loop_cores` is every adapter's pool together)."""
        parts = [a.statistics() for a in self.adapters]
        races = sum(a.group_commit_statistics().lost_races for a in self.adapters)
        return CoordinatorStatistics(
            statements=sum(p.statements for p in parts),
            peeks=sum(p.peeks for p in parts),
            writes=sum(p.writes for p in parts),
            ddl=sum(p.ddl for p in parts),
            group_commits=sum(p.group_commits for p in parts),
            writes_group_committed=sum(p.writes_group_committed for p in parts),
            confirm_leadership_calls=sum(p.confirm_leadership_calls for p in parts),
            oracle_calls=sum(p.oracle_calls for p in parts),
            loop_busy_s=sum(p.loop_busy_s for p in parts),
            loop_cores=sum(p.loop_cores for p in parts),
            ddl_conflicts=sum(p.ddl_conflicts for p in parts),
            loop_messages=sum(p.loop_messages for p in parts),
            empty_group_commits=sum(p.empty_group_commits for p in parts),
            lost_races=races,
        )

    def adapter_statistics(self) -> list[CoordinatorStatistics]:
        """Each adapter's own counters, in adapter order."""
        return [a.statistics() for a in self.adapters]
