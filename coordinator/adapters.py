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
adapters (in virtual mode a shared lock; across OS processes a row of the
deployment's database held `FOR UPDATE`, `coordinator.write_lock`).

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

**One adapter failing** (the nemesis's adapter faults). Each adapter runs in
a task of its own, so one can crash while the others serve: its connections
drop first (their statements end `info`: a write may have been appended),
then its process stops; `connect` skips it, and `restart_adapter` starts a
fresh one joining the same epoch. Each adapter's oracle calls pass its
`ProcessGate` (`oracle.gated`): partitioned, they are refused or hang and
time out; paused, nothing of it starts (oracle calls, CPU) until it resumes
with the timestamps and catalog view it held. The rules above keep all of
it safe: a stale `write_ts` loses the append race and is retried, a stale
catalog is synced up to the next catalog `read_ts`. The known-bad
`ack_lost_race` and `stale_adapter_catalog` each break one of them.

This is virtual mode: every adapter is a simulated process on the one
deterministic loop, and clients are spread over them round robin by `connect`.
In real mode each adapter is an OS process (`coordinator.process_adapters`,
`coordinator.adapter_process`) under the same rules.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Self, final

import anyio
import anyio.lowlevel

from controllers.compute import PeekWaiters
from coordinator.adapter_host import AdapterHost
from coordinator.decoupled import DecoupledCoordinator
from coordinator.environment import open_adapter_incarnation, open_incarnation
from coordinator.follow_catalog import follow_catalog
from coordinator.session import Coordinator, CoordinatorStatistics, Result, Session
from coordinator.statements import SqlError, SqlState
from oracle.gated import ProcessGate
from sim.runtime.core import ProcessClock
from sim.runtime.errors import InvalidUsage
from sim.runtime.tasks import AsyncExitStack, Ready

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable
    from types import TracebackType

    from anyio.abc import TaskGroup, TaskStatus

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
        self._tg: TaskGroup | None = None
        #: Each adapter's process switches (a nemesis pauses or partitions one).
        self.gates = [ProcessGate() for _ in range(config.adapters)]
        self._slots: list[_Slot] = []
        self._restarts = 0
        #: Each adapter's wall clock, a process's own (the time faults move one, issue 38).
        self.clocks = [ProcessClock() for _ in range(config.adapters)]
        #: Adapter i runs on its own Runtime stream (adapter 1 on `rt`'s) and clock.
        self.adapters = [
            DecoupledCoordinator(
                config,
                env,
                (rt if i == 1 else rt.derive(f"adapter-{i}")).with_clock(self.clocks[i - 1]),
                events=events,
                actor=adapter_actor(actor, i),
                host=self,
                gate=self.gates[i - 1],
            )
            for i in range(1, config.adapters + 1)
        ]

    # --- AdapterHost -----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def open_adapter(
        self, rt: Runtime, actor: str, gate: ProcessGate | None = None
    ) -> AsyncIterator[Incarnation]:
        shared = self._shared
        if shared is None:
            raise InvalidUsage("adapters start inside their MultiAdapterCoordinator")
        epoch = shared.catalog.epoch()
        assert epoch is not None
        async with open_adapter_incarnation(
            self._env, self.config, rt, shared, epoch=epoch, events=self.event_sink, actor=actor,
            gate=gate,
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
            )
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            await self._start_command_tasks(tg, self._shared)
            # Each adapter in a task of its own, so one can crash while the
            # others run (the `adapter-crash` fault); on exit they stop in
            # reverse order before the shared components.
            self._tg = tg
            for i in range(len(self.adapters)):
                self._slots.append(_Slot())
                await tg.start(self._run_adapter, i)
            stack.push_async_callback(self._stop_adapters)
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

    def connect(self, *, adapter: int | None = None) -> Session:
        """A new client connection, on the next adapter round robin, or on
        adapter `adapter` (1-based) when given: a use case pinned to its own
        serving process, as the isolation experiment needs. Pinned sessions
        do not advance the round robin.

        Raises:
            InvalidUsage: `adapter` is not in 1..adapters.
        """
        if adapter is None:
            chosen = self.adapters[self._next_serving()]
        elif 1 <= adapter <= len(self.adapters):
            chosen = self.adapters[adapter - 1]
        else:
            raise InvalidUsage(f"adapter {adapter} is not one of 1..{len(self.adapters)}")
        return Session(chosen, next(self._session_ids))

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
        return CoordinatorStatistics.summed(a.statistics() for a in self.adapters)

    def adapter_statistics(self) -> list[CoordinatorStatistics]:
        """Each adapter's own counters, in adapter order."""
        return [a.statistics() for a in self.adapters]

    # --- one adapter's process (issue 36's adapter faults) ---------------------------

    @property
    def incarnation(self) -> Incarnation:
        """The deployment's own process: persist and the shared controllers
        (what a `replica-crash` fault reaches)."""
        if self._shared is None:
            raise RuntimeError("the coordinator is not running")
        return self._shared

    async def _run_adapter(self, i: int, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Adapter `i` (0-based) serves until its slot is stopped."""
        slot = self._slots[i]
        try:
            async with self.adapters[i]:
                task_status.started()
                await slot.stop.wait()
        finally:
            slot.exited.set()

    async def _stop_adapters(self) -> None:
        for slot in reversed(self._slots):
            slot.stop.set()
            await slot.exited.wait()

    def _next_serving(self) -> int:
        """The next adapter round robin that is not down (any, if all are)."""
        n = len(self.adapters)
        first = next(self._round_robin) % n
        for k in range(n):
            i = (first + k) % n
            if not self.adapter_down(i):
                for _ in range(k):  # keep the round robin's spread
                    next(self._round_robin)
                return i
        return first

    def adapter_down(self, i: int) -> bool:
        """Whether adapter `i` (0-based) has crashed and not restarted."""
        return i < len(self._slots) and self._slots[i].down.is_set()

    def dropped(self, session: Session) -> anyio.Event | None:
        """Set once the adapter `session` is connected to has crashed (its
        connections dropped); None if `session` is not on one of these adapters."""
        for adapter, slot in zip(self.adapters, self._slots, strict=False):
            if session.coordinator is adapter:
                return slot.down
        return None

    async def crash_adapter(self, i: int) -> None:
        """Adapter `i` (0-based) crashes while the others run: its clients'
        connections drop first (their statements end `info`), then its
        process stops. Its durable effects stay; its clients reconnect."""
        slot = self._slots[i]
        if slot.down.is_set():
            return
        slot.down.set()
        for _ in range(3):  # let the dropped connections' cancellations land
            await anyio.lowlevel.checkpoint()
        slot.stop.set()
        await slot.exited.wait()

    async def restart_adapter(self, i: int) -> None:
        """A fresh process in crashed adapter `i`'s place (a new incarnation
        joining the deployment's catalog epoch, with the slot's gate)."""
        if not self.adapter_down(i) or self._tg is None:
            return
        self._restarts += 1
        n = self._restarts
        self.adapters[i] = DecoupledCoordinator(
            self.config, self._env, self._rt.derive(f"adapter-{i + 1}-restart-{n}").with_clock(self.clocks[i]),
            events=self.event_sink, actor=f"{adapter_actor(self.actor, i + 1)}.{n}",
            host=self, gate=self.gates[i],
        )
        self._slots[i] = _Slot()
        await self._tg.start(self._run_adapter, i)


@final
@dataclass
class _Slot:
    """One adapter's process: `down` once it crashed (its connections drop),
    `stop` tells its task to stop it, `exited` once it has."""

    down: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    exited: anyio.Event = field(default_factory=anyio.Event)
