"""The durable catalog interface: seed 004's `DurableCatalogState` plus the catalog
pTVC operations of seed 001 (`compare_and_append`, `snapshot_at`, `subscribe_at`).

The contract lives in the `DurableCatalog` docstrings and is checked on every
implementation by `catalog.testing.check_catalog`. The invariants it protects:
no two openers ever hold the same epoch, and a catalog whose epoch is no longer
current never again writes anything (fencing); every committed change is in
the `catalog` timeline exactly once, at one timestamp, and is visible to every
snapshot and subscription at or after it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self, final

from sim.runtime.errors import CoordsimError, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
    from types import TracebackType

    from catalog.objects import (
        CatalogState,
        CatalogUpdate,
        Cluster,
        ClusterReplica,
        Database,
        IdAllocator,
        Index,
        MaterializedView,
        Role,
        Schema,
        SystemObjectMapping,
        Table,
        TimestampEntry,
    )
    from catalog.transaction import Transaction

__all__ = [
    "AppendResult",
    "Appended",
    "BelowSince",
    "CatalogEvent",
    "CatalogNotReady",
    "Changes",
    "Conflict",
    "DurableCatalog",
    "OpenReport",
    "Progress",
    "Subscription",
    "UpgradeCheck",
]


# --- errors ------------------------------------------------------------------------------


class CatalogNotReady(CoordsimError):
    """The catalog cannot be opened this way (uninitialized for read-only, or it
    needs a migration that read-only mode may not run)."""


class BelowSince(InvalidUsage):
    """A read at a timestamp the catalog has compacted away (below its since)."""


# --- results and events ------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Appended:
    """The append committed; the catalog's upper is now `upper`."""

    upper: int


@final
@dataclass(frozen=True, slots=True)
class Conflict:
    """The catalog's upper was not the expected one (another writer got there
    first); nothing was written. `current_upper` is the upper found; the
    catalog's cache has been brought up to it, so re-plan and retry."""

    current_upper: int


AppendResult = Appended | Conflict


@final
@dataclass(frozen=True, slots=True)
class OpenReport:
    """What `open` did: the epoch it holds, whether it created the catalog, and
    the migration steps it committed (empty if none)."""

    epoch: int
    created: bool
    migrated_from: int | None
    steps: tuple[str, ...]


@final
@dataclass(frozen=True, slots=True)
class UpgradeCheck:
    """What opening would do (`check_open`), computed without writing."""

    initialized: bool
    version: int | None
    target_version: int
    steps: tuple[str, ...]


@final
@dataclass(frozen=True, slots=True)
class Changes:
    """Every update of the catalog at time `ts` (retractions first)."""

    ts: int
    updates: tuple[CatalogUpdate, ...]


@final
@dataclass(frozen=True, slots=True)
class Progress:
    """The subscription has delivered every update at times `< upper`."""

    upper: int


CatalogEvent = Changes | Progress


@final
class Subscription:
    """`subscribe_at(ts)`'s result: `snapshot` (the catalog at `ts`), then, by
    iteration, `Changes` in strictly increasing `ts` (each `> ts`, each time at
    most once) interleaved with `Progress` whose uppers strictly increase; every
    `Changes.ts` is below the next `Progress.upper`. Close it (or use
    `async with`) to release what it holds back (the since)."""

    def __init__(
        self,
        as_of: int,
        snapshot: CatalogState,
        events: AsyncIterator[CatalogEvent],
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.as_of = as_of
        self.snapshot = snapshot
        self._events = events
        self._on_close = on_close

    def __aiter__(self) -> AsyncIterator[CatalogEvent]:
        return self._events

    async def aclose(self) -> None:
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            await aclose()
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            await on_close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


# --- the interface -----------------------------------------------------------------------


class DurableCatalog(ABC):
    """The durable catalog of one environment (seed 004), shared as a pTVC in the
    `catalog` timeline (seed 001).

    Lifecycle. A catalog object is created unopened (`is_initialized`,
    `get_deploy_generation` and `check_open` work on it), then opened once, in
    one of two modes: `open` (read/write: initializes or migrates, and bumps the
    epoch, fencing every older opener) or `open_read_only`. Calling an `open*`
    twice, or a writing method on an unopened or read-only catalog, is
    `InvalidUsage`.

    Time. Every change carries a timestamp of the `catalog` timeline; the
    catalog's *upper* is the first time not yet complete (0 when uninitialized,
    so `is_initialized` iff `upper > 0`), its *since* the first time it can still
    read. The catalog holds an in-memory copy (the *cache*) at some upper `u`
    (`cached_upper`); reads (`get_*`, `dump`, `transaction`) come from it.
    The cache moves forward by itself when this object writes, on `sync()`, and
    after any `Conflict`.

    Oracle. If constructed with the `catalog` timeline's oracle, a write picks
    its time with `write_ts()` unless given one, and every successful append at
    times `< new_upper` ends with `apply_write(new_upper - 1)` (seed 001's
    "ApplyWrite(catalog, new_upper)": the write at `new_upper - 1` becomes
    readable) before returning.

    Fencing. `epoch()` values are unique across all openers of a location
    (`open` bumps it in the same atomic append as its migrations). After a
    newer `open`, this object's next write raises `Fenced` and writes nothing,
    and `confirm_leadership` raises `Fenced`.

    Errors: misuse is `InvalidUsage`; DDL validation errors are
    `catalog.transaction.CatalogError`; a failing backend is `ExternalError`
    after the implementation's retries.
    """

    # --- initialization ------------------------------------------------------------------

    @abstractmethod
    async def is_initialized(self) -> bool:
        """True iff the catalog has ever been opened for writing (linearized read)."""

    @abstractmethod
    async def fetch_upper(self) -> int:
        """The catalog's durable upper, linearized; works on an unopened catalog
        (with `snapshot_at(upper - 1)` it reads the catalog without opening it)."""

    @abstractmethod
    async def get_deploy_generation(self) -> int | None:
        """The deploy generation, readable before `open` (None if uninitialized)."""

    @abstractmethod
    async def open(
        self, *, bootstrap: CatalogState | None = None, deploy_generation: int | None = None
    ) -> OpenReport:
        """Opens for reading and writing.

        `deploy_generation`, if given, is written with the epoch (config
        `deploy_generation`).

        Uninitialized: writes `bootstrap` (default: `migrations.initial_state()`),
        with its config `epoch` set to 1, and holds epoch 1 — it does not migrate
        `bootstrap` (tests use it to create old-format catalogs). Initialized:
        reads the catalog, runs the migrations, and commits them together with
        `epoch + 1` in one compare-and-append (retrying on a concurrent opener),
        so a migration commits at most once.

        Raises:
            MigrationError: the catalog cannot be upgraded (nothing written).
        """

    @abstractmethod
    async def check_open(self, *, replica_sizes: frozenset[str] | None = None) -> UpgradeCheck:
        """What `open` would do, without any durable change (the upgrade check).

        An uninitialized catalog reports `initialized=False` and no steps.

        Raises:
            MigrationError: `open` would fail to migrate (or a replica size is
                not in `replica_sizes`).
        """

    @abstractmethod
    async def open_read_only(self) -> None:
        """Opens for reading only; never writes, never bumps the epoch.

        Raises:
            CatalogNotReady: uninitialized, or a migration would be needed.
        """

    @abstractmethod
    async def join(self, epoch: int) -> None:
        """Opens for reading and writing as one more process of the deployment
        that opened the catalog at `epoch` (issue 36's adapters): nothing is
        written and the epoch is not bumped, so the processes of one deployment
        never fence each other; a newer `open` fences all of them alike.

        Raises:
            Fenced: the catalog's epoch is no longer `epoch` (a newer opener).
            CatalogNotReady: uninitialized.
        """

    @abstractmethod
    def epoch(self) -> int | None:
        """This opener's epoch (the fencing token); None unless opened with
        `open` or `join`."""

    # --- reads (from the cache; need an open catalog) -----------------------------------

    @abstractmethod
    def state(self) -> CatalogState:
        """A copy of the cached catalog (at `cached_upper - 1`)."""

    @property
    @abstractmethod
    def cached_upper(self) -> int:
        """The upper the cache reflects."""

    def get_clusters(self) -> list[Cluster]:
        from catalog.objects import Cluster

        return self.state().objects(Cluster)

    def get_cluster_replicas(self) -> list[ClusterReplica]:
        from catalog.objects import ClusterReplica

        return self.state().objects(ClusterReplica)

    def get_databases(self) -> list[Database]:
        from catalog.objects import Database

        return self.state().objects(Database)

    def get_schemas(self) -> list[Schema]:
        from catalog.objects import Schema

        return self.state().objects(Schema)

    def get_tables(self) -> list[Table]:
        from catalog.objects import Table

        return self.state().objects(Table)

    def get_indexes(self) -> list[Index]:
        from catalog.objects import Index

        return self.state().objects(Index)

    def get_materialized_views(self) -> list[MaterializedView]:
        from catalog.objects import MaterializedView

        return self.state().objects(MaterializedView)

    def get_roles(self) -> list[Role]:
        from catalog.objects import Role

        return self.state().objects(Role)

    def get_id_allocators(self) -> list[IdAllocator]:
        from catalog.objects import IdAllocator

        return self.state().objects(IdAllocator)

    def get_config(self) -> dict[str, int]:
        from catalog.objects import Config

        return {c.name: c.value for c in self.state().objects(Config)}

    def get_settings(self) -> dict[str, str]:
        from catalog.objects import Setting

        return {s.name: s.value for s in self.state().objects(Setting)}

    def get_timestamps(self) -> list[TimestampEntry]:
        from catalog.objects import TimestampEntry

        return self.state().objects(TimestampEntry)

    @abstractmethod
    def dump(self) -> str:
        """The cached catalog as human-readable JSON: `{kind: [{key, value}]}`,
        sorted, each key and value in the form `edit`/`delete` accept."""

    @abstractmethod
    async def sync(self) -> int:
        """Brings the cache up to the catalog's current upper (linearized) and
        returns it. Checks nothing about leadership."""

    # --- writes --------------------------------------------------------------------------

    @abstractmethod
    def transaction(self) -> Transaction:
        """A new transaction on the cache (planned at `cached_upper`)."""

    @abstractmethod
    async def commit_transaction(self, tx: Transaction, *, commit_ts: int | None = None) -> AppendResult:
        """Commits `tx` at `commit_ts` (default: the oracle's `write_ts()`, else the
        upper), i.e. `compare_and_append(tx.upper, ts + 1, tx.updates(ts))`.

        Returns `Conflict` if the catalog moved since `tx` was planned (nothing
        written; the cache is fresh, plan a new transaction). An empty
        transaction still commits (it advances the upper).

        Raises:
            Fenced: a newer epoch exists (nothing written).
            InvalidUsage: not opened for writing; `commit_ts < tx.upper`.
        """

    async def set_system_object_mappings(self, mappings: Sequence[SystemObjectMapping]) -> AppendResult:
        """seed 004's targeted write: records the ids and fingerprints of builtin
        objects in one transaction (replacing earlier mappings of the same keys).
        `Conflict` as for `commit_transaction`."""
        tx = self.transaction()
        for m in mappings:
            tx.set_system_object_mapping(m)
        return await self.commit_transaction(tx)

    def get_system_object_mappings(self) -> list[SystemObjectMapping]:
        from catalog.objects import SystemObjectMapping

        return self.state().objects(SystemObjectMapping)

    def get_system_configurations(self) -> dict[str, str]:
        from catalog.objects import SystemConfiguration

        return {c.name: c.value for c in self.state().objects(SystemConfiguration)}

    @abstractmethod
    async def compare_and_append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate]
    ) -> AppendResult:
        """Appends `updates` (times in `[expected_upper, new_upper)`) iff the
        catalog's upper is `expected_upper`, atomically, advancing it to
        `new_upper`; else returns `Conflict(current upper)` and writes nothing.

        The updates must be consistent with the catalog at `expected_upper - 1`
        (a retraction removes the value present, an addition finds its key free).
        Safe to retry after an `Indeterminate` failure only by re-reading the upper.

        Raises:
            Fenced: the epoch at `expected_upper` is not this opener's (nothing
                written).
            InvalidUsage: not opened for writing, `new_upper <= expected_upper`,
                an update outside the range, or a diff other than +1/-1.
        """

    # --- the catalog pTVC ----------------------------------------------------------------

    @abstractmethod
    async def snapshot_at(self, ts: int) -> CatalogState:
        """The catalog's contents at `ts`; waits until `ts < upper`.

        Raises:
            BelowSince: `ts` is below the since.
        """

    @abstractmethod
    async def subscribe_at(self, ts: int) -> Subscription:
        """`snapshot_at(ts)` followed by every later change (see `Subscription`).

        Raises:
            BelowSince: `ts` is below the since.
        """

    @abstractmethod
    async def downgrade_since(self, ts: int) -> None:
        """Allows forgetting history before `ts` (`ts < upper`); afterwards reads
        at times `< ts` raise `BelowSince`. Never moves the since backwards."""

    @abstractmethod
    async def since(self) -> int:
        """The first time the catalog can still read."""

    # --- misc ----------------------------------------------------------------------------

    @abstractmethod
    async def confirm_leadership(self) -> None:
        """Returns iff this opener's epoch is still current, linearized.

        Raises:
            Fenced: a newer opener exists.
            InvalidUsage: not opened for writing.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Releases what the catalog holds (not the backend it was given)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
