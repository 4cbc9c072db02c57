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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, final

import anyio

from controllers.commands import Append
from controllers.storage import AppendConflict
from coordinator.statements import SqlError, SqlState
from oracle.stash import Fenced
from persist.location import ExternalError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from controllers.storage import AppendResult
    from controllers.transform import Row
    from coordinator.environment import Incarnation

__all__ = ["GroupCommitStats", "PendingWrite", "group_commit"]


@final
@dataclass(eq=False)
class PendingWrite:
    """One client write (or a read-then-write's diffs) waiting for a group commit."""

    table_id: int
    updates: tuple[tuple[Row, int], ...]
    catalog_ts: int
    write_ts: int | None = None
    error: SqlError | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    def resolve(self, write_ts: int | None, error: SqlError | None) -> None:
        self.write_ts, self.error = write_ts, error
        self.done.set()


@final
@dataclass
class GroupCommitStats:
    commits: int = 0
    writes: int = 0
    empty_commits: int = 0


async def group_commit(
    inc: Incarnation,
    writes: Sequence[PendingWrite],
    *,
    apply_write_before_append: bool = False,
    stats: GroupCommitStats | None = None,
) -> int | None:
    """Commits `writes` (possibly none: advances idle tables) at one timestamp and
    resolves each; returns the timestamp, or None if none was allocated."""
    if stats is not None:
        stats.commits += 1
        stats.writes += len(writes)
        stats.empty_commits += not writes
    start = inc.rt.now()
    try:
        return await _commit(inc, writes, apply_write_before_append=apply_write_before_append)
    finally:
        ts = next((w.write_ts for w in writes if w.write_ts is not None), None)
        failed = [w for w in writes if w.error is not None]
        inc.emit(
            "group-commit", "group-commit", start, ok=not failed, ts=ts, batch_size=len(writes),
            detail={"failed": len(failed)} if failed else None,
        )  # fmt: skip


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


async def _commit(
    inc: Incarnation, writes: Sequence[PendingWrite], *, apply_write_before_append: bool
) -> int | None:
    try:
        ts = (await inc.oracle.write_ts()).ts
    except Fenced as exc:
        _resolve_all(writes, None, _fenced(exc))
        return None
    except ExternalError as exc:
        # No timestamp, so nothing was appended: definitely not applied.
        _resolve_all(
            writes, None, SqlError(SqlState.SERIALIZATION_FAILURE, f"write timestamp: {exc}")
        )
        return None
    merged: dict[int, list[tuple[Row, int]]] = {}
    for w in writes:
        merged.setdefault(w.table_id, []).extend(w.updates)
    catalog_ts = max((w.catalog_ts for w in writes), default=0)
    try:
        if apply_write_before_append:
            await inc.oracle.apply_write(ts)
        result = await _append(inc, Append(ts, merged, catalog_ts))
        if not apply_write_before_append:
            await inc.oracle.apply_write(ts)
    except Fenced as exc:
        _resolve_all(writes, ts, _fenced(exc), indeterminate=True)
        return ts
    except ExternalError as exc:
        _resolve_all(writes, ts, SqlError(SqlState.INDETERMINATE, f"group commit at {ts}: {exc}"))
        return ts
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
        elif w.table_id in conflicted:
            # Another coordinator advanced the table past `ts`: we are fenced,
            # and this write definitely did not land.
            w.resolve(
                ts,
                SqlError(SqlState.ADMIN_SHUTDOWN, "fenced: another coordinator wrote this table"),
            )
        elif isinstance(result, AppendConflict):
            # Written, but its commit is not linearized with the newer coordinator.
            w.resolve(ts, SqlError(SqlState.INDETERMINATE, "fenced after a partial group commit"))
        else:
            w.resolve(ts, None)
    return ts


def _fenced(exc: BaseException) -> SqlError:
    return SqlError(SqlState.ADMIN_SHUTDOWN, f"fenced: {exc}")


def _resolve_all(
    writes: Sequence[PendingWrite], ts: int | None, error: SqlError, *, indeterminate: bool = False
) -> None:
    if indeterminate:
        error = SqlError(SqlState.INDETERMINATE, error.message)
    for w in writes:
        w.resolve(ts, error)
