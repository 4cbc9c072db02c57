"""A seeded stream of group-commit appends and peeks on a two-replica cluster,
with replica crashes and restarts, every answer checked against the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from controllers.commands import (
    CreateCluster,
    CreateDataflow,
    CreateReplica,
    CreateTable,
    PeekRows,
    table_shard_id,
)
from controllers.storage import AppendOk
from controllers.transform import Comparison, Row, Transform
from tests.controllers.harness import Harness

if TYPE_CHECKING:
    from persist.client import PersistClient
    from sim.runtime.core import Runtime

COLS = ("k", "v")
FILTER = Transform((Comparison("v", "=", "a"),))


async def crash_scenario(
    persist: PersistClient,
    rt: Runtime,
    *,
    steps: int,
    crash_both: bool = False,
    window: int = 30,
    base_id: int = 10,
    pause: float = 0.004,
) -> list[tuple[int, int, tuple[Row, ...], float]]:
    """Runs the scenario; returns the transcript `(peek id, as_of, rows, time)` in
    answer order. Raises AssertionError on any inexact answer.

    `base_id`: the table's id (its shard is derived from it; views follow it),
    so runs sharing a Consensus stay apart. `pause`: up to this long between steps.
    """
    T, IDX, MV, CNT = base_id, base_id + 1, base_id + 2, base_id + 3
    views: dict[int, tuple[Transform, ...]] = {
        T: (Transform(),), IDX: (Transform(),), MV: (FILTER,), CNT: (Transform(count=True),),
    }
    rng = rt.derive("scenario").rng
    transcript: list[tuple[int, int, tuple[Row, ...], float]] = []
    async with Harness(persist, rt, window=window) as h:
        await h.apply(CreateCluster(1), CreateReplica(1, 1), CreateReplica(1, 2), CreateTable(T, table_shard_id(T), COLS))
        await h.apply(
            CreateDataflow(IDX, 1, "index", T),
            CreateDataflow(MV, 1, "materialized-view", T, FILTER),
            CreateDataflow(CNT, 1, "materialized-view", T, Transform(count=True)),
        )

        async def check(peek_id: int, target: int, as_of: int) -> None:
            response = await h.result(peek_id)
            assert isinstance(response.result, PeekRows), (peek_id, target, as_of, response)
            expected = h.model.expected(T, as_of, COLS, *views[target])
            assert response.result.rows == expected, (peek_id, target, as_of)
            transcript.append((peek_id, as_of, response.result.rows, rt.now()))

        live: list[Row] = []
        next_key = 0
        ts = 0
        down: dict[int, int] = {}  # replica -> step it restarts at
        async with anyio.create_task_group() as tg:
            for step in range(steps):
                ts += rng.randint(1, 3)
                ups: list[tuple[Row, int]] = []
                for _ in range(rng.randint(0, 4)):
                    if live and rng.random() < 0.3:
                        ups.append((live.pop(rng.randrange(len(live))), -1))
                    else:
                        row = (next_key, rng.choice("ab"))
                        next_key += 1
                        live.append(row)
                        ups.append((row, 1))
                assert await h.append(ts, {T: ups}) == AppendOk(ts)
                for _ in range(rng.randint(0, 3)):
                    target = rng.choice(sorted(views))
                    as_of = rng.randint(max(0, ts - 10), ts + 3)  # some are in the future
                    tg.start_soon(check, h.peek(target, as_of), target, as_of)
                for r, at in sorted(down.items()):
                    if at <= step:
                        del down[r]
                        h.compute.restart_replica(1, r)
                if rng.random() < 0.15:
                    r = rng.choice([1, 2])
                    if r not in down and (crash_both or not down):
                        h.compute.crash_replica(1, r)
                        down[r] = step + rng.randint(1, 6)
                await rt.sleep(rng.uniform(0, pause))
            for r in sorted(down):
                h.compute.restart_replica(1, r)
            for extra in range(1, 5):  # complete the peeks at future times
                assert await h.append(ts + extra, {}) == AppendOk(ts + extra)
        assert h.compute.pending_peeks() == ()
        # The arrangements did compact (so exactness was tested across compaction).
        assert max(h.compute.replica(1, r).since(IDX) or 0 for r in (1, 2)) > 0
        restarts = h.compute.statistics().replicas_restarted
        incarnations = [h.compute.replica(1, r).statistics().incarnations for r in (1, 2)]
        # A replica restarted and crashed again at once never starts that incarnation.
        assert 0 < sum(incarnations) - 2 <= restarts, (restarts, incarnations)
    return transcript
