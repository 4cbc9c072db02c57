"""Controller commands and responses (seed 001, "Controller Commands").

*Deterministic* commands are a pure function of catalog contents
(`controllers.derive`); replaying them from the catalog rebuilds a controller,
so they carry no timestamps of the data timeline, only ids.
`AdvanceCatalogFrontier(ts)` says every catalog change at times `< ts` has been
delivered. *Ephemeral* commands (peeks, table appends) come from client queries
and carry the `catalog_ts` they were planned at: a controller acts on one only
once its catalog frontier is beyond that `catalog_ts`, so it never works from a
catalog older than the one the query saw.

Ids are the catalog's integer ids (items, clusters, replicas share nothing but
the type).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, final

from controllers.transform import Row, Transform
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from persist.frontier import Frontier

__all__ = [
    "IDENTITY",
    "UNKNOWN_CLUSTER",
    "UNKNOWN_COLLECTION",
    "AdvanceCatalogFrontier",
    "AllowCompaction",
    "Append",
    "CancelPeek",
    "Command",
    "ComputeResponse",
    "CreateCluster",
    "CreateDataflow",
    "CreateReplica",
    "CreateTable",
    "DeterministicCommand",
    "DropCluster",
    "DropDataflow",
    "DropReplica",
    "DropTable",
    "DroppedIds",
    "FrontierUppers",
    "Peek",
    "PeekCanceled",
    "PeekError",
    "PeekResponse",
    "PeekRows",
    "TableUpdates",
    "table_shard_id",
]

#: SQLSTATE of a peek or write on a collection that does not exist (PostgreSQL's
#: `undefined_table`, which Materialize also returns for an object dropped while
#: a query on it was in flight).
UNKNOWN_COLLECTION: Final = "42P01"
#: SQLSTATE of a peek naming a cluster that does not exist (`undefined_object`).
UNKNOWN_CLUSTER: Final = "42704"


#: The identity transform (a frozen value, so one instance serves as every default).
IDENTITY: Final = Transform()


def table_shard_id(table_id: int) -> str:
    """The persist shard of table `table_id`: a function of the id alone, so every
    coordinator (and a restarted one) derives the same shard for the same table."""
    return f"u{table_id}"


# --- deterministic commands ------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class CreateTable:
    """A table (storage: a persist shard; compute: a persist-backed collection
    that peeks read directly). `columns` names the row positions."""

    id: int
    shard_id: str
    columns: tuple[str, ...]


@final
@dataclass(frozen=True, slots=True)
class DropTable:
    id: int


@final
@dataclass(frozen=True, slots=True)
class CreateCluster:
    id: int


@final
@dataclass(frozen=True, slots=True)
class DropCluster:
    id: int


@final
@dataclass(frozen=True, slots=True)
class CreateReplica:
    """A replica of `cluster_id`; `workers` modeled cores (from the replica size)."""

    cluster_id: int
    replica_id: int
    workers: int = 1

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise InvalidUsage(f"a replica needs >= 1 worker, got {self.workers}")


@final
@dataclass(frozen=True, slots=True)
class DropReplica:
    cluster_id: int
    replica_id: int


DataflowKind: TypeAlias = Literal["index", "materialized-view"]


@final
@dataclass(frozen=True, slots=True)
class CreateDataflow:
    """An index or materialized view on `cluster_id`, maintaining `transform` of
    `input_id` (a table) in an arrangement on every replica of the cluster."""

    id: int
    cluster_id: int
    kind: DataflowKind
    input_id: int
    transform: Transform = IDENTITY


@final
@dataclass(frozen=True, slots=True)
class DropDataflow:
    id: int


@final
@dataclass(frozen=True, slots=True)
class AllowCompaction:
    """Permits compacting collection `id` up to `since` (beyond the default
    compaction window). It never compacts past a read hold or an in-flight peek."""

    id: int
    since: int


@final
@dataclass(frozen=True, slots=True)
class AdvanceCatalogFrontier:
    """Every catalog change at times `< ts` has been delivered (an upper)."""

    ts: int


DeterministicCommand: TypeAlias = (
    CreateTable
    | DropTable
    | CreateCluster
    | DropCluster
    | CreateReplica
    | DropReplica
    | CreateDataflow
    | DropDataflow
    | AllowCompaction
    | AdvanceCatalogFrontier
)


# --- ephemeral commands ------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Peek:
    """Read `collection_id` as of `as_of` through `transform`, planned against the
    catalog at `catalog_ts`.

    Served once the controller's catalog frontier is beyond `catalog_ts`; an index
    or view is read on the cluster that maintains it, a table on `cluster_id`
    (a persist fast-path peek).
    """

    peek_id: int
    collection_id: int
    cluster_id: int
    as_of: int
    catalog_ts: int
    transform: Transform = IDENTITY


#: `(table id, ((row, diff), …))` pairs; a mapping is accepted and normalized.
TableUpdates: TypeAlias = tuple[tuple[int, tuple[tuple[Row, int], ...]], ...]


def _normalize(updates: Mapping[int, Sequence[tuple[Row, int]]] | TableUpdates) -> TableUpdates:
    items = updates.items() if hasattr(updates, "items") else updates
    out = tuple((int(tid), tuple((tuple(row), int(d)) for row, d in rows)) for tid, rows in items)
    ids = [tid for tid, _ in out]
    if len(set(ids)) != len(ids):
        raise InvalidUsage(f"a table appears twice in one append: {ids}")
    return tuple(sorted(out, key=lambda x: x[0]))


@final
@dataclass(frozen=True, slots=True, init=False)
class Append:
    """A group commit: every `(row, diff)` of every table at `ts`; all tables'
    uppers (written or not) advance to `ts + 1`."""

    ts: int
    updates: TableUpdates
    catalog_ts: int

    def __init__(
        self,
        ts: int,
        updates: Mapping[int, Sequence[tuple[Row, int]]] | TableUpdates = (),
        catalog_ts: int = 0,
    ) -> None:
        object.__setattr__(self, "ts", ts)
        object.__setattr__(self, "updates", _normalize(updates))
        object.__setattr__(self, "catalog_ts", catalog_ts)


@final
@dataclass(frozen=True, slots=True)
class CancelPeek:
    peek_id: int


Command: TypeAlias = DeterministicCommand | Peek | Append | CancelPeek


# --- responses ---------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class PeekRows:
    """The exact contents at `as_of`: rows sorted by their encoding, a row with
    multiplicity n appearing n times."""

    rows: tuple[Row, ...]


@final
@dataclass(frozen=True, slots=True)
class PeekError:
    """A clean, client-facing failure with a SQLSTATE-like `code`. `since`
    is set when the failure is an `as_of` below the collection's since: the
    earliest time the peek could read, which the coordinator catches up to
    and peeks again at (Materialize never answers such a read with an error)."""

    code: str
    message: str
    since: int | None = None


@final
@dataclass(frozen=True, slots=True)
class PeekCanceled:
    pass


@final
@dataclass(frozen=True, slots=True)
class PeekResponse:
    peek_id: int
    result: PeekRows | PeekError | PeekCanceled


@final
@dataclass(frozen=True, slots=True)
class FrontierUppers:
    """Collection `id` is complete (on at least one replica) for times `< upper`."""

    id: int
    upper: Frontier


@final
@dataclass(frozen=True, slots=True)
class DroppedIds:
    """These collections are gone; nothing more will be reported about them."""

    ids: tuple[int, ...]


ComputeResponse: TypeAlias = PeekResponse | FrontierUppers | DroppedIds
