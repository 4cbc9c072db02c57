"""Peeks on the event loop (the Peek paths of `coordinator.event_loop`): the
optimizer stage, the timestamp (`read_ts` on the loop, or off it with an
internal message bringing it back), the `Peek` to compute and its response,
an answer read above `read_ts` held back until the oracle reaches it, and one
durable `confirm_leadership()` per batch of answers that read coordinator
state (the confirm buffer) before any of them is given out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, final

from controllers.commands import Peek, PeekResponse
from coordinator.config import OracleCalls, OracleKind, PeekStages
from coordinator.event_loop_queues import EventLoopQueues
from coordinator.peeks import (
    MAX_PEEK_ATTEMPTS,
    below_since,
    choose_timestamp,
    linearize,
    peek_result,
)
from coordinator.session import Result
from coordinator.statements import SqlError, SqlState
from coordinator.subscribe import SubscribeResponse
from sim.runtime.errors import ExternalError, Fenced

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from controllers.commands import ComputeResponse
    from controllers.frontier import ReadHold
    from coordinator.planner import PeekPlan

__all__ = ["EventLoopPeeks", "PeekJob"]


@final
@dataclass(eq=False)
class PeekJob:
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


class EventLoopPeeks(EventLoopQueues):
    """The loop's peeks (see the module docstring); their state is the
    loop's: `_peeks` in flight by id, `_confirm_buffer`, `_read_ts`."""

    def _fence(self, exc: BaseException) -> SqlError:
        """As `RunningCoordinator._fence`, and every peek still in flight is
        answered with the error: Materialize halts a fenced coordinator, which
        ends every connection, and a replica need never answer the peek of a
        coordinator nobody follows any more (a read has no effect, so failing
        it is exact). Without it a deposed loop could wait forever on one."""
        error = super()._fence(exc)
        peeks, self._peeks = self._peeks, {}
        for job in peeks.values():
            if job.hold is not None:
                job.hold.release()
            job.deliver(Result.failed(error))
        return error

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

    async def _start_peek(self, job: PeekJob) -> None:
        inc = self.incarnation
        if self.config.oracle_calls is OracleCalls.OFF_LOOP or self.config.oracle is not OracleKind.MEMORY:
            # Off the loop: a task awaits read_ts (which a batching oracle
            # joins to the next backing call); an internal message brings the
            # timestamp back. A remote oracle's read is always here: the peek
            # path had its own LinearizeTimestamp stage before PR #37355 gave
            # SUBSCRIBE one ("The peek path does not have this problem").
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
        except Fenced as exc:
            job.deliver(Result.failed(self._fence(exc)))
            return
        await self._send_peek(job, ts)

    async def _timestamp_ready(self, job: PeekJob, oracle_ts: int) -> None:
        """The timestamp stage's `peek_stage_ready` (read_ts came back)."""
        if self.config.peek_stages is PeekStages.STAGED:
            await self._cpu(self.config.costs.peek_stage)
        await self._send_peek(job, oracle_ts)

    async def _send_peek(self, job: PeekJob, oracle_ts: int) -> None:
        if self._fenced is not None:  # fenced while the peek was staged: halted (see `_fence`)
            job.deliver(Result.failed(self._fenced))
            return
        inc = self.incarnation
        ts, job.hold = choose_timestamp(
            inc.storage, inc.compute, job.plan, oracle_ts, at_least=job.at_least,
            hold=not self.config.known_bad.peeks_skip_read_holds,
        )
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

    def _finish_peek(self, job: PeekJob, result: Result) -> None:
        if job.confirm and result.ok and not self.config.known_bad.skip_confirm_leadership:
            self._confirm_buffer.append((job.deliver, result))
        else:
            job.deliver(result)

    def _linearize(self, job: PeekJob, result: Result) -> None:
        """Holds an answer read above the oracle's read_ts back, off the loop,
        until the oracle reaches its timestamp; an internal message then
        finishes it."""
        inc = self.incarnation
        assert job.read_ts is not None
        chosen = job.read_ts

        async def wait() -> None:
            try:
                await linearize(inc.oracle, self._rt, chosen, job.oracle_ts)
            except Fenced as exc:
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
        # Today's oracle confirms through its timestamp store's epoch; with the Postgres
        # oracle (seed 000's rollout kept the check) the catalog's epoch does.
        confirmer = self.incarnation.memory_oracle or self.incarnation.catalog
        self._counts["confirms"] += 1
        start = self._rt.now()
        try:
            await confirmer.confirm_leadership()
        except Fenced as exc:
            self.incarnation.emit(
                "confirm-leadership", "oracle", start, ok=False, batch_size=len(buffered)
            )
            self._peek_batch_event(len(buffered), ok=False)
            error = self._fence(exc)
            for deliver, _ in buffered:
                deliver(Result.failed(error))
            return
        except ExternalError as exc:
            self.incarnation.emit(
                "confirm-leadership", "oracle", start, ok=False, batch_size=len(buffered)
            )
            self._peek_batch_event(len(buffered), ok=False)
            error = SqlError(SqlState.SERIALIZATION_FAILURE, f"confirm_leadership: {exc}")
            for deliver, _ in buffered:
                deliver(Result.failed(error))
            return
        self.incarnation.emit("confirm-leadership", "oracle", start, batch_size=len(buffered))
        self._peek_batch_event(len(buffered), ok=True)
        for deliver, result in buffered:
            deliver(result)

    def _peek_batch_event(self, size: int, *, ok: bool) -> None:
        """The log's `peek.batch` event: how many answers one
        `confirm_leadership()` released (nothing is built when logging is off)."""
        if self._rt.events.on:
            self._rt.events.emit("peek.batch", batch_size=size, confirm="confirm_leadership", ok=ok)
