"""Group commit (seed 000, DESIGN.md §6 "Insert"): every pending write at one
timestamp, in one append to every table, then one `apply_write`.

    1. `write_ts()` from the realtime oracle.
    2. The storage controller appends each table's rows at `ts` and advances
       *every* table's upper to `ts + 1` (empty appends for idle tables).
    3. `apply_write(ts)`: reads at the oracle's read timestamp now see the writes.
    4. Each writer learns its outcome.

Both architectures call `group_commit`; they differ in who triggers it and on
which task it runs. Outcomes are classified as DESIGN.md §9 says: a write that
certainly did not happen fails (`40001` retry, `42P01` unknown table, `57P01`
fenced); one that may have happened is `08007` (indeterminate), which a history
records as `info` — it is never reported as a plain failure.

The known-bad variant `apply_write_before_append` swaps steps 2 and 3: reads may
then be given a timestamp whose data is not yet durable (and, if the append
fails, never will be).

**Several adapters** (`retry_lost_races`, issue 36): each adapter's group
commit allocates its `write_ts` from the one shared oracle and appends to the
same shards, so two commits race: A takes ts 10, B ts 11, and if B's append
lands first every table's upper is 12 and A's compare-and-append at 10 finds
an upper beyond its ts. That is a lost race, not a fence: A's writes on those
tables were certainly not written, so after a linearized check that its
deployment still holds the catalog epoch (`confirm_leadership`; a newer
incarnation's conflict *is* a fence) A commits exactly those writes again at
a fresh `write_ts`. Writes on tables A's append did reach are acknowledged at
10 after `apply_write(10)`: never twice, never lost.

With the Runtime's event log on (`sim.runtime.events`), each commit is a
`group_commit` event: its batch size, what triggered it (`TRIGGERS`), its
timestamp, outcome and latency; a commit that finds itself fenced is also a
`fenced` event naming the step.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, final

from controllers.commands import Append
from controllers.storage import AppendConflict
from coordinator.session import Result
from coordinator.statements import SqlError, SqlState
from sim.runtime.errors import ExternalError, Fenced

if TYPE_CHECKING:
    from collections.abc import Sequence

    from controllers.storage import AppendResult
    from controllers.transform import Row
    from coordinator.environment import Incarnation

__all__ = ["MAX_RACE_ATTEMPTS", "TRIGGERS", "GroupCommit", "GroupCommitStats", "PendingWrite", "group_commit"]

#: Group commits of one batch before writes that keep losing the append race
#: to other adapters give up with 40001 (certainly not written).
MAX_RACE_ATTEMPTS = 16

#: What starts a group commit, as its event says: the keepalive tick
#: (`group_commit_interval_s`, advancing idle tables), a client write
#: (`immediate`), the loop found drained of client messages (`after-draining`),
#: or a retry of writes that lost the append race to another adapter. A caller
#: that does not say: `tick` for an empty batch, else `write`.
TRIGGERS = ("tick", "write", "drain", "race-retry")


@final
@dataclass(eq=False)
class PendingWrite:
    """One client write (or a read-then-write's diffs) waiting for a group commit."""

    table_id: int
    updates: tuple[tuple[Row, int], ...]
    catalog_ts: int
    write_ts: int | None = None
    error: SqlError | None = None
    # asyncio's event, not anyio's: one per write, and its waiter always
    # waits before it is set (see `oracle.batching._Batch`; issue 20).
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def resolve(self, write_ts: int | None, error: SqlError | None) -> None:
        self.write_ts, self.error = write_ts, error
        self.done.set()

    def result(self, rows_affected: int, *, read_ts: int | None = None) -> Result:
        """The client's answer once resolved: its error, or `rows_affected` (the
        write's rows, or the rows a read-then-write matched at `read_ts`)."""
        if self.error is not None:
            return Result.failed(
                self.error, read_ts=read_ts, write_ts=self.write_ts, catalog_ts=self.catalog_ts
            )
        return Result(
            rows_affected=rows_affected,
            read_ts=read_ts,
            write_ts=self.write_ts,
            catalog_ts=self.catalog_ts,
        )


@final
@dataclass
class GroupCommitStats:
    commits: int = 0
    writes: int = 0
    empty_commits: int = 0
    #: Of `commits`: retries of writes that lost an append race to another adapter.
    lost_races: int = 0


async def group_commit(
    inc: Incarnation,
    writes: Sequence[PendingWrite],
    *,
    apply_write_before_append: bool = False,
    stats: GroupCommitStats | None = None,
    retry_lost_races: bool = False,
    ack_lost_races: bool = False,
    trigger: str | None = None,
) -> int | None:
    """Commits `writes` (possibly none: advances idle tables) at one timestamp and
    resolves each; returns the timestamp, or None if none was allocated. All
    three steps on the caller's task (see `GroupCommit` to split them).

    Args:
        retry_lost_races: one adapter of several (see the module docstring):
            writes whose tables another adapter advanced past `ts` first are
            committed again at a fresh timestamp (the last one is returned).
        ack_lost_races: known-bad (`KnownBad.ack_lost_race`): those writes
            are acknowledged at `ts` instead, though never written.
        trigger: what started it, for its event (`TRIGGERS`).
    """
    gc = GroupCommit(
        inc, writes, apply_write_before_append=apply_write_before_append, stats=stats,
        retry_lost_races=retry_lost_races, trigger=trigger,
    )
    await _run(gc)
    if ack_lost_races:  # known-bad: lost writes, acknowledged as committed at ts
        assert gc.ts is not None
        for w in gc.lost:
            w.resolve(gc.ts, None)
        return gc.ts
    for _ in range(MAX_RACE_ATTEMPTS - 1):
        if not gc.lost:
            break
        lost = gc.lost
        try:
            # A conflict from a newer incarnation is a fence, not a race.
            await inc.catalog.confirm_leadership()
        except Fenced as exc:
            _report_fenced(inc, "leadership check", exc)
            _resolve_all(lost, gc.ts, _fenced(exc))
            return gc.ts
        except ExternalError as exc:
            _resolve_all(lost, gc.ts, SqlError(SqlState.SERIALIZATION_FAILURE, f"leadership check: {exc}"))
            return gc.ts
        if stats is not None:
            stats.commits += 1
            stats.lost_races += 1
        gc = GroupCommit(
            inc, lost, apply_write_before_append=apply_write_before_append, retry_lost_races=True,
            trigger="race-retry",
        )
        await _run(gc)
    if gc.lost:
        _resolve_all(gc.lost, gc.ts, SqlError(
            SqlState.SERIALIZATION_FAILURE, f"lost the table append race {MAX_RACE_ATTEMPTS} times"
        ))
    return gc.ts


async def _run(gc: GroupCommit) -> None:
    try:
        if await gc.timestamp() and await gc.append():
            await gc.apply()
    finally:
        gc.finish()


@final
class GroupCommit:
    """One group commit as three steps — `timestamp` (write_ts, after a
    `peek_write_ts` when `throttle`), `append`,
    `apply` (apply_write, then every write resolved) — so an event loop can
    run the oracle calls on itself and the append off it (`oracle_calls =
    on-loop`), and `finish` reports it. A step that fails resolves every write
    and returns False (or the next step finds nothing to do)."""

    def __init__(
        self,
        inc: Incarnation,
        writes: Sequence[PendingWrite],
        *,
        apply_write_before_append: bool = False,
        stats: GroupCommitStats | None = None,
        throttle: bool = False,
        retry_lost_races: bool = False,
        trigger: str | None = None,
    ) -> None:
        self.inc = inc
        self.trigger = trigger if trigger is not None else "write" if writes else "tick"
        self._throttle = throttle
        self.writes = writes
        self.ts: int | None = None
        self._retry = retry_lost_races
        #: `retry_lost_races`: the writes left unresolved because another
        #: adapter advanced their table past `ts` first (certainly not written).
        self.lost: list[PendingWrite] = []
        self._before = apply_write_before_append
        self._result: AppendResult | None = None
        self._start = inc.rt.now()
        if stats is not None:
            stats.commits += 1
            stats.writes += len(writes)
            stats.empty_commits += not writes

    async def timestamp(self) -> bool:
        """`write_ts`, after a `peek_write_ts` if `throttle` (Materialize's group
        commit peeks first to keep the table timeline from running ahead of the
        wall clock, `src/adapter/src/coord/appends.rs`; coordsim's oracle never
        runs ahead, so only the round trip is modeled, not the wait)."""
        try:
            if self._throttle:
                await self.inc.oracle.peek_write_ts()
            self.ts = (await self.inc.oracle.write_ts()).ts
        except Fenced as exc:
            _report_fenced(self.inc, "write timestamp", exc)
            self._fail(_fenced(exc))
            return False
        except ExternalError as exc:
            # No timestamp, so nothing was appended: definitely not applied.
            self._fail(SqlError(SqlState.SERIALIZATION_FAILURE, f"write timestamp: {exc}"))
            return False
        return True

    async def append(self) -> bool:
        """The append at `ts` to every table (after `apply_write` in the
        known-bad order)."""
        assert self.ts is not None
        merged: dict[int, list[tuple[Row, int]]] = {}
        for w in self.writes:
            merged.setdefault(w.table_id, []).extend(w.updates)
        catalog_ts = max((w.catalog_ts for w in self.writes), default=0)
        try:
            if self._before:
                await self.inc.oracle.apply_write(self.ts)
            self._result = await _append(self.inc, Append(self.ts, merged, catalog_ts))
        except Fenced as exc:
            _report_fenced(self.inc, "append", exc)
            self._fail(_fenced(exc), indeterminate=True)
            return False
        except ExternalError as exc:
            self._fail(SqlError(SqlState.INDETERMINATE, f"group commit at {self.ts}: {exc}"))
            return False
        return True

    async def apply(self) -> None:
        """`apply_write(ts)` (unless done before the append), then each write's outcome."""
        assert self.ts is not None
        assert self._result is not None
        try:
            if not self._before:
                await self.inc.oracle.apply_write(self.ts)
        except Fenced as exc:
            _report_fenced(self.inc, "apply_write", exc)
            self._fail(_fenced(exc), indeterminate=True)
            return
        except ExternalError as exc:
            self._fail(SqlError(SqlState.INDETERMINATE, f"group commit at {self.ts}: {exc}"))
            return
        self.lost = _resolve(self.inc, self.writes, self.ts, self._result, retry=self._retry)

    def finish(self) -> None:
        """Reports the commit as a `group-commit` event (once every step ran or one failed)."""
        failed = [w for w in self.writes if w.error is not None]
        lost = {"lost_race": len(self.lost)} if self.lost else {}
        self.inc.emit(
            "group-commit", "group-commit", self._start, ok=not failed, ts=self.ts, batch_size=len(self.writes),
            detail={"failed": len(failed), **lost} if failed or lost else None,
        )
        events = self.inc.rt.events
        if events.on:
            events.emit(
                "group_commit", trigger=self.trigger, batch_size=len(self.writes), ts=self.ts, ok=not failed,
                failed=len(failed), lost_race=len(self.lost),
                latency_ms=round((self.inc.rt.now() - self._start) * 1e6) / 1000,
            )

    def _fail(self, error: SqlError, *, indeterminate: bool = False) -> None:
        _resolve_all(self.writes, self.ts, error, indeterminate=indeterminate)


async def _append(inc: Incarnation, append: Append) -> AppendResult:
    """The storage append, reported as a `table-append` event: checker 4 holds
    `apply_write(ts)` to starting only after the append at `ts` is durable."""
    start = inc.rt.now()
    ok = False
    try:
        result = await inc.storage.append(append)
        ok = True  # returned: what it wrote is durable (a conflict fenced the rest)
        return result
    finally:
        inc.emit("table-append", "storage", start, ok=ok, ts=append.ts, timeline=inc.oracle.timeline)


def _resolve(
    inc: Incarnation, writes: Sequence[PendingWrite], ts: int, result: AppendResult, *, retry: bool
) -> list[PendingWrite]:
    """Resolves each write by the append's outcome; with `retry`, returns the
    writes on tables another writer advanced past `ts` (left unresolved)."""
    lost: list[PendingWrite] = []
    fenced_reported = False
    unknown = set(result.unknown)
    conflicted: set[int] = set()
    if isinstance(result, AppendConflict):
        conflicted = {tid for tid, _ in result.conflicts}
    for w in writes:
        if w.table_id in unknown:
            # Dropped between planning and commit: the failure is stamped with
            # the catalog time at which storage found the table gone, not the
            # earlier one the write was planned at (where it still existed).
            w.catalog_ts = max(w.catalog_ts, inc.storage.catalog_frontier - 1)
            w.resolve(
                ts, SqlError(SqlState.UNDEFINED_TABLE, f"table {w.table_id} does not exist at {ts}")
            )
        elif w.table_id in conflicted and retry:
            lost.append(w)  # another adapter won the race: not written, commit again
        elif w.table_id in conflicted:
            # Another coordinator advanced the table past `ts`: we are fenced,
            # and this write definitely did not land.
            if not fenced_reported:
                fenced_reported = True
                _report_fenced(inc, "append", "another coordinator wrote this table")
            w.resolve(
                ts,
                SqlError(SqlState.ADMIN_SHUTDOWN, "fenced: another coordinator wrote this table"),
            )
        elif isinstance(result, AppendConflict) and not retry:
            # Written, but its commit is not linearized with the newer coordinator.
            w.resolve(ts, SqlError(SqlState.INDETERMINATE, "fenced after a partial group commit"))
        else:
            w.resolve(ts, None)
    return lost


def _fenced(exc: BaseException) -> SqlError:
    return SqlError(SqlState.ADMIN_SHUTDOWN, f"fenced: {exc}")


def _report_fenced(inc: Incarnation, step: str, why: BaseException | str) -> None:
    """A `fenced` event: this coordinator (`who`) found a newer one at `step`."""
    if inc.rt.events.on:
        inc.rt.events.emit("fenced", component="group-commit", who=inc.actor, step=step, reason=str(why))


def _resolve_all(
    writes: Sequence[PendingWrite], ts: int | None, error: SqlError, *, indeterminate: bool = False
) -> None:
    if indeterminate:
        error = SqlError(SqlState.INDETERMINATE, error.message)
    for w in writes:
        w.resolve(ts, error)
