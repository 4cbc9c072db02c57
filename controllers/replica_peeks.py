"""How a replica answers a peek: `evaluate` turns a collection's contents into
the answer (for both paths), and `ArrangedPeek` runs a peek of an
arrangement; the persist fast path (a table's shard) is `Replica`'s own.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Final, final

from controllers.commands import UNKNOWN_COLLECTION, PeekError, PeekResponse, PeekRows
from controllers.replica_costs import replica_cost
from controllers.transform import encode_row

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Iterable

    from controllers.replica import Dataflow, Replica
    from controllers.replica_commands import ReplicaPeek
    from controllers.transform import CompiledTransform, Row
    from sim.runtime.cpu import Hold

__all__ = ["BELOW_SINCE", "INTERNAL", "ArrangedPeek", "evaluate"]

#: SQLSTATE-like code of a peek whose `as_of` was compacted away (`XX000`, as
#: Materialize's "timestamp is not valid for all inputs" is internal).
BELOW_SINCE: Final = "XX000"
#: Invalid data (a negative multiplicity) or another replica-side failure.
INTERNAL: Final = "XX000"


def evaluate(t: CompiledTransform, contents: Iterable[tuple[bytes, Row, int]]) -> PeekRows | PeekError:
    """A peek's answer: the transform over `(key, row, multiplicity)` contents,
    `key` being `row`'s canonical encoding (what rows are sorted by)."""
    rows: list[tuple[bytes, Row]] = []
    total = 0
    for key, row, n in contents:
        if n < 0:
            return PeekError(INTERNAL, f"invalid data: row {row!r} has multiplicity {n}")
        if not t.keep(row):
            continue
        if t.count:
            total += n
        else:
            out = t.project(row)
            rows.extend([(key if t.identity else encode_row(out), out)] * n)
    if t.count:
        return PeekRows(((total,),))
    rows.sort(key=lambda r: r[0])
    return PeekRows(tuple(r for _, r in rows))



@final
class ArrangedPeek:
    """A peek of an arrangement, run by loop callbacks instead of a task:
    wait until the arrangement passes `as_of`, read it, hold a worker for the
    read's modeled CPU, evaluate, then the response hop. The task version
    (a task, its cancel scope and three coroutine frames per peek) was a
    sixth of a simulated point read's time; this made the read about 6 %
    faster with the same trace (issue 20). `cancel()` stops it at any step.

    It is a part of its `Replica` in a module of its own: it reads and
    updates the replica's state (its dataflows, peeks, counters, workers and
    caches) as the replica's own methods do."""

    __slots__ = ("_cancelled", "_cmd", "_contents", "_df", "_holding", "_life", "_pending", "_replica")

    def __init__(self, replica: Replica, cmd: ReplicaPeek, df: Dataflow | None) -> None:
        self._replica = replica
        self._cmd = cmd
        self._df = df
        self._life = replica._life
        self._contents: tuple[tuple[bytes, int], ...] = ()
        #: What the peek waits on: a registered change callback, a worker, or
        #: the response hop's timer.
        self._pending: Hold | asyncio.Handle | _Waiting | None = None
        self._cancelled = False
        self._holding = df is not None
        if df is not None:
            df.holds.append(cmd.as_of)  # before waiting: compaction must not pass it

    def start(self) -> None:
        self._check()

    def _check(self) -> None:
        """`as_of` readable yet? (again after each change of the dataflow)"""
        if self._cancelled:  # `notify` had already scheduled this call
            return
        self._pending = None
        cmd, df, replica = self._cmd, self._df, self._replica
        if df is None or replica._dataflows.get(cmd.target_id) is not df:
            self._computed(PeekError(UNKNOWN_COLLECTION, f"collection {cmd.target_id} was dropped"))
            return
        arr = df.arrangement
        if arr is not None and cmd.as_of < arr.since:
            self._computed(
                PeekError(
                    BELOW_SINCE,
                    f"as_of {cmd.as_of} of collection {cmd.target_id} is below its since {arr.since}",
                    since=arr.since,
                )
            )
            return
        if arr is None or arr.upper <= cmd.as_of:
            df.on_change.append(self._check)
            self._pending = _Waiting(df, self._check)
            return
        self._contents = contents = arr.read(cmd.as_of)
        rt = replica._rt
        cost = replica_cost(rt, "replica.peek") + len(contents) * replica_cost(rt, "replica.peek_row")
        self._pending = rt.cpu_then(cost, replica._pool, self._read)

    def _read(self) -> None:
        self._pending = None
        replica, df = self._replica, self._df
        assert df is not None
        compiled = replica._compile(self._cmd.transform, df.output_columns)
        contents, memo = self._contents, df.evaluated
        if memo is not None and memo[0] is contents and memo[1] is compiled:
            self._computed(memo[2])
            return
        decoded = replica._decoded
        result = evaluate(compiled, ((k, decoded(k), n) for k, n in contents))
        df.evaluated = (contents, compiled, result)
        self._computed(result)

    def _computed(self, result: PeekRows | PeekError) -> None:
        self._release_hold()
        replica = self._replica
        self._pending = replica._rt.call_after(
            replica_cost(replica._rt, "replica.response"), self._respond, result
        )

    def _respond(self, result: PeekRows | PeekError) -> None:
        self._pending = None
        replica, cmd = self._replica, self._cmd
        if self._life.crashed:  # a dead process sends nothing
            return
        replica._stats["peeks"] += 1
        if replica._peeks.get(cmd.peek_id) is self:
            del replica._peeks[cmd.peek_id]
        replica._on_peek(replica, PeekResponse(cmd.peek_id, result))

    def _release_hold(self) -> None:
        if self._holding:
            self._holding = False
            assert self._df is not None
            self._df.holds.remove(self._cmd.as_of)

    def cancel(self) -> None:
        self._cancelled = True
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.cancel()
        self._release_hold()


@final
class _Waiting:
    """A peek's callback registered for its dataflow's next change."""

    __slots__ = ("_callback", "_df")

    def __init__(self, df: Dataflow, callback: Callable[[], None]) -> None:
        self._df = df
        self._callback = callback

    def cancel(self) -> None:
        with contextlib.suppress(ValueError):  # `notify` took it already
            self._df.on_change.remove(self._callback)
