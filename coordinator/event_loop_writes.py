"""Writes on the event loop (the Insert and Update/Delete paths of
`coordinator.event_loop`): the group-commit trigger, an internal message
posted at once or once no client message is queued; the commit, bounded by
`commits_in_flight`, with the oracle's calls where the era put them
(`OracleCalls`); its completion, which replies to the writers; the keepalive
tick that advances idle tables; and UPDATE/DELETE under the global write lock.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from coordinator.config import GroupCommitPolicy, OracleCalls
from coordinator.event_loop_peeks import PeekJob
from coordinator.event_loop_queues import EventLoopQueues
from coordinator.group_commit import GroupCommit, PendingWrite
from coordinator.session import Result
from coordinator.statements import SqlState
from sim.runtime.errors import ExternalError, Fenced

if TYPE_CHECKING:
    from coordinator.event_loop_queues import Request
    from coordinator.planner import ReadThenWritePlan

__all__ = ["EventLoopWrites"]


class EventLoopWrites(EventLoopQueues):
    """The loop's writes (see the module docstring); their state is the
    loop's: `_pending_writes`, `_gc_in_flight`, `_trigger_posted`, `_write_lock`."""

    def _drained(self) -> None:
        """After-draining policy: once no client message is queued, trigger the
        group commit of whatever writes are pending."""
        if (
            self.config.group_commit is GroupCommitPolicy.AFTER_DRAINING
            and not self._queues["external"]
            and self._pending_writes
        ):
            self._trigger_group_commit("drain")

    def _trigger_group_commit(self, trigger: str = "write") -> None:
        """Posts the group-commit trigger: an internal message, so the loop runs
        it before the next client message. How many writes it finds pending
        is up to the loop (the batch size is an outcome, not a setting).
        `trigger` names what posted it, for the commit's event (the first
        poster's, when several find it posted)."""
        if not self._trigger_posted:
            self._trigger_posted = True

            async def initiate() -> None:
                self._trigger_posted = False
                await self._maybe_group_commit(trigger=trigger)

            self._internal(initiate)

    async def _maybe_group_commit(self, *, periodic: bool = False, trigger: str = "write") -> None:
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
            trigger="tick" if periodic else trigger,
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
        self, batch: list[tuple[PendingWrite, Request | None]], gc: GroupCommit
    ) -> None:
        """Before PR #37363 the completion's handler asked the oracle for
        `read_ts`, on the loop, to downgrade read holds."""
        # On failure the holds stay put; the writes' outcomes are decided already.
        with contextlib.suppress(Fenced, ExternalError):
            await self.incarnation.oracle.read_ts()
        await self._group_commit_done(batch, gc)

    async def _group_commit_done(
        self, batch: list[tuple[PendingWrite, Request | None]], gc: GroupCommit
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
                await self._maybe_group_commit(periodic=True, trigger="tick")

            self._post("tick", tick)

    async def _read_then_write(self, req: Request, rtw: ReadThenWritePlan) -> None:
        """UPDATE/DELETE under the global write lock (off the loop; each step is a
        message to it)."""
        bad = self.config.known_bad.no_write_lock
        async with contextlib.nullcontext() if bad else self._write_lock:
            read_done = asyncio.Event()  # waited on before it is set, as `Request.done`
            read: list[Result] = []

            def got(result: Result) -> None:
                read.append(result)
                read_done.set()

            async def start() -> None:
                await self._start_peek(PeekJob(rtw.read, got, confirm=False))

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
