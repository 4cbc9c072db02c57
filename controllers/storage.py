"""The storage controller: tables are persist shards, written by group commit.

Paths:
- **CreateTable** opens the table's shard (creating it) with a writer and a
  reader; the reader is the controller's own read hold on the shard's since.
  Then the rest of Materialize's set-up of a table's shard, each step one
  round trip to Consensus, in sequence (`StorageConfig.table_setup`;
  Materialize's `StorageCollections::open_data_handles`, the storage
  controller's `create_collections` and txn-wal's `TxnsHandle::register`):
  the critical since handle taken over in the controller's epoch
  (`compare_and_downgrade_since`, a CaS), the writer's recent upper
  (`fetch_recent_upper`, a head read), the storage controller's own writer's
  recent upper (another), and the table's registration with the txns shard
  (a CaS; the model has no txns shard, so the registration is recorded on the
  table's shard, one CaS either way). PR #35786 counts about 27 metadata-store
  round trips in a CREATE TABLE, `open_data_handles` the largest share.
- **Append (group commit)**: wait until the catalog frontier is beyond the
  append's `catalog_ts`; then, under the write lock, `compare_and_append` on
  *every* table concurrently — the table's rows at `ts`, or nothing for an idle
  table — taking each upper to `ts + 1`. So a read at the oracle's read
  timestamp never blocks on an idle table. An upper already beyond `ts` means
  another writer (a second coordinator) wrote there: that is returned as
  `AppendConflict`, never skipped. Rows for tables that do not exist at that
  point are not written and are named in the result (`42P01` for their writers).
- **Compaction**: a background task moves each table's since to
  `upper - compaction_window` (or further, up to `AllowCompaction`), held back
  by read holds, and downgrades the shard's since accordingly.
- **Lease expiry**: persist's leases run on this process's clock, so a step
  of it past the lease expires the table's writer and reader at the next
  transition. The handle is reopened (a new id on the re-read state, as
  Materialize re-registers an expired handle) and the operation retried: an
  append refused with `LeaseExpiredError` was not applied (persist's
  contract), so the retry neither loses nor duplicates it.

Not atomic across tables: each table is its own shard and CaS, so a conflict on
one table can leave others written (Materialize made this atomic later with
txn-wal). A conflict only arises with two writers, which is a fencing failure
the caller must surface.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias, final

import anyio

from controllers.commands import (
    AdvanceCatalogFrontier,
    AllowCompaction,
    Append,
    CreateTable,
    DeterministicCommand,
    DropTable,
)
from controllers.frontier import CatalogFollower, ReadHold
from controllers.transform import encode_row
from persist.client import Appended, UpperMismatch
from persist.codec import Update
from persist.frontier import Frontier
from persist.machine import LeaseExpiredError
from sim.runtime.errors import ExternalError, InvalidUsage
from sim.runtime.tasks import TaskOwner

if TYPE_CHECKING:

    from anyio.abc import TaskGroup

    from persist.client import PersistClient, WriteHandle
    from persist.read import ReadHandle
    from sim.runtime.core import Runtime

__all__ = [
    "AppendConflict",
    "AppendOk",
    "AppendResult",
    "StorageCommand",
    "StorageConfig",
    "StorageController",
    "StorageStatistics",
]

StorageCommand: TypeAlias = CreateTable | DropTable | AllowCompaction | AdvanceCatalogFrontier


@final
@dataclass(frozen=True, slots=True)
class StorageConfig:
    """`compaction_window`: how many timestamps (ms on the oracle's clock) below
    the upper stay readable; 1000 as Materialize's default
    `logical_compaction_window` of 1 s."""

    compaction_window: int = 1000
    #: Whether a new table's shard gets the rest of Materialize's set-up (the
    #: module docstring): four more round trips to Consensus per CREATE TABLE
    #: (`CoordinatorConfig.ddl_round_trips` sets it). Off: the writer and the
    #: reader only.
    table_setup: bool = False
    #: Known-bad variant (DESIGN.md §2): append without waiting for the catalog
    #: frontier to pass the append's `catalog_ts`, so a table the writer saw may
    #: not exist here yet (`insert-unknown-table`). Anomaly tests only.
    ignore_catalog_ts: bool = False


@final
@dataclass(frozen=True, slots=True)
class AppendOk:
    """Every existing table's upper is now `ts + 1`; rows for `unknown` tables
    (absent at the append's catalog time or dropped since) were not written."""

    ts: int
    unknown: tuple[int, ...] = ()


@final
@dataclass(frozen=True, slots=True)
class AppendConflict:
    """Another writer took these tables' uppers to or beyond `ts + 1` first
    (`conflicts`: table id and its upper); tables in `written` did get the append."""

    ts: int
    conflicts: tuple[tuple[int, Frontier], ...]
    written: tuple[int, ...]
    unknown: tuple[int, ...] = ()


AppendResult: TypeAlias = AppendOk | AppendConflict


@final
@dataclass(frozen=True, slots=True)
class StorageStatistics:
    appends: int
    table_appends: int
    empty_table_appends: int
    conflicts: int
    foreign_advances: int
    since_downgrades: int
    lease_reopens: int = 0  # table writers and readers reopened after their lease expired
    builtin_appends: int = 0  # DDLs' builtin-table writes (`append_builtin`)


@final
@dataclass
class _Table:
    id: int
    shard_id: str
    columns: tuple[str, ...]
    write: WriteHandle
    read: ReadHandle
    since: int  # the logical since: reads at >= since are valid
    allowed: int = 0  # AllowCompaction's bound
    holds: list[int] = field(default_factory=list)


@final
class StorageController(CatalogFollower, TaskOwner):
    """Tables as persist shards; owned via `async with` (its compaction task)."""

    def __init__(self, persist: PersistClient, rt: Runtime, *, config: StorageConfig = StorageConfig()) -> None:
        super().__init__()
        self._persist = persist
        self._rt = rt
        self.config = config
        self._tables: dict[int, _Table] = {}
        self._lock = anyio.Lock()
        self._tg: TaskGroup | None = None
        self._dirty: list[int] = []
        self._wake = anyio.Event()
        self._builtin: WriteHandle | None = None
        self._builtin_lock = anyio.Lock()
        self._stats = {"builtin_appends": 0, "appends": 0, "table_appends": 0, "empty": 0, "conflicts": 0, "foreign": 0, "downgrades": 0, "downgrade_failures": 0, "finalize_failures": 0, "reopens": 0}

    def _start_background(self, tg: TaskGroup) -> None:
        tg.start_soon(self._compaction_loop)

    # --- deterministic commands --------------------------------------------------------

    async def apply(self, cmd: DeterministicCommand) -> None:
        """Applies one deterministic command; call in the order derived. Commands
        that are not about storage (`StorageCommand`) are ignored, so an owner can
        feed every derived command to both controllers."""
        if not isinstance(cmd, StorageCommand):
            return
        if isinstance(cmd, AdvanceCatalogFrontier):
            self._advance_catalog_frontier(cmd.ts)
            return
        if isinstance(cmd, AllowCompaction):
            t = self._tables.get(cmd.id)
            if t is not None and cmd.since > t.allowed:
                t.allowed = cmd.since
                self._mark(t.id)
            return
        async with self._lock:
            if isinstance(cmd, CreateTable):
                existing = self._tables.get(cmd.id)
                if existing is not None:
                    if existing.shard_id != cmd.shard_id:
                        raise InvalidUsage(f"table {cmd.id} exists with shard {existing.shard_id}")
                    return
                write, read = await self._persist.open(cmd.shard_id)
                since = read.since.ts
                if since is None:
                    raise InvalidUsage(f"shard {cmd.shard_id} of table {cmd.id} is closed (empty since)")
                if self.config.table_setup:
                    await self._set_up(cmd.shard_id, write, since)
                self._tables[cmd.id] = _Table(cmd.id, cmd.shard_id, cmd.columns, write, read, since)
            else:
                t = self._tables.pop(cmd.id, None)
                if t is not None:
                    await self._finalize(t)
                    await t.write.expire()
                    await t.read.expire()

    async def _set_up(self, shard_id: str, write: WriteHandle, since: int) -> None:
        """The rest of a new table's shard set-up, in Materialize's order (the
        module docstring): four sequential round trips to Consensus."""
        await self._persist.register(shard_id, "critical/controller", f"since={since}")
        await write.fetch_recent_upper()  # StorageCollections' writer, linearized after the since handle
        await write.fetch_recent_upper()  # the storage controller's own writer
        await self._persist.register(shard_id, "txns", "registered")

    async def _finalize(self, t: _Table) -> None:
        """Closes a dropped table's shard for writes for good (its upper becomes
        the empty frontier), as Materialize finalizes dropped shards: a deposed
        coordinator that still believes in the table gets an upper mismatch
        (fenced) instead of acknowledging a write nobody can read. Best effort:
        a failing store leaves the shard open, which only matters to a zombie."""
        expected = t.write.upper
        try:
            while not expected.is_empty:
                try:
                    result = await t.write.compare_and_append([], expected, Frontier.EMPTY)
                except LeaseExpiredError:
                    await self._reopen_writer(t)
                    expected = t.write.upper
                    continue
                if isinstance(result, Appended):
                    return
                expected = result.current
        except ExternalError:
            self._stats["finalize_failures"] += 1

    # --- builtin tables ------------------------------------------------------------------

    async def append_builtin(self, ts: int) -> int:
        """Writes one DDL's builtin-table rows at `ts` or later, in one
        compare-and-append to this controller's builtin-tables shard, and returns
        the time written. Materialize's DDL writes its catalog change to builtin
        tables (`mz_tables`, `mz_columns`, `mz_audit_events`) through a group
        commit and awaits it; with txn-wal that commit is one write to the txns
        shard whatever the number of tables. The model's group commit appends
        to every table's shard instead, so a DDL that waited for one would pay
        (and take simulator time) in proportion to the tables, which
        Materialize no longer does (PR #36474): this one write stands for it.
        Nothing reads the shard, and its upper is not the oracle's business (no
        `apply_write`: the next group commit's covers it). The shard is opened on
        first use (its own five round trips, once per controller)."""
        if ts < 0:
            raise InvalidUsage(f"builtin append at negative ts {ts}")
        async with self._builtin_lock:
            if self._builtin is None:
                self._builtin = await self._persist.open_writer(f"builtin-{self._rt.unique_hex(64)}")
            w = self._builtin
            at = ts
            while True:
                upper = w.upper.ts
                if upper is None:
                    raise InvalidUsage(f"builtin-tables shard {w.shard_id} is closed")
                at = max(at, upper)
                try:
                    result = await w.compare_and_append([Update(b"ddl", b"", at, 1)], upper, at + 1)
                except LeaseExpiredError:
                    self._builtin = w = await self._persist.reopen_writer(w)
                    self._stats["reopens"] += 1
                    continue
                if isinstance(result, Appended):
                    self._stats["builtin_appends"] += 1
                    return at
                # Another writer (a former incarnation's) moved it: the handle now knows the upper.

    # --- group commit ------------------------------------------------------------------

    async def append(self, cmd: Append) -> AppendResult:
        """Group commit at `cmd.ts` (see the module docstring)."""
        if cmd.ts < 0:
            raise InvalidUsage(f"append at negative ts {cmd.ts}")
        if not self.config.ignore_catalog_ts:
            await self.wait_catalog_frontier(cmd.catalog_ts)
        async with self._lock:
            rows = dict(cmd.updates)
            unknown = tuple(tid for tid in rows if tid not in self._tables)
            tables = list(self._tables.values())
            results: dict[int, Appended | UpperMismatch] = {}

            async def one(t: _Table) -> None:
                ups = [Update(encode_row(r), b"", cmd.ts, d) for r, d in rows.get(t.id, ())]
                results[t.id] = await self._append_one(t, ups, cmd.ts)

            async with anyio.create_task_group() as tg:
                for t in tables:
                    tg.start_soon(one, t)
            self._stats["appends"] += 1
            self._stats["table_appends"] += sum(1 for t in tables if rows.get(t.id))
            self._stats["empty"] += sum(1 for t in tables if not rows.get(t.id))
            for t in tables:
                if isinstance(results[t.id], Appended):
                    self._mark(t.id)
            conflicts = tuple(
                (t.id, r.current) for t in tables if isinstance(r := results[t.id], UpperMismatch)
            )
            if conflicts:
                self._stats["conflicts"] += 1
                written = tuple(t.id for t in tables if isinstance(results[t.id], Appended))
                return AppendConflict(cmd.ts, conflicts, written, unknown)
            return AppendOk(cmd.ts, unknown)

    async def _append_one(self, t: _Table, ups: list[Update], ts: int) -> Appended | UpperMismatch:
        while True:
            expected = t.write.upper
            if not expected.less_equal(ts):
                return UpperMismatch(expected)
            try:
                result = await t.write.compare_and_append(ups, expected, ts + 1)
            except LeaseExpiredError:
                # Not applied (an append that may have landed before the lease
                # ran out raises Indeterminate instead): retry on a new writer,
                # against the upper it re-read.
                await self._reopen_writer(t)
                continue
            if isinstance(result, Appended):
                return result
            current = result.current
            if not current.less_equal(ts):
                return result
            # Another writer advanced the table, but not to `ts`: our rows still
            # belong after theirs in time, so retry against its upper (counted).
            self._stats["foreign"] += 1

    # --- since and read holds ----------------------------------------------------------

    def table_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self._tables))

    def upper(self, table_id: int) -> Frontier:
        """The table's upper as of this controller's last append (no I/O)."""
        return self._table(table_id).write.upper

    def since(self, table_id: int) -> int:
        """The least time at which the table can still be read."""
        return self._table(table_id).since

    def read_floor(self, table_id: int) -> int | None:
        """The table's since if this controller knows the table, else None."""
        t = self._tables.get(table_id)
        return None if t is None else t.since

    def read_hold(self, table_id: int, ts: int) -> ReadHold:
        """Holds the table readable at `ts`; `ts` below its since is `InvalidUsage`."""
        t = self._table(table_id)
        if ts < t.since:
            raise InvalidUsage(f"table {table_id}: cannot hold {ts}, below its since {t.since}")
        t.holds.append(ts)
        return ReadHold(table_id, ts, self._release)

    def _release(self, hold: ReadHold) -> None:
        t = self._tables.get(hold.id)
        if t is not None:
            t.holds.remove(hold.ts)
            self._mark(t.id)

    def _table(self, table_id: int) -> _Table:
        t = self._tables.get(table_id)
        if t is None:
            raise InvalidUsage(f"unknown table {table_id}")
        return t

    def _mark(self, table_id: int) -> None:
        if table_id not in self._dirty:
            self._dirty.append(table_id)
        self._wake.set()

    def _target_since(self, t: _Table) -> int:
        upper = t.write.upper.ts
        if upper is None:
            return t.since
        target = min(max(upper - self.config.compaction_window, t.allowed), upper - 1)
        if t.holds:
            target = min(target, *t.holds)
        return max(t.since, target)

    async def _compaction_loop(self) -> None:
        """Moves sinces forward off the append path (one CaS per table per step)."""
        step = max(1, self.config.compaction_window // 4)
        while True:
            if not self._dirty:
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            table_id = self._dirty.pop(0)
            t = self._tables.get(table_id)
            if t is None:
                continue
            target = self._target_since(t)
            t.since = target
            persisted = t.read.since.ts
            if persisted is not None and target - persisted >= step:
                try:
                    await t.read.downgrade_since(target)
                except LeaseExpiredError:
                    if table_id not in self._tables:
                        continue  # dropped (its reader expired) while we downgraded
                    try:
                        await self._reopen_reader(t)
                    except ExternalError:
                        self._stats["downgrade_failures"] += 1
                        continue  # still expired: reopened at the next attempt
                    self._mark(table_id)  # the downgrade, on the new reader
                    continue
                except ExternalError:
                    # The store failed past persist's retries: the since stays
                    # where it is (safe, only less compaction) and is retried
                    # with the table's next append.
                    self._stats["downgrade_failures"] += 1
                    continue
                self._stats["downgrades"] += 1

    # --- lease expiry --------------------------------------------------------------------

    async def _reopen_writer(self, t: _Table) -> None:
        t.write = await self._persist.reopen_writer(t.write)
        self._stats["reopens"] += 1

    async def _reopen_reader(self, t: _Table) -> None:
        """A new reader for `t`, holding its since again. If another reader
        let the shard's since pass ours while ours was expired, times below
        it are compacted: the logical since follows (a read there is refused
        as below the since, never answered wrongly)."""
        t.read = await self._persist.reopen_reader(t.read)
        self._stats["reopens"] += 1
        persisted = t.read.since.ts
        if persisted is not None and persisted > t.since:
            t.since = persisted

    def statistics(self) -> StorageStatistics:
        s = self._stats
        return StorageStatistics(
            s["appends"], s["table_appends"], s["empty"], s["conflicts"], s["foreign"], s["downgrades"],
            s["reopens"], s["builtin_appends"],
        )
