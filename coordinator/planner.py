"""Planning: statements resolved against one catalog snapshot, shared by both
architectures so they differ only in *when and where* work happens, never in
what a statement means.

Names live in the default schema (`materialize.public`) and clusters by name;
a SELECT on a relation with an index is served from the index's arrangement
(on the index's cluster), one on a materialized view from the view's dataflow,
and one on a bare table by a persist fast-path peek on the session's cluster.
Every client-visible failure is a `SqlError` with its SQLSTATE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from catalog.objects import Cluster, Column, Index, MaterializedView, Table
from catalog.transaction import CatalogError
from controllers.transform import Comparison as TComparison
from controllers.transform import Transform
from coordinator.statements import (
    DEFAULT_CLUSTER,
    CreateCluster,
    CreateIndex,
    CreateMaterializedView,
    CreateTable,
    Delete,
    DropCluster,
    DropIndex,
    DropMaterializedView,
    DropTable,
    Insert,
    Predicate,
    Select,
    SqlError,
    SqlState,
    Update,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from catalog.objects import CatalogState
    from catalog.transaction import Transaction
    from controllers.transform import Row, Scalar
    from coordinator.statements import Statement

__all__ = [
    "CREATES_ITEM",
    "DDL",
    "CatalogView",
    "PeekPlan",
    "ReadThenWritePlan",
    "WritePlan",
    "apply_ddl",
    "sql_error",
]

#: The schema every name resolves in (the catalog's `materialize.public`).
DEFAULT_SCHEMA_ID: Final = 1

DDL: Final = (
    CreateTable,
    DropTable,
    CreateIndex,
    DropIndex,
    CreateMaterializedView,
    DropMaterializedView,
    CreateCluster,
    DropCluster,
)

#: The DDL that creates a catalog item, for which Materialize allocates its id
#: in a durable transaction of its own first (`allocate_user_id`).
CREATES_ITEM: Final = (CreateTable, CreateIndex, CreateMaterializedView)

Relation = Table | MaterializedView


def sql_error(exc: CatalogError) -> SqlError:
    """A catalog validation error as the client sees it."""
    try:
        code = SqlState(exc.code)
    except ValueError:
        code = SqlState.INTERNAL
    return SqlError(code, str(exc))


@final
@dataclass(frozen=True, slots=True)
class PeekPlan:
    """Read `collection_id` through `transform` (on `cluster_id` for a table)."""

    collection_id: int
    cluster_id: int
    transform: Transform
    columns: tuple[str, ...]


@final
@dataclass(frozen=True, slots=True)
class WritePlan:
    """Rows (with diffs) for one table, checked against its columns."""

    table_id: int
    updates: tuple[tuple[Row, int], ...]


@final
@dataclass(frozen=True, slots=True)
class ReadThenWritePlan:
    """UPDATE/DELETE: read the matching rows at a linearized timestamp, then write
    their retractions (and replacements) through group commit."""

    table_id: int
    read: PeekPlan
    statement: Update | Delete
    columns: tuple[Column, ...]

    def diffs(self, rows: Sequence[Row]) -> tuple[tuple[Row, int], ...]:
        """The updates that turn the matching `rows` into their new versions."""
        out: list[tuple[Row, int]] = []
        names = [c.name for c in self.columns]
        for row in rows:
            out.append((row, -1))
            if isinstance(self.statement, Update):
                new = list(row)
                for a in self.statement.assignments:
                    i = names.index(a.column)
                    if a.add is None:
                        new[i] = a.value
                    else:
                        old = new[i]
                        new[i] = None if old is None else int(old) + a.add
                out.append((tuple(new), 1))
        return tuple(out)


#: SELECT plans a catalog view keeps (cleared when full).
_CACHED_PLANS = 1024


def _transform(
    where: Predicate, *, project: tuple[str, ...] | None = None, count: bool = False
) -> Transform:
    terms = tuple(TComparison(t.column, t.op, t.value) for t in where.terms)
    return Transform(terms, project, count)


@final
class CatalogView:
    """Name lookups over one catalog snapshot (built once per snapshot)."""

    def __init__(self, state: CatalogState) -> None:
        self.state = state
        self.relations: dict[str, Relation] = {}
        self.indexes: dict[str, Index] = {}
        self.indexes_on: dict[int, list[Index]] = {}
        for t in state.objects(Table):
            if t.schema_id == DEFAULT_SCHEMA_ID:
                self.relations[t.name] = t
        for m in state.objects(MaterializedView):
            if m.schema_id == DEFAULT_SCHEMA_ID:
                self.relations[m.name] = m
        for i in sorted(state.objects(Index), key=lambda i: i.id):
            if i.schema_id == DEFAULT_SCHEMA_ID:
                self.indexes[i.name] = i
            self.indexes_on.setdefault(i.on_id, []).append(i)
        self.clusters = {c.name: c for c in state.objects(Cluster)}
        # Plans of the SELECTs seen on this snapshot, by the statement object
        # (kept alive in the entry, so its id is not reused): clients send
        # the same parsed statement thousands of times (issue 20).
        self._select_plans: dict[tuple[int, str | None], tuple[Select, PeekPlan]] = {}

    # --- lookups -------------------------------------------------------------------

    def relation(self, name: str) -> Relation:
        rel = self.relations.get(name)
        if rel is None:
            raise SqlError(SqlState.UNDEFINED_TABLE, f"unknown catalog item '{name}'")
        return rel

    def table(self, name: str) -> Table:
        rel = self.relation(name)
        if not isinstance(rel, Table):
            raise SqlError(SqlState.WRONG_OBJECT_TYPE, f"'{name}' is not a table")
        return rel

    def cluster(self, name: str | None) -> Cluster:
        cluster = self.clusters.get(name or DEFAULT_CLUSTER)
        if cluster is None:
            raise SqlError(
                SqlState.UNDEFINED_OBJECT, f"unknown cluster '{name or DEFAULT_CLUSTER}'"
            )
        return cluster

    # --- queries and writes ------------------------------------------------------------

    def plan_select(self, stmt: Select, *, cluster: str | None = None) -> PeekPlan:
        known = self._select_plans.get((id(stmt), cluster))
        if known is not None and known[0] is stmt:
            return known[1]
        plan = self._plan_select(stmt, cluster)
        if len(self._select_plans) >= _CACHED_PLANS:
            self._select_plans.clear()
        self._select_plans[id(stmt), cluster] = (stmt, plan)
        return plan

    def _plan_select(self, stmt: Select, cluster: str | None) -> PeekPlan:
        rel = self.relation(stmt.source)
        names = tuple(c.name for c in rel.columns)
        for name in [*(stmt.columns or ()), *(t.column for t in stmt.where.terms)]:
            if name not in names:
                raise SqlError(
                    SqlState.UNDEFINED_COLUMN, f"column '{name}' does not exist in '{stmt.source}'"
                )
        transform = _transform(stmt.where, project=stmt.columns, count=stmt.count)
        columns = transform.output_columns(names)
        indexes = self.indexes_on.get(rel.id)
        if indexes:
            index = indexes[0]
            return PeekPlan(index.id, index.cluster_id, transform, columns)
        if isinstance(rel, MaterializedView):
            return PeekPlan(rel.id, rel.cluster_id, transform, columns)
        return PeekPlan(rel.id, self.cluster(cluster).id, transform, columns)

    def plan_insert(self, stmt: Insert) -> WritePlan:
        table = self.table(stmt.table)
        names = [c.name for c in table.columns]
        order = list(stmt.columns) if stmt.columns is not None else names
        for name in order:
            if name not in names:
                raise SqlError(
                    SqlState.UNDEFINED_COLUMN, f"column '{name}' of '{stmt.table}' does not exist"
                )
        if len(set(order)) != len(order):
            raise SqlError(SqlState.SYNTAX_ERROR, "column specified more than once")
        rows: list[tuple[Row, int]] = []
        for values in stmt.rows:
            if len(values) != len(order):
                raise SqlError(
                    SqlState.SYNTAX_ERROR,
                    f"INSERT has {len(values)} expressions but {len(order)} target columns",
                )
            given = dict(zip(order, values, strict=True))
            row = tuple(given.get(c.name) for c in table.columns)
            _check_row(table.columns, row)
            rows.append((row, 1))
        return WritePlan(table.id, tuple(rows))

    def plan_read_then_write(
        self, stmt: Update | Delete, *, cluster: str | None = None
    ) -> ReadThenWritePlan:
        table = self.table(stmt.table)
        names = [c.name for c in table.columns]
        assigned = [a.column for a in stmt.assignments] if isinstance(stmt, Update) else []
        for name in [*assigned, *(t.column for t in stmt.where.terms)]:
            if name not in names:
                raise SqlError(
                    SqlState.UNDEFINED_COLUMN, f"column '{name}' of '{stmt.table}' does not exist"
                )
        if isinstance(stmt, Update):
            types = {c.name: c.type for c in table.columns}
            for a in stmt.assignments:
                if a.add is not None and types[a.column] != "int":
                    raise SqlError(
                        SqlState.DATATYPE_MISMATCH, f"column '{a.column}' is not an integer"
                    )
                if a.add is None:
                    _check_value(next(c for c in table.columns if c.name == a.column), a.value)
        read = PeekPlan(table.id, self.cluster(cluster).id, _transform(stmt.where), tuple(names))
        return ReadThenWritePlan(table.id, read, stmt, table.columns)


def _check_value(column: Column, value: Scalar) -> None:
    if value is None:
        if not column.nullable:
            raise SqlError(SqlState.DATATYPE_MISMATCH, f"null value in column '{column.name}'")
        return
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "text": isinstance(value, str),
        "bool": isinstance(value, bool),
    }.get(column.type, False)
    if not ok:
        raise SqlError(
            SqlState.DATATYPE_MISMATCH,
            f"column '{column.name}' is of type {column.type}, got {value!r}",
        )


def _check_row(columns: Sequence[Column], row: Row) -> None:
    for column, value in zip(columns, row, strict=True):
        _check_value(column, value)


# --- DDL ---------------------------------------------------------------------------------


def apply_ddl(tx: Transaction, view: CatalogView, stmt: Statement) -> None:
    """Applies one DDL statement to a catalog transaction (nothing durable yet).

    Raises:
        SqlError: the statement is invalid against the snapshot.
    """
    try:
        _apply_ddl(tx, view, stmt)
    except CatalogError as exc:
        raise sql_error(exc) from exc


def _apply_ddl(tx: Transaction, view: CatalogView, stmt: Statement) -> None:
    match stmt:
        case CreateTable(name, columns, if_not_exists):
            if if_not_exists and name in view.relations:
                return
            tx.create_table(
                DEFAULT_SCHEMA_ID, name, [Column(c.name, c.type.value) for c in columns]
            )
        case DropTable(name, if_exists):
            if if_exists and name not in view.relations:
                return
            tx.drop_item(view.table(name).id)
        case CreateIndex(name, on, keys, cluster):
            tx.create_index(
                DEFAULT_SCHEMA_ID, name, view.relation(on).id, keys, view.cluster(cluster).id
            )
        case DropIndex(name, if_exists):
            index = view.indexes.get(name)
            if index is None:
                if if_exists:
                    return
                raise SqlError(SqlState.UNDEFINED_OBJECT, f"unknown index '{name}'")
            tx.drop_item(index.id)
        case CreateMaterializedView(name, query, cluster):
            source = view.relation(query.source)
            if not isinstance(source, Table):
                raise SqlError(
                    SqlState.FEATURE_NOT_SUPPORTED, "a materialized view must read a table directly"
                )
            plan = view.plan_select(query)
            definition = plan.transform.to_sql(query.source)
            types = {c.name: c for c in source.columns}
            out = (
                [Column("count", "int", False)] if query.count else [types[c] for c in plan.columns]
            )
            tx.create_materialized_view(
                DEFAULT_SCHEMA_ID, name, definition, out, [source.id], view.cluster(cluster).id
            )
        case DropMaterializedView(name, if_exists):
            mv = view.relations.get(name)
            if mv is None and if_exists:
                return
            if not isinstance(mv, MaterializedView):
                raise SqlError(SqlState.UNDEFINED_TABLE, f"unknown materialized view '{name}'")
            tx.drop_item(mv.id)
        case CreateCluster(name, replicas):
            tx.create_cluster(name, replicas=["1"] * replicas)
        case DropCluster(name, if_exists):
            if if_exists and name not in view.clusters:
                return
            tx.drop_cluster(view.cluster(name).id)
        case _:
            raise SqlError(SqlState.INTERNAL, f"not a DDL statement: {type(stmt).__name__}")
