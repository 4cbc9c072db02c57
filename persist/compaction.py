"""Size-tiered compaction in the spirit of differential's Spine (seed 002).

A batch's level is the bit length of its update count. Reading the batches
from the newest back, the first adjacent pair whose older batch is no bigger
in level than the newer one is merged (with the older neighbours it would
cascade into). Merges keep levels strictly decreasing
from old to new, so a shard of n updates has O(log n) batches and every update
is rewritten O(log n) times. Merging also compacts logically: times are
forwarded to the shard's since and diffs consolidated, so cancelling updates
disappear once they share a batch.

The result goes through the state machine like any other command, and is
discarded (its blob deleted) if its inputs were replaced meanwhile.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from persist.codec import DecodedBatches, Update, consolidate, decode_batch, encode_batch
from persist.machine import Machine, apply_compaction
from persist.state import HollowBatch
from sim.runtime.retry import retry_external

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MAX_FAN_IN", "compact_once", "level", "plan_merge"]


def level(batch: HollowBatch) -> int:
    return batch.len.bit_length()


MAX_FAN_IN = 8


def plan_merge(batches: Sequence[HollowBatch]) -> tuple[int, int] | None:
    """The half-open index range of adjacent batches to merge next, or None.

    Finds the newest adjacent pair whose older batch is no bigger in level than
    the newer one, then keeps taking older neighbours while they are no bigger
    than what has been gathered so far (up to `MAX_FAN_IN`): one merge then does
    the work of a cascade of pairwise ones, for one CaS instead of several.
    """
    for i in range(len(batches) - 2, -1, -1):
        if level(batches[i]) <= level(batches[i + 1]):
            start, total = i, batches[i].len + batches[i + 1].len
            while (
                start > 0
                and i + 2 - start < MAX_FAN_IN
                and level(batches[start - 1]) <= total.bit_length()
            ):
                start -= 1
                total += batches[start].len
            return start, i + 2
    return None


async def compact_once(machine: Machine, compactor_id: str, decoded: DecodedBatches | None = None) -> bool | None:
    """Plans and performs one merge on the shard. Returns None if there was
    nothing to merge, else whether the result was applied.

    Args:
        decoded: the client's cache of decoded batches, if it has one: the
            inputs are still fetched (their absence matters), not re-decoded.
    """
    state = machine.state
    planned = plan_merge(state.batches)
    if planned is None:
        return None
    inputs = state.batches[planned[0] : planned[1]]
    rt, blob = machine.rt, machine.blob
    since = state.since.ts if state.since.ts is not None else max(b.since for b in inputs)
    since = max([since, *(b.since for b in inputs)])
    updates: list[Update] = []
    for b in inputs:
        if b.key is None:
            continue
        key = b.key
        data = await retry_external(rt, functools.partial(blob.get, key), idempotent=True)
        if data is None:
            return False  # another compactor replaced it and GC already ran
        updates.extend(decode_batch(data) if decoded is None else decoded.decode(key, data))
    merged = consolidate(updates, since=since)
    out_key: str | None = None
    size = 0
    if merged:
        out_key = f"{machine.shard_id}/b/{compactor_id}/{rt.unique_hex()}"
        data = encode_batch(merged)
        size = len(data)
        await retry_external(rt, functools.partial(blob.set, out_key, data), idempotent=True)
        if decoded is not None:
            decoded.wrote(out_key, tuple(merged))
    output = HollowBatch(out_key, inputs[0].lower, inputs[-1].upper, since, len(merged), size)
    idents = tuple((b.key, b.lower) for b in inputs)
    _, refusal = await machine.apply(
        "compaction", lambda s: apply_compaction(s, inputs=idents, output=output)
    )
    if refusal is not None:
        if out_key is not None:
            await retry_external(rt, functools.partial(blob.delete, out_key), idempotent=True)
        return False
    return True
