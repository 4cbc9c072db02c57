"""A controller's command task in the decoupled design: the controller learns
the catalog from a subscription to it, as derived commands in commit order
(`controllers.derive`), each change arriving `controller.catalog_feed` after
it was committed, and its catalog frontier advancing with the subscription.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import anyio

from controllers.commands import AdvanceCatalogFrontier
from controllers.derive import derive, derive_event

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from controllers.commands import DeterministicCommand
    from coordinator.environment import Incarnation
    from sim.runtime.core import Runtime

__all__ = ["follow_catalog"]


async def follow_catalog(
    inc: Incarnation,
    rt: Runtime,
    apply: Callable[[DeterministicCommand], Awaitable[None]],
    ready: anyio.Event,
) -> None:
    """A controller's command task: subscribes to the catalog and forwards the
    derived commands in order, advancing the controller's catalog frontier as
    the subscription does; sets `ready` once caught up with the cache.

    How long a catalog change takes to reach the controller (persist's pubsub
    push, or a listen polling the catalog shard: `controller.catalog_feed`)
    is a latency, not a service time: each change is delivered that long
    after it was committed, in commit order, however many are on their way.
    (Sleeping it once per change in turn made it a queue that a stream of
    DDL saturates: at 2 ms per change, 500 changes/s at most.)"""
    as_of = inc.catalog.cached_upper - 1
    async with await inc.catalog.subscribe_at(as_of) as sub:
        for cmd in derive(sub.snapshot.as_updates(as_of)):
            await apply(cmd)
        await apply(AdvanceCatalogFrontier(as_of + 1))
        ready.set()
        send, receive = anyio.create_memory_object_stream[tuple[float, Any]](math.inf)

        async def arrivals() -> None:
            async with send:
                async for event in sub:
                    send.send_nowait((rt.now() + rt.sample("controller.catalog_feed"), event))

        # The receiving end closes only after the task group has ended (and
        # with it `arrivals`), never under a send in flight.
        async with receive, anyio.create_task_group() as tg:
            tg.start_soon(arrivals)
            last_due = 0.0
            async for due, event in receive:
                last_due = due = max(due, last_due)  # in order: never overtakes an earlier change
                wait = due - rt.now()
                if wait > 0:
                    await rt.sleep(wait)
                for cmd in derive_event(event):
                    await apply(cmd)
