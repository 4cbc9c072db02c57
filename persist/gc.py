"""Garbage collection: epoch-based reclamation of blobs and Consensus entries.

A batch replaced by compaction becomes garbage "as of" the seqno that replaced
it. Its blob is deleted once every reader's seqno hold has reached that seqno:
no reader can still be reading an older state that points at it. (Seed 002 also
waits for a rollup newer than that seqno, for readers that rebuild historical
states from old rollups; here nobody does: a state is only ever served at or
after the head it was fetched from, and rebuilding from an old rollup replays
to the head without reading any batch on the way.) Rollups older than
the newest are deleted, and Consensus is truncated below the newest rollup, so
a shard's metadata stays within about two rollup intervals of diffs (seed 002).

Deleting is physical first, logical second: blobs go, then a `gc` command
drops them from the state. A crash in between leaves entries whose blobs are
gone, which the next run deletes again (deletes are idempotent).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

from persist.location import SeqNo
from persist.machine import Machine, finish_gc, rollup_key
from sim.runtime.errors import InvalidUsage
from sim.runtime.retry import retry_external

if TYPE_CHECKING:
    from persist.state import ShardState

__all__ = ["GcPlan", "GcResult", "collect", "plan_gc"]


@final
@dataclass(frozen=True)
class GcPlan:
    """What a state allows to be reclaimed right now."""

    batches: tuple[str, ...]
    rollups: tuple[int, ...]
    truncate_below: int | None

    def has_work(self, truncated_below: int) -> bool:
        """True iff there is something to delete, given that Consensus was
        already truncated below `truncated_below` by this process."""
        return bool(self.batches or self.rollups) or (
            self.truncate_below is not None and self.truncate_below > truncated_below
        )


@final
@dataclass(frozen=True)
class GcResult:
    deleted_blobs: int
    truncated_entries: int
    truncated_below: int


def plan_gc(state: ShardState) -> GcPlan:
    """Pure: the batch blobs, rollups and Consensus prefix `state` lets go of."""
    newest = state.latest_rollup
    hold = min((r.seqno_hold for r in state.readers.values()), default=state.seqno)
    # Garbage "as of" seqno X is referenced by no state at or after X, and a hold
    # H promises reads of states at or after H only: X <= H is free.
    batches = tuple(g.key for g in state.garbage if g.seqno <= hold)
    rollups = tuple(r for r in state.rollups if newest is not None and r < newest)
    return GcPlan(batches, rollups, newest)


async def collect(machine: Machine) -> GcResult:
    """Deletes what no reader can reach any more and records it in the state."""
    state = await machine.fetch()
    assert state is not None
    plan = plan_gc(state)
    rt, blob, policy = machine.rt, machine.blob, machine.cfg.retry
    for key in [*plan.batches, *(rollup_key(machine.shard_id, r) for r in plan.rollups)]:
        await retry_external(rt, functools.partial(blob.delete, key), idempotent=True, policy=policy)
    if plan.batches or plan.rollups:
        deleted = frozenset(plan.batches)
        dropped = frozenset(plan.rollups)
        await machine.apply("gc", lambda s: finish_gc(s, deleted=deleted, dropped_rollups=dropped))
    below = plan.truncate_below
    if below is None:  # no rollup yet: every diff is still needed to rebuild
        return GcResult(len(plan.batches), 0, 0)
    try:
        truncated = await retry_external(
            rt,
            functools.partial(machine.consensus.truncate, machine.shard_id, SeqNo(below)),
            idempotent=True,
            policy=policy,
        )
    except InvalidUsage:
        truncated = 0  # nothing at or above the rollup yet: impossible once it is in the state
    return GcResult(len(plan.batches) + len(plan.rollups), truncated, below)
