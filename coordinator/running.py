"""What both architectures keep while running: the incarnation they opened, the
task group their tasks run in, the modeled cores their CPU work runs on,
counters, the catalog view cache and the fenced state — and the lifecycle that
opens and closes them. Only scheduling differs between them (the hooks
`_start`, `_serve`, `_on_response`, `_stopping`, `_stopped`); this is the rest."""

from __future__ import annotations

import collections
from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

import anyio

from coordinator.config import Frontend
from coordinator.environment import open_incarnation
from coordinator.group_commit import GroupCommitStats
from coordinator.planner import CatalogView
from coordinator.session import Coordinator, CoordinatorStatistics, Result
from coordinator.statements import SqlError, SqlState
from coordinator.subscribe import Subscription, Subscriptions, shutdown_error
from oracle.api import CATALOG_TIMELINE
from sim.runtime.backend_stats import current_backend_stats
from sim.runtime.tasks import DONE, AsyncExitStack, Ready

if TYPE_CHECKING:
    from collections.abc import Awaitable, Coroutine
    from types import TracebackType

    from anyio.abc import TaskGroup

    from controllers.commands import ComputeResponse
    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment, Incarnation
    from coordinator.events import EventSink
    from coordinator.session import Session
    from coordinator.statements import Statement, Subscribe
    from coordinator.subscribe import Feed
    from sim.runtime.core import Runtime

__all__ = ["RunningCoordinator"]

T = TypeVar("T")


class RunningCoordinator(Coordinator):
    """Shared state of a running coordinator (see the module docstring).

    Args:
        cores: the modeled cores CPU work runs on (the event loop has one).
    """

    #: Whether opening the incarnation feeds the catalog's contents to the
    #: controllers (`open_incarnation`'s `derive_commands`).
    _DERIVE_COMMANDS: ClassVar[bool] = True

    def __init__(
        self,
        config: CoordinatorConfig,
        env: Environment,
        rt: Runtime,
        *,
        cores: int,
        events: EventSink | None = None,
        actor: str = "coordinator",
    ) -> None:
        super().__init__(config, events=events, actor=actor)
        self._env = env
        self._rt = rt
        self._catalog_timeline = env.timeline(CATALOG_TIMELINE)
        self._pool = rt.core_pool(cores, actor)
        #: Virtual mode predicting a real run: the process's one interpreter
        #: thread, which every modeled cost's Python share holds (`Interpreter`).
        self._interp = rt.core_pool(1, f"{actor}.interpreter") if config.interpreter is not None else None
        self._inc: Incarnation | None = None
        self._tg: TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self._view: tuple[int, CatalogView] | None = None
        self._fenced: SqlError | None = None
        self._gc_stats = GroupCommitStats()
        #: statements, peeks, writes, ddl, confirms, conflicts, loop_messages
        self._counts = collections.Counter[str]()
        #: A real-mode compare's recorder of per-handler Python CPU (None, as in virtual mode: not timed).
        self._handler_cpu = current_backend_stats()
        self._subscriptions = Subscriptions()

    # --- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            self._inc = await stack.enter_async_context(
                open_incarnation(
                    self._env,
                    self.config,
                    self._rt,
                    self._on_response,
                    derive_commands=self._DERIVE_COMMANDS,
                    events=self.event_sink,
                    actor=self.actor,
                )
            )
            stack.callback(self._stopped)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            await self._start(self._tg)
            if self._interp is not None:
                self._tg.start_soon(self._interpreter_background)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        stack, self._stack = self._stack, None
        assert stack is not None
        # Subscriptions end first (57P01): their producers are cancelled with
        # the task group, before the incarnation they read from closes.
        self._subscriptions.shutdown(shutdown_error())
        self._stopping()
        return await stack.__aexit__(et, e, tb)

    @abstractmethod
    async def _start(self, tg: TaskGroup) -> None:
        """Starts the architecture's tasks in `tg` (the incarnation is open)."""

    @abstractmethod
    def _on_response(self, response: ComputeResponse) -> None:
        """Takes one compute controller response; must not block."""

    def _stopping(self) -> None:
        """Shutdown begins: runs before the tasks are cancelled (nothing by default)."""

    def _stopped(self) -> None:
        """The tasks have ended; runs before the incarnation closes (nothing by default)."""

    # --- the client API --------------------------------------------------------------

    def execute(self, session: Session, statement: Statement) -> Awaitable[Result]:
        if self._fenced is not None:
            return Ready(Result.failed(self._fenced))
        if self._tg is None:
            return Ready(Result.failed(SqlError(SqlState.ADMIN_SHUTDOWN, "the coordinator is not running")))
        if self._interp is not None:
            return self._with_interpreter(session, statement)
        if self.config.frontend is Frontend.PGWIRE:
            return self._via_pgwire(session, statement)
        return self._serve(session, statement)

    async def _with_interpreter(self, session: Session, statement: Statement) -> Result:
        """The statement, then its Python outside the handlers (the client, the
        driver, the replica and persist: `Interpreter.per_op_s`) on the
        interpreter."""
        assert self._interp is not None
        assert self.config.interpreter is not None
        if self.config.frontend is Frontend.PGWIRE:
            result = await self._via_pgwire(session, statement)
        else:
            result = await self._serve(session, statement)
        per_op = self.config.interpreter.per_op_s
        if per_op > 0:
            await self._rt.cpu(per_op, self._interp)
        return result

    async def _interpreter_background(self) -> None:
        """`Interpreter.base_cores` of the interpreter, whatever the load: a
        step of `Interpreter.slice_s` on a fixed schedule (every
        `slice_s / base_cores`), so work delayed by contention is caught up,
        not dropped (as a real background task's work is)."""
        assert self._interp is not None
        assert self.config.interpreter is not None
        base = self.config.interpreter.base_cores
        if base <= 0:
            return
        busy = self.config.interpreter.slice_s
        quantum = busy / base
        due = self._rt.now()
        while True:
            await self._rt.cpu(busy, self._interp)
            due += quantum
            await self._rt.sleep(max(0.0, due - self._rt.now()))

    async def _via_pgwire(self, session: Session, statement: Statement) -> Result:
        """`Frontend.PGWIRE`: the client's network and the adapter frontend's
        per-connection task, off the loop and off the coordinator's cores —
        one draw of `frontend.pgwire`, half on the way in, half on the way out."""
        seconds = self._rt.sample("frontend.pgwire")
        await self._rt.sleep(seconds / 2)
        result = await self._serve(session, statement)
        await self._rt.sleep(seconds / 2)
        return result

    @abstractmethod
    async def _serve(self, session: Session, statement: Statement) -> Result:
        """`execute` on a running coordinator not (yet) known to be fenced."""

    def subscribe(self, session: Session, statement: Subscribe) -> Subscription:
        def open_(feed: Feed) -> None:
            if self._fenced is not None:
                feed.put(self._fenced)
            elif self._tg is None:
                feed.put(SqlError(SqlState.ADMIN_SHUTDOWN, "the coordinator is not running"))
            else:
                self._subscriptions.add(feed)
                self._start_subscription(session, statement, feed)

        return Subscription(open_)

    @abstractmethod
    def _start_subscription(self, session: Session, statement: Subscribe, feed: Feed) -> None:
        """Starts streaming `statement` into `feed` (`serve_subscription` in
        the coordinator's task group); must not block."""

    # --- shared state ----------------------------------------------------------------

    @property
    def incarnation(self) -> Incarnation:
        if self._inc is None:
            raise RuntimeError("the coordinator is not running")
        return self._inc

    def statistics(self) -> CoordinatorStatistics:
        c = self._counts
        return CoordinatorStatistics(
            statements=c["statements"],
            peeks=c["peeks"],
            writes=c["writes"],
            ddl=c["ddl"],
            group_commits=self._gc_stats.commits,
            writes_group_committed=self._gc_stats.writes,
            confirm_leadership_calls=c["confirms"],
            oracle_calls=self._inc.oracle_calls() if self._inc is not None else 0,
            loop_busy_s=self._busy_s(),
            loop_cores=self._pool.cores,
            ddl_conflicts=c["conflicts"],
            loop_messages=c["loop_messages"],
            empty_group_commits=self._gc_stats.empty_commits,
            lost_races=self._gc_stats.lost_races,
        )

    def _busy_s(self) -> float:
        """Modeled CPU spent; the event loop overrides it with its handler time."""
        return self._pool.statistics().busy_s

    def _cpu(self, seconds: float) -> Awaitable[None]:
        """Modeled CPU on the coordinator's cores (nothing for 0); await it. The
        hold itself, not a coroutine around it (see `Runtime.cpu`). With an
        `Interpreter`, its Python share also holds the interpreter."""
        if not seconds > 0:
            return DONE
        if self._interp is None:
            return self._rt.cpu(seconds, self._pool)
        return self._cpu_with_interpreter(seconds)

    async def _cpu_with_interpreter(self, seconds: float) -> None:
        """As a real-mode handler spends it: on one of the modeled cores
        throughout, its Python share on the interpreter too (waiting for it
        while holding the core), the rest slept."""
        assert self._interp is not None
        assert self.config.interpreter is not None
        python = seconds * self.config.interpreter.python_share
        async with self._pool.core():
            if python > 0:
                await self._rt.cpu(python, self._interp)
            if seconds - python > 0:
                await self._rt.sleep(seconds - python)

    def _timed(self, kind: str, handler: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """`handler` itself, or with its Python CPU recorded as one call of
        `kind` when a real-mode run records it (`BackendStats.timed`)."""
        stats = self._handler_cpu
        return handler if stats is None else stats.timed(kind, handler)

    def _fence(self, exc: BaseException) -> SqlError:
        """Marks this coordinator fenced (it stops serving, as Materialize halts)."""
        if self._fenced is None:
            self._fenced = SqlError(
                SqlState.ADMIN_SHUTDOWN, f"fenced by a newer coordinator: {exc}"
            )
        return self._fenced

    def _catalog_ts(self) -> int:
        """The time of the cached catalog (the catalog's contents a plan sees)."""
        return self.incarnation.catalog.cached_upper - 1

    def _catalog_view(self) -> CatalogView:
        """Name lookups over the cached catalog, rebuilt when the cache moves."""
        catalog = self.incarnation.catalog
        upper = catalog.cached_upper
        if self._view is None or self._view[0] != upper:
            self._view = (upper, CatalogView(catalog.state()))
        return self._view[1]
