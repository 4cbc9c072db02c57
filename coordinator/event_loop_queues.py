"""The event loop's queues and the one task that works them off, in strict
priority — internal commands, then controller responses, then client commands
(up to `max_batch` per wake, cut short as soon as a handler posts an internal
message), then the keepalive tick — on one modeled core; and the state every
handler shares, since every handler runs on that one loop.

`EventLoopCoordinator` (`coordinator.event_loop`) is this loop with its
handlers: the statements there, peeks in `event_loop_peeks`, writes in
`event_loop_writes`, SUBSCRIBE in `event_loop_subscribe`.
"""

from __future__ import annotations

import asyncio
import itertools
from abc import abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, final

import anyio

from coordinator.config import PeekStages
from coordinator.peeks import shared_read_ts
from coordinator.planner import DDL
from coordinator.running import RunningCoordinator
from coordinator.session import Result
from coordinator.statements import SqlError, SqlState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from anyio.abc import TaskGroup

    from controllers.commands import ComputeResponse
    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment
    from coordinator.event_loop_peeks import PeekJob
    from coordinator.events import EventSink
    from coordinator.group_commit import PendingWrite
    from coordinator.session import Session
    from coordinator.statements import Statement
    from coordinator.subscribe import Feed, SubscribeResponse
    from sim.runtime.core import Runtime

__all__ = ["EventLoopQueues", "Request"]


def _internal_kind(qualname: str) -> str:
    """`internal.stage.ready` for `EventLoopPeeks._stage.<locals>.ready`: the
    posted coroutine's qualified name without its class (the part of the
    loop that defines it: every posted coroutine is a method or defined in
    one) and without `<locals>`."""
    _cls, *parts = qualname.split(".")
    return "internal." + ".".join(p.lstrip("_") for p in parts if p != "<locals>")


_Queue = Literal["internal", "response", "external", "tick"]
#: The loop's sources by priority, as the biased select of Materialize's
#: `Coordinator::serve` orders them: internal commands, controller responses,
#: client commands, and last the keepalive tick (`advance_timelines_interval`),
#: taken only when nothing else waits.
_PRIORITY: Final[tuple[_Queue, ...]] = ("internal", "response", "external", "tick")


@final
@dataclass(eq=False)
class Request:
    """A client statement waiting for its reply."""

    session: Session
    statement: Statement
    result: Result | None = None
    # asyncio's event, not anyio's: one per statement, waited on before it
    # is set (see `oracle.batching._Batch`; issue 20).
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: A SUBSCRIBE's stream: an error reply ends it.
    feed: Feed | None = None

    def reply(self, result: Result) -> None:
        if self.result is None:
            self.result = result
            self.done.set()
            if self.feed is not None and result.error is not None:
                self.feed.put(result.error)


@final
@dataclass(eq=False)
class _Command:
    """A staged statement's own loop message besides its execute
    (`command-catalog_snapshot` before it, `command-commit` after it)."""

    kind: Literal["catalog_snapshot", "commit"]
    done: asyncio.Event = field(default_factory=asyncio.Event)  # as `Request.done`


class EventLoopQueues(RunningCoordinator):
    """The loop and the state its handlers share (see the module docstring).
    Its subclasses add the handlers; `EventLoopCoordinator` has them all."""

    def __init__(
        self,
        config: CoordinatorConfig,
        env: Environment,
        rt: Runtime,
        *,
        events: EventSink | None = None,
        actor: str = "coordinator",
    ) -> None:
        super().__init__(config, env, rt, cores=1, events=events, actor=actor)
        self._queues: dict[_Queue, deque[tuple[int, Any]]] = {q: deque() for q in _PRIORITY}
        self._arrivals = itertools.count()
        self._wake = asyncio.Event()
        self._peek_ids = itertools.count(1)
        self._peeks: dict[int, PeekJob] = {}
        # Answers that read coordinator state and wait for one confirm_leadership:
        # peek results, and "unknown table" (a read of the in-memory catalog).
        self._confirm_buffer: list[tuple[Callable[[Result], None], Result]] = []
        self._pending_writes: list[tuple[PendingWrite, Request | None]] = []
        self._gc_in_flight = 0
        self._trigger_posted = False
        self._write_lock = anyio.Lock()
        self._read_ts = shared_read_ts(config.known_bad.coordinator_joins_read_ts)
        self._open_requests: list[Request] = []
        self._open_commands: list[_Command] = []
        self._handler_s = 0.0  # time in handlers: CPU and every await that blocks the loop

    # --- lifecycle -------------------------------------------------------------------

    async def _start(self, tg: TaskGroup) -> None:
        tg.start_soon(self._run_loop)
        tg.start_soon(self._periodic_group_commit)

    def _stopped(self) -> None:
        """Fails the statements still waiting for a reply: the loop is gone."""
        shutdown = SqlError(SqlState.ADMIN_SHUTDOWN, "the coordinator shut down")
        for req in self._open_requests:
            req.reply(Result.failed(shutdown))
        self._open_requests.clear()
        for cmd in self._open_commands:
            cmd.done.set()
        self._open_commands.clear()

    def _busy_s(self) -> float:
        return self._handler_s

    # --- the client API --------------------------------------------------------------

    async def _serve(self, session: Session, statement: Statement) -> Result:
        """Staged: catalog_snapshot, execute, commit — three trips through the
        client queue (see `PeekStages`); combined: execute alone."""
        staged = self.config.peek_stages is PeekStages.STAGED
        req = Request(session, statement)
        self._open_requests.append(req)
        try:
            if staged:
                await self._command("catalog_snapshot")
                if req.result is not None:  # the loop stopped meanwhile
                    return req.result
            self._post("external", req)
            await req.done.wait()
        finally:
            if req in self._open_requests:
                self._open_requests.remove(req)
        assert req.result is not None
        if staged and self._tg is not None:
            await self._command("commit")
        return req.result

    async def _command(self, kind: Literal["catalog_snapshot", "commit"]) -> None:
        cmd = _Command(kind)
        self._open_commands.append(cmd)
        self._post("external", cmd)
        try:
            await cmd.done.wait()
        finally:
            if cmd in self._open_commands:
                self._open_commands.remove(cmd)

    async def _handle_command(self, cmd: _Command) -> None:
        """A staged statement's own message, on the loop."""
        costs = self.config.costs
        await self._cpu(costs.catalog_snapshot if cmd.kind == "catalog_snapshot" else costs.commit)
        cmd.done.set()

    # --- the loop --------------------------------------------------------------------

    def _post(self, queue: _Queue, msg: object) -> None:
        self._queues[queue].append((next(self._arrivals), msg))
        self._wake.set()

    async def _next(self) -> tuple[_Queue, list[Any]]:
        """The next message(s) to handle: by priority, or by arrival (FIFO variant).
        Client messages come in batches of up to `max_batch`."""
        while True:
            if self.config.known_bad.fifo_event_loop:
                heads = [(q[0][0], name) for name, q in self._queues.items() if q]
                if heads:
                    _, name = min(heads)
                    return name, [self._queues[name].popleft()]
            else:
                for name in _PRIORITY:
                    q = self._queues[name]
                    if q:
                        if name != "external":
                            return name, [q.popleft()]
                        n = min(len(q), self.config.max_batch)
                        return name, [q.popleft() for _ in range(n)]
            self._wake = asyncio.Event()  # waited on before it is set, as `Request.done`
            await self._wake.wait()

    async def _run_loop(self) -> None:
        costs = self.config.costs
        while True:
            queue, batch = await self._next()
            start = self._rt.now()
            try:
                for k, (_, msg) in enumerate(batch):
                    if queue == "external" and k and self._preempted():
                        # A handler posted a higher-priority message: the rest
                        # goes back to the head of the queue (a biased select
                        # looks at the internal channel first on every turn).
                        self._queues["external"].extendleft(reversed(batch[k:]))
                        break
                    self._counts["loop_messages"] += 1
                    await self._cpu(costs.loop_dispatch)
                    if self._handler_cpu is not None:
                        await self._timed_handler(queue, msg)
                    elif queue in ("internal", "tick"):
                        await msg()
                    elif queue == "response":
                        await self._handle_response(msg)
                    elif isinstance(msg, _Command):
                        await self._handle_command(msg)
                    else:
                        await self._handle_client(msg)
                if queue != "internal" and not self._queues["response"] and self._confirm_buffer:
                    await self._timed("confirm_flush", self._flush_confirmed_peeks())
                if queue == "external":
                    self._drained()
            finally:
                self._handler_s += self._rt.now() - start

    async def _timed_handler(self, queue: _Queue, msg: Any) -> None:
        """One message's handler with its Python CPU recorded by kind (real
        mode): `command.<kind>`, `client.<statement>`, `response`, or
        `internal.<the posted coroutine>`."""
        if queue in ("internal", "tick"):
            coro = msg()
            await self._timed(_internal_kind(coro.__qualname__), coro)
        elif queue == "response":
            await self._timed("response", self._handle_response(msg))
        elif isinstance(msg, _Command):
            await self._timed(f"command.{msg.kind}", self._handle_command(msg))
        else:
            stmt = msg.statement
            kind = "ddl" if isinstance(stmt, DDL) else type(stmt).__name__
            await self._timed(f"client.{kind}", self._handle_client(msg))

    def _preempted(self) -> bool:
        return bool(self._queues["internal"] or self._queues["response"])

    def _on_response(self, response: ComputeResponse) -> None:
        self._post("response", response)

    def _internal(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._post("internal", fn)

    # --- the handlers, each in its part of the loop ----------------------------------

    @abstractmethod
    async def _handle_client(self, req: Request) -> None:
        """A client statement (`coordinator.event_loop`)."""

    @abstractmethod
    async def _handle_response(self, response: ComputeResponse | SubscribeResponse) -> None:
        """A controller response (`coordinator.event_loop_peeks`)."""

    @abstractmethod
    async def _flush_confirmed_peeks(self) -> None:
        """One `confirm_leadership()` for the buffered answers (`coordinator.event_loop_peeks`)."""

    @abstractmethod
    async def _start_peek(self, job: PeekJob) -> None:
        """Starts a peek: its timestamp, then its `Peek` (`coordinator.event_loop_peeks`)."""

    @abstractmethod
    def _drained(self) -> None:
        """No client message is queued (`coordinator.event_loop_writes`)."""

    @abstractmethod
    async def _periodic_group_commit(self) -> None:
        """The keepalive tick, for as long as the loop runs (`coordinator.event_loop_writes`)."""
