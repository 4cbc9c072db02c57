"""Catalog transactions: plan changes on a private copy of the catalog, then hand
the difference to `DurableCatalog.commit_transaction` (or, in the decoupled
design, to `compare_and_append` at an oracle timestamp).

A transaction remembers the upper it was planned at; committing it is a
compare-and-append against that upper, so a transaction planned on a stale
snapshot never commits (it returns `Conflict` and the caller re-plans).
DDL validation errors are `CatalogError`s carrying a SQLSTATE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from catalog.objects import (
    Cluster,
    ClusterReplica,
    Column,
    Config,
    Database,
    IdAllocator,
    Index,
    MaterializedView,
    Role,
    Schema,
    Setting,
    SystemConfiguration,
    SystemObjectMapping,
    Table,
    TimestampEntry,
    canonical,
    kind_class,
)
from sim.runtime.errors import CoordsimError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from catalog.objects import CatalogObject, CatalogState, CatalogUpdate, Json

__all__ = ["ID_SPACES", "CatalogError", "Transaction"]

#: The id allocators (Materialize's GlobalId, ClusterId, ReplicaId, ... spaces).
ID_SPACES: Final = ("cluster", "database", "item", "replica", "role", "schema")


class CatalogError(CoordsimError):
    """A DDL statement cannot apply to the catalog (client-facing, with a SQLSTATE)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@final
class Transaction:
    """Changes planned against the catalog as of `upper` (its state at `upper - 1`).

    Not thread-safe and not durable: nothing happens until it is committed.
    """

    def __init__(self, base: CatalogState, upper: int) -> None:
        self.upper = upper
        self._base = base
        self._work = base.copy()
        self._reserved: dict[str, list[int]] = {}

    @property
    def state(self) -> CatalogState:
        """The catalog as it would be after this transaction."""
        return self._work

    def updates(self, ts: int) -> list[CatalogUpdate]:
        """The changes of this transaction, as updates at `ts`."""
        return self._work.diff(self._base, ts)

    def is_empty(self) -> bool:
        return self._work.entries == self._base.entries

    def overwrite(self, state: CatalogState) -> None:
        """Makes `state` the result of this transaction, whatever its base: the
        known-bad blind append (`KnownBad.blind_catalog_append`) and nothing else."""
        self._work = state.copy()

    # --- generic edits (debug tool, migrations) ------------------------------------------

    def put(self, obj: CatalogObject) -> None:
        """Inserts or replaces one object."""
        self._work.put(obj)

    def delete(self, kind: str, key: str) -> bool:
        """Deletes the object of `kind` with canonical key `key`; True iff it existed."""
        kind_class(kind)
        return self._work.remove(kind, key)

    # --- ids -----------------------------------------------------------------------------

    def reserve_id(self, space: str, item_id: int) -> None:
        """Makes `item_id`, allocated by an earlier committed transaction (as
        Materialize's `allocate_user_id` does before a CREATE's own), the
        next id this transaction allocates in `space`, without moving the
        allocator again."""
        self._reserved.setdefault(space, []).append(item_id)

    def allocate_id(self, space: str) -> int:
        """The next id of `space` (ids are never reused, even after a drop)."""
        reserved = self._reserved.get(space)
        if reserved:
            return reserved.pop(0)
        alloc = self._work.get(IdAllocator, name=space)
        if alloc is None:
            raise CatalogError("XX000", f"no id allocator {space!r} in the catalog")
        self._work.put(IdAllocator(space, alloc.next_id + 1))
        return alloc.next_id

    # --- lookups -------------------------------------------------------------------------

    def _schema(self, schema_id: int) -> Schema:
        s = self._work.get(Schema, id=schema_id)
        if s is None:
            raise CatalogError("3F000", f"unknown schema {schema_id}")
        return s

    def _cluster(self, cluster_id: int) -> Cluster:
        c = self._work.get(Cluster, id=cluster_id)
        if c is None:
            raise CatalogError("42704", f"unknown cluster {cluster_id}")
        return c

    def items(self) -> list[Table | Index | MaterializedView]:
        """Every table, index and materialized view (one namespace per schema)."""
        out: list[Table | Index | MaterializedView] = []
        out += self._work.objects(Table)
        out += self._work.objects(Index)
        out += self._work.objects(MaterializedView)
        return out

    def find_item(self, schema_id: int, name: str) -> Table | Index | MaterializedView | None:
        for obj in self.items():
            if obj.schema_id == schema_id and obj.name == name:
                return obj
        return None

    def find_cluster(self, name: str) -> Cluster | None:
        for c in self._work.objects(Cluster):
            if c.name == name:
                return c
        return None

    def item(self, item_id: int) -> Table | Index | MaterializedView | None:
        return (
            self._work.get(Table, id=item_id)
            or self._work.get(Index, id=item_id)
            or self._work.get(MaterializedView, id=item_id)
        )

    def _check_free(self, schema_id: int, name: str) -> None:
        self._schema(schema_id)
        if self.find_item(schema_id, name) is not None:
            raise CatalogError("42P07", f"relation {name!r} already exists")

    def _relation(self, item_id: int) -> Table | MaterializedView:
        obj = self.item(item_id)
        if not isinstance(obj, Table | MaterializedView):
            raise CatalogError("42P01", f"unknown relation {item_id}")
        return obj

    def dependents(self, item_id: int) -> list[int]:
        """Ids of the indexes and views that depend on `item_id`."""
        out = [i.id for i in self._work.objects(Index) if i.on_id == item_id]
        out += [m.id for m in self._work.objects(MaterializedView) if item_id in m.depends_on]
        return sorted(out)

    # --- DDL -----------------------------------------------------------------------------

    def create_role(self, name: str) -> Role:
        if any(r.name == name for r in self._work.objects(Role)):
            raise CatalogError("42710", f"role {name!r} already exists")
        role = Role(self.allocate_id("role"), name)
        self._work.put(role)
        return role

    def create_database(self, name: str, *, owner_id: int = 1) -> Database:
        if any(d.name == name for d in self._work.objects(Database)):
            raise CatalogError("42P04", f"database {name!r} already exists")
        db = Database(self.allocate_id("database"), name, owner_id)
        self._work.put(db)
        return db

    def create_schema(self, database_id: int | None, name: str, *, owner_id: int = 1) -> Schema:
        if database_id is not None and self._work.get(Database, id=database_id) is None:
            raise CatalogError("3D000", f"unknown database {database_id}")
        if any(s.database_id == database_id and s.name == name for s in self._work.objects(Schema)):
            raise CatalogError("42P06", f"schema {name!r} already exists")
        schema = Schema(self.allocate_id("schema"), database_id, name, owner_id)
        self._work.put(schema)
        return schema

    def create_cluster(self, name: str, *, replicas: Sequence[str] = ("1",), owner_id: int = 1) -> Cluster:
        """CREATE CLUSTER with one replica per entry of `replicas` (its size)."""
        if any(c.name == name for c in self._work.objects(Cluster)):
            raise CatalogError("42710", f"cluster {name!r} already exists")
        cluster = Cluster(self.allocate_id("cluster"), name, owner_id)
        self._work.put(cluster)
        for n, size in enumerate(replicas, 1):
            self._work.put(ClusterReplica(self.allocate_id("replica"), cluster.id, f"r{n}", size))
        return cluster

    def drop_cluster(self, cluster_id: int) -> None:
        """DROP CLUSTER: refuses while indexes or views run on it; drops its replicas."""
        cluster = self._cluster(cluster_id)
        users = [i.id for i in self._work.objects(Index) if i.cluster_id == cluster_id]
        users += [m.id for m in self._work.objects(MaterializedView) if m.cluster_id == cluster_id]
        if users:
            raise CatalogError("2BP01", f"cannot drop cluster {cluster.name!r}: objects {users} use it")
        for r in self._work.objects(ClusterReplica):
            if r.cluster_id == cluster_id:
                self._work.remove(r.KIND, r.key_json())
        self._work.remove(cluster.KIND, cluster.key_json())

    def create_table(
        self, schema_id: int, name: str, columns: Sequence[Column], *, owner_id: int = 1
    ) -> Table:
        self._check_free(schema_id, name)
        if len({c.name for c in columns}) != len(columns):
            raise CatalogError("42701", f"table {name!r}: duplicate column names")
        table = Table(self.allocate_id("item"), schema_id, name, tuple(columns), owner_id)
        self._work.put(table)
        return table

    def create_index(
        self, schema_id: int, name: str, on_id: int, keys: Sequence[str], cluster_id: int,
        *, owner_id: int = 1,
    ) -> Index:
        self._check_free(schema_id, name)
        on = self._relation(on_id)
        self._cluster(cluster_id)
        known = {c.name for c in on.columns}
        for k in keys:
            if k not in known:
                raise CatalogError("42703", f"column {k!r} of {on.name!r} does not exist")
        index = Index(self.allocate_id("item"), schema_id, name, on_id, tuple(keys), cluster_id, owner_id)
        self._work.put(index)
        return index

    def create_materialized_view(
        self, schema_id: int, name: str, definition: str, columns: Sequence[Column],
        depends_on: Sequence[int], cluster_id: int, *, owner_id: int = 1,
    ) -> MaterializedView:
        self._check_free(schema_id, name)
        self._cluster(cluster_id)
        for dep in depends_on:
            self._relation(dep)
        mv = MaterializedView(
            self.allocate_id("item"), schema_id, name, definition, tuple(columns),
            tuple(sorted(set(depends_on))), cluster_id, owner_id,
        )
        self._work.put(mv)
        return mv

    def drop_item(self, item_id: int, *, cascade: bool = False) -> list[int]:
        """DROP TABLE/INDEX/MATERIALIZED VIEW; returns every id dropped.

        Without `cascade`, refuses (2BP01) while other objects depend on it.
        """
        obj = self.item(item_id)
        if obj is None:
            raise CatalogError("42P01", f"unknown object {item_id}")
        deps = self.dependents(item_id)
        if deps and not cascade:
            raise CatalogError("2BP01", f"cannot drop {obj.name!r}: objects {deps} depend on it")
        dropped: list[int] = []
        for dep in deps:
            if self.item(dep) is not None:
                dropped += self.drop_item(dep, cascade=True)
        self._work.remove(obj.KIND, obj.key_json())
        return [*dropped, item_id]

    def set_setting(self, name: str, value: str) -> None:
        self._work.put(Setting(name, value))

    def set_config(self, name: str, value: int) -> None:
        self._work.put(Config(name, value))

    def set_timestamp(self, timeline: str, ts: int) -> None:
        self._work.put(TimestampEntry(timeline, ts))

    def set_system_configuration(self, name: str, value: str) -> None:
        self._work.put(SystemConfiguration(name, value))

    def set_system_object_mapping(self, mapping: SystemObjectMapping) -> None:
        self._work.put(mapping)


def key_of(**fields: Json) -> str:
    """The canonical key text of an object with these key fields."""
    return canonical(fields)
