"""SUBSCRIBE on the event loop (the Subscribe path of `coordinator.event_loop`):
a client message planned on the loop, its `read_ts` taken as a peek's, then a
task that runs `serve_subscription` and posts each item back as a controller
response; the first answer (`as_of`) waits for the batch's
`confirm_leadership()`, as a peek's result does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.config import OracleCalls
from coordinator.event_loop_queues import EventLoopQueues, Request
from coordinator.peeks import linearize
from coordinator.session import Result
from coordinator.statements import SqlError, SqlState
from coordinator.subscribe import Started, SubscribeResponse, serve_subscription, subscribe_table
from sim.runtime.errors import ExternalError, Fenced
from sim.runtime.tasks import DONE

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from coordinator.session import Session
    from coordinator.statements import Subscribe
    from coordinator.subscribe import Feed, Item

__all__ = ["EventLoopSubscriptions"]


class EventLoopSubscriptions(EventLoopQueues):
    """The loop's subscriptions (see the module docstring)."""

    def _start_subscription(self, session: Session, statement: Subscribe, feed: Feed) -> None:
        self._post("external", Request(session, statement, feed=feed))

    async def _subscribe(self, req: Request, stmt: Subscribe) -> None:
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
                except Fenced as exc:
                    raise self._fence(exc) from exc

            await serve_subscription(
                feed, stmt, table, persist=inc.persist, read_ts=read_ts, catalog_ts=catalog_ts,
                linearize=linearized, sink=forward,
            )

        async def timestamp() -> None:
            try:
                read_ts = await self._read_ts(inc.oracle)
            except Fenced as exc:
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
        except Fenced as exc:
            feed.put(self._fence(exc))
            return
        self._tg.start_soon(follow, read_ts)
