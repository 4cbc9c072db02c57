"""The statements a session executes, as typed values, and client-visible errors.

Both architectures take the same statements, so a scenario runs unchanged on
either; `coordinator.sql` parses the SQL subset that scenario scripts use into
these. Errors reach clients as a SQLSTATE-style code and a message, never a
Python traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final, final

from sim.runtime.errors import CoordsimError

__all__ = [
    "DEFAULT_CLUSTER",
    "Assignment",
    "Column",
    "ColumnType",
    "Comparison",
    "CreateCluster",
    "CreateIndex",
    "CreateMaterializedView",
    "CreateTable",
    "Delete",
    "DropCluster",
    "DropIndex",
    "DropMaterializedView",
    "DropTable",
    "Insert",
    "Predicate",
    "Select",
    "SqlError",
    "SqlState",
    "Statement",
    "Subscribe",
    "Update",
    "Value",
]

#: A SQL scalar as the simulator stores it (NULL is None).
Value = int | str | bool | None

#: The cluster a statement runs on when it names none (Materialize's `quickstart`).
DEFAULT_CLUSTER: Final = "default"


class SqlState(StrEnum):
    """The SQLSTATE codes coordsim's clients see (PostgreSQL's meanings)."""

    SYNTAX_ERROR = "42601"
    UNDEFINED_TABLE = "42P01"
    UNDEFINED_OBJECT = "42704"
    DUPLICATE_TABLE = "42P07"
    DUPLICATE_OBJECT = "42710"
    DUPLICATE_COLUMN = "42701"
    DUPLICATE_DATABASE = "42P04"
    DUPLICATE_SCHEMA = "42P06"
    INVALID_SCHEMA_NAME = "3F000"
    INVALID_CATALOG_NAME = "3D000"
    UNDEFINED_COLUMN = "42703"
    DATATYPE_MISMATCH = "42804"
    INVALID_PARAMETER_VALUE = "22023"
    WRONG_OBJECT_TYPE = "42809"
    DEPENDENT_OBJECTS = "2BP01"
    SERIALIZATION_FAILURE = "40001"
    ADMIN_SHUTDOWN = "57P01"
    FEATURE_NOT_SUPPORTED = "0A000"
    INDETERMINATE = "08007"  # transaction resolution unknown
    INTERNAL = "XX000"


@final
class SqlError(CoordsimError):
    """An error a client sees: a SQLSTATE code and a one-line message."""

    def __init__(self, code: SqlState, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message


class ColumnType(StrEnum):
    INT = "int"
    TEXT = "text"
    BOOL = "bool"


@final
@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType


@final
@dataclass(frozen=True)
class Comparison:
    """`column op literal`; NULL compares false, as in SQL."""

    column: str
    op: str  # one of = <> < <= > >=
    value: Value


@final
@dataclass(frozen=True)
class Predicate:
    """A conjunction of comparisons (the `WHERE` of the subset); empty = true."""

    terms: tuple[Comparison, ...] = ()


@final
@dataclass(frozen=True)
class Assignment:
    """`SET column = literal` or `SET column = column + delta` (a read-modify-write)."""

    column: str
    value: Value = None
    add: int | None = None  # if set, the new value is the old one plus `add`


# --- DDL -----------------------------------------------------------------------


@final
@dataclass(frozen=True)
class CreateTable:
    name: str
    columns: tuple[Column, ...]
    if_not_exists: bool = False


@final
@dataclass(frozen=True)
class DropTable:
    name: str
    if_exists: bool = False


@final
@dataclass(frozen=True)
class CreateIndex:
    """An index arranges `on` (a table or view) in `cluster`; peeks use it."""

    name: str
    on: str
    columns: tuple[str, ...] = ()
    cluster: str | None = None


@final
@dataclass(frozen=True)
class DropIndex:
    name: str
    if_exists: bool = False


@final
@dataclass(frozen=True)
class CreateMaterializedView:
    name: str
    query: Select
    cluster: str | None = None


@final
@dataclass(frozen=True)
class DropMaterializedView:
    name: str
    if_exists: bool = False


@final
@dataclass(frozen=True)
class CreateCluster:
    name: str
    replicas: int = 1


@final
@dataclass(frozen=True)
class DropCluster:
    name: str
    if_exists: bool = False


# --- DML and queries -----------------------------------------------------------


@final
@dataclass(frozen=True)
class Insert:
    table: str
    rows: tuple[tuple[Value, ...], ...]
    columns: tuple[str, ...] | None = None


@final
@dataclass(frozen=True)
class Update:
    table: str
    assignments: tuple[Assignment, ...]
    where: Predicate = Predicate()


@final
@dataclass(frozen=True)
class Delete:
    table: str
    where: Predicate = Predicate()


@final
@dataclass(frozen=True)
class Select:
    """`SELECT * | cols | count(*) FROM name [WHERE …]` over a table, index or view."""

    source: str
    columns: tuple[str, ...] | None = None  # None = *
    count: bool = False
    where: Predicate = Predicate()


@final
@dataclass(frozen=True)
class SelectConstant:
    """`SELECT <constant expression> [AS name], …` with no FROM (`SELECT 1`).
    Materialize's fast path answers it from the plan: no timestamp, no oracle
    call, no peek. The expressions are folded when parsed; `names` default to
    PostgreSQL's `?column?`."""

    values: tuple[Value, ...]
    names: tuple[str, ...]


@final
@dataclass(frozen=True)
class Subscribe:
    """`SUBSCRIBE [TO] table [WITH (SNAPSHOT [=] bool, PROGRESS [=] bool)]
    [AS OF n] [UP TO n]`: the table's contents at `as_of`, then every later
    change in timestamp order, with progress (`coordinator.subscribe`).

    `as_of` None: the coordinator picks a strict-serializable one, as for a
    peek; `up_to` None: it runs until the client closes it. `snapshot=False`
    leaves the contents at `as_of` out; `progress=False` leaves out the
    batches that carry progress only (no update), as Materialize's default
    `PROGRESS = false` leaves out its progress rows."""

    table: str
    snapshot: bool = True
    progress: bool = False
    as_of: int | None = None
    up_to: int | None = None


Statement = (
    CreateTable
    | DropTable
    | CreateIndex
    | DropIndex
    | CreateMaterializedView
    | DropMaterializedView
    | CreateCluster
    | DropCluster
    | Insert
    | Update
    | Delete
    | Select
    | SelectConstant
    | Subscribe
)
