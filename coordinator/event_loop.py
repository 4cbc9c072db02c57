"""Today's Coordinator: one loop task that owns all coordinator state and works
off messages in strict priority — internal commands, then controller responses,
then client commands (up to `max_batch` per wake, cut short as soon as a handler
posts an internal message) — on one modeled core. Taking a message off a queue
costs `loop_dispatch`; `loop_messages` counts them.

Every handler spends modeled CPU on the loop's single core, and every `await`
inside a handler blocks the loop: that is the point of the model (seed 001).

Paths (seed 000, seed 001, DESIGN.md §6):

- **DDL**: 1. plan against the catalog; 2. catalog transaction (the stash by
  default) on the loop; 3. derive the deterministic controller commands and send
  them, advancing the controllers' catalog frontier; 4. reply.
- **Peek, oracle calls on the loop** (`event-loop`): 1. `read_ts()` in the handler;
  2. the timestamp: the later of it and the collection's since, held in the
  same step (see `peeks.py`); `Peek` to the compute controller; 3. the
  response arrives as a controller message (a timestamp above `read_ts` first
  waits off the loop for the oracle to reach it) and is buffered; 4. once no
  controller message is waiting, one `confirm_leadership()` (a durable stash transaction, on the loop) for the
  whole buffer; 5. reply to every buffered peek. A statement that finds its
  table unknown is answered through the same buffer: that answer read the
  in-memory catalog, which is current only while this coordinator leads.
- **Peek, oracle calls off the loop** (`event-loop+pg-oracle`): 1. the peek
  waits off the loop for `read_ts()` (batched by `BatchingOracle` when
  `batch_read_ts`); 2. an internal message brings the timestamp back; 3. `Peek` to compute; 4. reply on the response —
  no `confirm_leadership()` (seed 000's end state; `confirm_leadership=True`
  keeps the check, through the catalog's epoch, as its rollout did — without
  it a deposed coordinator serves reads from a stale catalog, see
  tests/anomalies/test_findings.py).
- **Insert**: 1. the write joins the pending writes and posts the
  group-commit trigger, an internal message — at once (`immediate`) or once
  no client message is queued (`after-draining`, the fix seed 000's rollout
  needed); 2. the trigger, run before any further client message, starts a
  commit of *every* pending write unless `commits_in_flight` are in flight
  (1 by default; no bound in today's loop, which so starts one commit per
  write), so how many writes a commit takes is an outcome of the loop; 3. the
  oracle's calls in the era's places (`OracleCalls`, after PR #37363): on the
  loop, `peek_write_ts` and `write_ts` awaited in the trigger's handler, the
  append and `apply_write` in a task, `read_ts` awaited in the completion's
  handler (3 of 4 calls on the loop); off the loop, all but the completion in
  one task; 4. an internal message replies to its writers and triggers again
  for writes that arrived meanwhile. A periodic group commit (every
  `group_commit_interval_s`, whatever the load) advances idle tables.
- **Constant query** (`SELECT 1`): answered on the loop (the fast path), once
  the optimizer stage is back when staged.

**Messages per statement** (`PeekStages`, from "A Small Coordinator"): staged,
every statement is also a `catalog_snapshot` message before its execute and a
`commit` message after it, and a peek's two off-loop stages (optimizer,
timestamp) each post a `peek_stage_ready`: six messages per SELECT, four per
`SELECT 1`. Combined (the loop as seed 000 describes it): execute, the
timestamp message when read_ts runs off the loop, and the response.
- **Subscribe**: a client message: 1. plan on the loop; 2. `read_ts` as a
  peek's (on the loop, or off it with the oracle's calls off the loop);
  3. a task runs `serve_subscription` (`coordinator.subscribe`); each item
  it produces comes back as a controller response (`SubscribeResponse`,
  `controller_response + peek_finish + per_row` on the loop, as
  Materialize's subscribe responses reach the client through its loop); the
  reply (`as_of`) waits for the batch's `confirm_leadership()`, as a peek's
  result does.
- **Update/Delete**: a task takes the global write lock, reads the matching rows
  through the peek path at a linearized timestamp, writes their replacements
  through group commit and replies: nothing amortizes, so each pays every
  oracle round trip (seed 000 predicts these get slower with the Postgres oracle).

Known-bad variants: `fifo_event_loop` (one queue in arrival order, no
priorities), `skip_confirm_leadership` (reply to peeks without the durable
check, so a deposed coordinator's stale reads go unnoticed), `no_write_lock`
(read-then-writes overlap), `unbounded_group_commits` (a commit per trigger
even with the oracle's calls off the loop) and `coordinator_joins_read_ts`
(a peek takes the answer of a read_ts already in flight).

One module past 500 lines on purpose: every handler runs on the one loop and
shares its state (queues, peeks in flight, the confirm buffer, pending
writes); what both architectures share lives in `running.py`, `peeks.py` and
`group_commit.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, final

import anyio

from catalog.api import Conflict, Fenced
from controllers.commands import Peek, PeekResponse
from controllers.derive import derive
from coordinator.config import GroupCommitPolicy, OracleCalls, PeekStages
from coordinator.environment import advance_catalog_frontier
from coordinator.group_commit import GroupCommit, PendingWrite
from coordinator.peeks import (
    MAX_PEEK_ATTEMPTS,
    below_since,
    choose_timestamp,
    constant_result,
    linearize,
    peek_result,
    shared_read_ts,
)
from coordinator.planner import DDL, PeekPlan, ReadThenWritePlan, apply_ddl
from coordinator.running import RunningCoordinator
from coordinator.session import Result
from coordinator.statements import (
    Delete,
    Insert,
    Select,
    SelectConstant,
    SqlError,
    SqlState,
    Subscribe,
    Update,
)
from coordinator.subscribe import Started, SubscribeResponse, serve_subscription, subscribe_table
from oracle.stash import Fenced as OracleFenced
from sim.runtime.errors import ExternalError
from sim.runtime.tasks import DONE

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from anyio.abc import TaskGroup

    from controllers.commands import ComputeResponse
    from controllers.frontier import ReadHold
    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment
    from coordinator.events import EventSink
    from coordinator.session import Session
    from coordinator.statements import Statement
    from coordinator.subscribe import Feed, Item
    from sim.runtime.core import Runtime

__all__ = ["EventLoopCoordinator"]


def _internal_kind(qualname: str) -> str:
    """`internal.stage.ready` for `EventLoopCoordinator._stage.<locals>.ready`."""
    parts = [p.lstrip("_") for p in qualname.split(".") if p not in ("<locals>", "EventLoopCoordinator")]
    return "internal." + ".".join(parts)

_Queue = Literal["internal", "response", "external", "tick"]
#: The loop's sources by priority, as the biased select of Materialize's
#: `Coordinator::serve` orders them: internal commands, controller responses,
#: client commands, and last the keepalive tick (`advance_timelines_interval`),
#: taken only when nothing else waits.
_PRIORITY: Final[tuple[_Queue, ...]] = ("internal", "response", "external", "tick")


@final
@dataclass(eq=False)
class _Request:
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
    done: asyncio.Event = field(default_factory=asyncio.Event)  # as `_Request.done`


@final
@dataclass(eq=False)
class _PeekJob:
    """A peek in flight; `deliver` gets its rows (or error) and timestamps."""

    plan: PeekPlan
    deliver: Callable[[Result], None]
    confirm: bool  # reply only after a confirm_leadership (today's linearized reads)
    read_ts: int | None = None  # the chosen timestamp (see `peeks.choose_timestamp`)
    catalog_ts: int | None = None
    oracle_ts: int = 0  # the oracle's read_ts it was chosen from
    at_least: int = 0  # a rehydrated replica's since (`below_since`)
    hold: ReadHold | None = None  # the collection held at read_ts until the answer
    attempts: int = 0


@final
class EventLoopCoordinator(RunningCoordinator):
    """See the module docstring. Own it with `async with`."""

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
        self._peeks: dict[int, _PeekJob] = {}
        # Answers that read coordinator state and wait for one confirm_leadership:
        # peek results, and "unknown table" (a read of the in-memory catalog).
        self._confirm_buffer: list[tuple[Callable[[Result], None], Result]] = []
        self._pending_writes: list[tuple[PendingWrite, _Request | None]] = []
        self._gc_in_flight = 0
        self._trigger_posted = False
        self._write_lock = anyio.Lock()
        self._read_ts = shared_read_ts(config.known_bad.coordinator_joins_read_ts)
        self._open_requests: list[_Request] = []
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
        req = _Request(session, statement)
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
            self._wake = asyncio.Event()  # waited on before it is set, as `_Request.done`
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

    def _drained(self) -> None:
        """After-draining policy: once no client message is queued, trigger the
        group commit of whatever writes are pending."""
        if (
            self.config.group_commit is GroupCommitPolicy.AFTER_DRAINING
            and not self._queues["external"]
            and self._pending_writes
        ):
            self._trigger_group_commit()

    def _on_response(self, response: ComputeResponse) -> None:
        self._post("response", response)

    def _internal(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._post("internal", fn)

    # --- client messages -----------------------------------------------------------

    async def _handle_command(self, cmd: _Command) -> None:
        costs = self.config.costs
        await self._cpu(costs.catalog_snapshot if cmd.kind == "catalog_snapshot" else costs.commit)
        cmd.done.set()

    async def _handle_client(self, req: _Request) -> None:
        self._counts["statements"] += 1
        costs = self.config.costs
        await self._cpu(costs.parse_plan)
        if self._fenced is not None:
            req.reply(Result.failed(self._fenced))
            return
        stmt = req.statement
        try:
            if isinstance(stmt, DDL):
                await self._ddl(req)
            elif isinstance(stmt, SelectConstant):
                # The fast path: answered from the plan (staged: once the
                # optimizer stage is back), on the loop.
                async def answer() -> None:
                    await self._cpu(costs.per_row)
                    req.reply(constant_result(stmt))

                await self._stage(answer)
            elif isinstance(stmt, Select):
                self._counts["peeks"] += 1
                plan = self._catalog_view().plan_select(stmt)
                await self._cpu(costs.peek_sequence)
                job = _PeekJob(plan, req.reply, self.config.confirm_leadership)
                await self._stage(lambda: self._start_peek(job))
            elif isinstance(stmt, Insert):
                self._counts["writes"] += 1
                write = self._catalog_view().plan_insert(stmt)
                await self._cpu(costs.write_sequence + costs.per_row * len(write.updates))
                pending = PendingWrite(write.table_id, write.updates, self._catalog_ts())
                self._pending_writes.append((pending, req))
                if self.config.group_commit is GroupCommitPolicy.IMMEDIATE:
                    self._trigger_group_commit()
            elif isinstance(stmt, Update | Delete):
                self._counts["writes"] += 1
                rtw = self._catalog_view().plan_read_then_write(stmt)
                assert self._tg is not None
                self._tg.start_soon(self._read_then_write, req, rtw)
            elif isinstance(stmt, Subscribe):
                await self._subscribe(req, stmt)
            else:
                raise SqlError(
                    SqlState.FEATURE_NOT_SUPPORTED, f"{type(stmt).__name__} is not supported"
                )
        except SqlError as exc:
            if (
                exc.code is SqlState.UNDEFINED_TABLE
                and self.config.confirm_leadership
                and not self.config.known_bad.skip_confirm_leadership
            ):
                # The catalog said no: only true if we still lead.
                self._confirm_buffer.append((req.reply, Result.failed(exc)))
            else:
                req.reply(Result.failed(exc))

    async def _ddl(self, req: _Request) -> None:
        self._counts["ddl"] += 1
        inc = self.incarnation
        costs = self.config.costs
        await self._cpu(costs.ddl_sequence + costs.ddl_per_entry * len(inc.catalog.state().entries))
        tx = inc.catalog.transaction()
        apply_ddl(tx, self._catalog_view(), req.statement)
        if tx.is_empty():  # IF [NOT] EXISTS that changed nothing
            req.reply(Result(catalog_ts=self._catalog_ts()))
            return
        start = self._rt.now()
        try:
            result = await inc.catalog.commit_transaction(tx)
        except (Fenced, OracleFenced) as exc:
            req.reply(Result.failed(self._fence(exc)))
            return
        except ExternalError as exc:
            req.reply(
                Result.failed(SqlError(SqlState.INDETERMINATE, f"catalog transaction: {exc}"))
            )
            return
        if isinstance(result, Conflict):
            # Only another writer moves the catalog under the loop: a newer
            # coordinator whose epoch bump we have not seen yet.
            req.reply(Result.failed(self._fence(RuntimeError("the catalog moved under the loop"))))
            return
        ts = result.upper - 1
        inc.emit("catalog-append", "catalog", start, timeline=self._catalog_timeline, ts=ts)
        for cmd in derive(tx.updates(ts)):
            await inc.storage.apply(cmd)
            inc.compute.send(cmd)
        await advance_catalog_frontier(inc, result.upper)
        req.reply(Result(catalog_ts=ts))

    # --- peeks ----------------------------------------------------------------------

    async def _stage(self, then: Callable[[], Awaitable[None]]) -> None:
        """Staged: the optimizer stage runs off the loop (Materialize spawns it)
        and posts `peek_stage_ready`, whose handler runs `then`; combined:
        `then` at once. The optimizer's own CPU is on other cores: not modeled."""
        if self.config.peek_stages is not PeekStages.STAGED:
            await then()
            return

        async def ready() -> None:
            await self._cpu(self.config.costs.peek_stage)
            await then()

        async def optimize() -> None:
            self._internal(ready)

        assert self._tg is not None
        self._tg.start_soon(optimize)

    async def _start_peek(self, job: _PeekJob) -> None:
        inc = self.incarnation
        if self.config.oracle_calls is OracleCalls.OFF_LOOP:
            # Off the loop: a task awaits read_ts (which a batching oracle
            # joins to the next backing call); an internal message brings the
            # timestamp back.
            async def timestamp() -> None:
                try:
                    ts = await self._read_ts(inc.oracle)
                except ExternalError as exc:
                    job.deliver(
                        Result.failed(SqlError(SqlState.SERIALIZATION_FAILURE, f"read_ts: {exc}"))
                    )
                    return
                self._internal(lambda: self._timestamp_ready(job, ts))

            assert self._tg is not None
            self._tg.start_soon(timestamp)
            return
        try:
            ts = await inc.oracle.read_ts()
        except OracleFenced as exc:
            job.deliver(Result.failed(self._fence(exc)))
            return
        await self._send_peek(job, ts)

    async def _timestamp_ready(self, job: _PeekJob, oracle_ts: int) -> None:
        """The timestamp stage's `peek_stage_ready` (read_ts came back)."""
        if self.config.peek_stages is PeekStages.STAGED:
            await self._cpu(self.config.costs.peek_stage)
        await self._send_peek(job, oracle_ts)

    async def _send_peek(self, job: _PeekJob, oracle_ts: int) -> None:
        inc = self.incarnation
        ts, job.hold = choose_timestamp(
            inc.storage, inc.compute, job.plan, oracle_ts, at_least=job.at_least,
            hold=not self.config.known_bad.peeks_skip_read_holds,
        )  # fmt: skip
        peek_id = next(self._peek_ids)
        job.read_ts, job.oracle_ts, job.catalog_ts = ts, oracle_ts, self._catalog_ts()
        self._peeks[peek_id] = job
        plan = job.plan
        self.incarnation.compute.send(
            Peek(peek_id, plan.collection_id, plan.cluster_id, ts, job.catalog_ts, plan.transform)
        )

    async def _handle_response(self, response: ComputeResponse | SubscribeResponse) -> None:
        costs = self.config.costs
        if isinstance(response, SubscribeResponse):
            await self._cpu(costs.controller_response + costs.peek_finish + costs.per_row * response.rows)
            response.deliver()
            return
        if not isinstance(response, PeekResponse):
            await self._cpu(costs.controller_response)
            return
        job = self._peeks.pop(response.peek_id, None)
        if job is not None and job.hold is not None:
            job.hold.release()
        if job is None:
            await self._cpu(costs.controller_response)
            return
        since = below_since(response)
        if since is not None and job.attempts < MAX_PEEK_ATTEMPTS:
            job.attempts += 1
            job.at_least = since
            await self._cpu(costs.controller_response)
            await self._send_peek(job, job.oracle_ts)
            return
        result = peek_result(job.plan, response, read_ts=job.read_ts, catalog_ts=job.catalog_ts)
        await self._cpu(
            costs.controller_response + costs.peek_finish + costs.per_row * len(result.rows)
        )
        if result.ok and job.read_ts is not None and job.read_ts > job.oracle_ts:
            self._linearize(job, result)
            return
        self._finish_peek(job, result)

    def _finish_peek(self, job: _PeekJob, result: Result) -> None:
        if job.confirm and result.ok and not self.config.known_bad.skip_confirm_leadership:
            self._confirm_buffer.append((job.deliver, result))
        else:
            job.deliver(result)

    def _linearize(self, job: _PeekJob, result: Result) -> None:
        """Holds an answer read above the oracle's read_ts back, off the loop,
        until the oracle reaches its timestamp; an internal message then
        finishes it."""
        inc = self.incarnation
        assert job.read_ts is not None
        chosen = job.read_ts

        async def wait() -> None:
            try:
                await linearize(inc.oracle, self._rt, chosen, job.oracle_ts)
            except OracleFenced as exc:
                job.deliver(Result.failed(self._fence(exc)))
                return
            except SqlError as exc:
                job.deliver(Result.failed(exc, read_ts=chosen, catalog_ts=job.catalog_ts))
                return

            async def finish() -> None:
                self._finish_peek(job, result)
                if not self._queues["response"]:
                    await self._flush_confirmed_peeks()

            self._internal(finish)

        assert self._tg is not None
        self._tg.start_soon(wait)

    async def _flush_confirmed_peeks(self) -> None:
        """One durable `confirm_leadership()` for every buffered peek result."""
        if not self._confirm_buffer:
            return
        buffered, self._confirm_buffer = self._confirm_buffer, []
        # Today's oracle confirms through its stash epoch; with the Postgres
        # oracle (seed 000's rollout kept the check) the catalog's epoch does.
        confirmer = self.incarnation.memory_oracle or self.incarnation.catalog
        self._counts["confirms"] += 1
        start = self._rt.now()
        try:
            await confirmer.confirm_leadership()
        except (OracleFenced, Fenced) as exc:
            self.incarnation.emit(
                "confirm-leadership", "oracle", start, ok=False, batch_size=len(buffered)
            )
            error = self._fence(exc)
            for deliver, _ in buffered:
                deliver(Result.failed(error))
            return
        except ExternalError as exc:
            self.incarnation.emit(
                "confirm-leadership", "oracle", start, ok=False, batch_size=len(buffered)
            )
            error = SqlError(SqlState.SERIALIZATION_FAILURE, f"confirm_leadership: {exc}")
            for deliver, _ in buffered:
                deliver(Result.failed(error))
            return
        self.incarnation.emit("confirm-leadership", "oracle", start, batch_size=len(buffered))
        for deliver, result in buffered:
            deliver(result)

    # --- subscriptions ----------------------------------------------------------------

    def _start_subscription(self, session: Session, statement: Subscribe, feed: Feed) -> None:
        self._post("external", _Request(session, statement, feed=feed))

    async def _subscribe(self, req: _Request, stmt: Subscribe) -> None:
        """The Subscribe path of the module docstring, from its plan on."""
        feed = req.feed
        assert feed is not None
        assert self._tg is not None
        table = subscribe_table(self._catalog_view(), stmt)
        await self._cpu(self.config.costs.peek_sequence)
        catalog_ts = self._catalog_ts()
        inc = self.incarnation
        confirm = self.config.confirm_leadership and not self.config.known_bad.skip_confirm_leadership

        def deliver(item: Item) -> None:
            if isinstance(item, Started) and confirm:
                # The answer read coordinator state (its oracle's read_ts):
                # only true if we still lead, as a peek's result.
                self._confirm_buffer.append((lambda r: feed.put(item if r.error is None else r.error), Result()))
            else:
                feed.put(item)

        def forward(item: Item) -> Awaitable[None]:
            self._post("response", SubscribeResponse(item, lambda: deliver(item)))
            return DONE

        async def follow(read_ts: int) -> None:
            async def linearized(ts: int) -> None:
                try:
                    await linearize(inc.oracle, self._rt, ts, read_ts)
                except OracleFenced as exc:
                    raise self._fence(exc) from exc

            await serve_subscription(
                feed, stmt, table, persist=inc.persist, read_ts=read_ts, catalog_ts=catalog_ts,
                linearize=linearized, sink=forward,
            )  # fmt: skip

        async def timestamp() -> None:
            try:
                read_ts = await self._read_ts(inc.oracle)
            except OracleFenced as exc:
                feed.put(self._fence(exc))
                return
            except ExternalError as exc:
                feed.put(SqlError(SqlState.SERIALIZATION_FAILURE, f"read_ts: {exc}"))
                return
            await follow(read_ts)

        if self.config.oracle_calls is OracleCalls.OFF_LOOP:
            self._tg.start_soon(timestamp)
            return
        try:
            read_ts = await inc.oracle.read_ts()
        except OracleFenced as exc:
            feed.put(self._fence(exc))
            return
        self._tg.start_soon(follow, read_ts)

    # --- writes ---------------------------------------------------------------------

    def _trigger_group_commit(self) -> None:
        """Posts the group-commit trigger: an internal message, so the loop runs
        it before the next client message. How many writes it finds pending
        is up to the loop (the batch size is an outcome, not a setting)."""
        if not self._trigger_posted:
            self._trigger_posted = True

            async def initiate() -> None:
                self._trigger_posted = False
                await self._maybe_group_commit()

            self._internal(initiate)

    async def _maybe_group_commit(self, *, periodic: bool = False) -> None:
        """Starts a group commit of every pending write unless `commits_in_flight`
        are in flight already, with the oracle's calls where the era put them
        (`OracleCalls`). On the loop: `peek_write_ts` and `write_ts` here; the
        append and `apply_write` in a task (storage takes appends one at a
        time, in the order the loop allocated their timestamps, so no
        `apply_write` overtakes an earlier append); then `read_ts` in the
        completion's handler. Off the loop: a task runs `peek_write_ts`,
        `write_ts`, the append and `apply_write`, and posts the completion."""
        # Known-bad `unbounded_group_commits`: no bound, as before seed 000's
        # rollout, but with the oracle's calls wherever the config runs them.
        limit = 0 if self.config.known_bad.unbounded_group_commits else self.config.commits_in_flight
        # Before PR #37363 the keepalive tick posted its group commit without a
        # permit (`Message::GroupCommitInitiate(span, None)` in the coord.rs
        # serve loop), so it ran beside a user commit in flight: with a slow
        # oracle, each tick adds its own on-loop oracle calls whatever the load.
        # After it, one committer task takes every commit in turn.
        if periodic and self.config.oracle_calls is OracleCalls.ON_LOOP:
            limit = 0
        if (limit and self._gc_in_flight >= limit) or (not self._pending_writes and not periodic):
            return
        batch, self._pending_writes = self._pending_writes, []
        self._gc_in_flight += 1
        inc = self.incarnation
        gc = GroupCommit(
            inc,
            [w for w, _ in batch],
            apply_write_before_append=self.config.known_bad.apply_write_before_append,
            stats=self._gc_stats,
            throttle=True,
        )
        assert self._tg is not None
        if self.config.oracle_calls is OracleCalls.ON_LOOP:
            if not await gc.timestamp():
                await self._group_commit_done(batch, gc)
                return

            async def append() -> None:
                try:
                    if await gc.append():
                        await gc.apply()
                finally:
                    self._internal(lambda: self._downgrade_on_loop(batch, gc))

            self._tg.start_soon(append)
            return

        async def commit() -> None:
            try:
                if await gc.timestamp() and await gc.append():
                    await gc.apply()
            finally:
                self._internal(lambda: self._group_commit_done(batch, gc))

        self._tg.start_soon(commit)

    async def _downgrade_on_loop(
        self, batch: list[tuple[PendingWrite, _Request | None]], gc: GroupCommit
    ) -> None:
        """Before PR #37363 the completion's handler asked the oracle for
        `read_ts`, on the loop, to downgrade read holds."""
        # On failure the holds stay put; the writes' outcomes are decided already.
        with contextlib.suppress(OracleFenced, ExternalError):
            await self.incarnation.oracle.read_ts()
        await self._group_commit_done(batch, gc)

    async def _group_commit_done(
        self, batch: list[tuple[PendingWrite, _Request | None]], gc: GroupCommit
    ) -> None:
        gc.finish()
        costs = self.config.costs
        rows = sum(len(w.updates) for w, _ in batch)
        await self._cpu(costs.group_commit + costs.per_row * rows)
        self._gc_in_flight -= 1
        for w, req in batch:
            if req is not None:  # else a read-then-write: its task replies
                req.reply(w.result(len(w.updates)))
        if any(w.error is not None and w.error.code is SqlState.ADMIN_SHUTDOWN for w, _ in batch):
            self._fence(RuntimeError("a table append was fenced"))
        # Writes that arrived while this commit was in flight: their triggers
        # found it busy, so trigger again (after-draining: once drained).
        if self.config.group_commit is GroupCommitPolicy.IMMEDIATE:
            if self._pending_writes:
                self._trigger_group_commit()
        else:
            self._drained()

    async def _periodic_group_commit(self) -> None:
        """Advances idle tables so reads at the oracle's read_ts never wait on them.

        The keepalive tick (Materialize's `advance_timelines_interval`, every
        `default_timestamp_interval`) is the loop's lowest-priority source: it
        waits until no other message does. A tick the loop could not take in
        time is not lost: tokio's `Interval` fires missed ticks back to back
        once polled (its default `MissedTickBehavior::Burst`), so each tick
        posts one message whatever the backlog."""
        while True:
            await self._rt.sleep(self.config.group_commit_interval_s)

            async def tick() -> None:
                await self._maybe_group_commit(periodic=True)

            self._post("tick", tick)

    async def _read_then_write(self, req: _Request, rtw: ReadThenWritePlan) -> None:
        """UPDATE/DELETE under the global write lock (off the loop; each step is a
        message to it)."""
        bad = self.config.known_bad.no_write_lock
        async with contextlib.nullcontext() if bad else self._write_lock:
            read_done = asyncio.Event()  # waited on before it is set, as `_Request.done`
            read: list[Result] = []

            def got(result: Result) -> None:
                read.append(result)
                read_done.set()

            async def start() -> None:
                await self._start_peek(_PeekJob(rtw.read, got, confirm=False))

            self._internal(start)
            await read_done.wait()
            if not read[0].ok:
                req.reply(read[0])
                return
            rows = read[0].rows
            diffs = rtw.diffs(rows)
            if not diffs:
                req.reply(
                    Result(rows_affected=0, read_ts=read[0].read_ts, catalog_ts=read[0].catalog_ts)
                )
                return
            pending = PendingWrite(rtw.table_id, diffs, read[0].catalog_ts or 0)

            async def submit() -> None:
                await self._cpu(
                    self.config.costs.write_sequence + self.config.costs.per_row * len(diffs)
                )
                self._pending_writes.append((pending, None))
                await self._maybe_group_commit()

            self._internal(submit)
            await pending.done.wait()
        req.reply(pending.result(len(rows), read_ts=read[0].read_ts))
