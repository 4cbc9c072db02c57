"""The catalog's object types and their stable encoding (seed 004's objects).

Every object is a frozen dataclass of one *kind*; it encodes to a canonical JSON
key and a canonical JSON value (sorted keys, no spaces, ASCII), so the same
object always has the same bytes, in every backend and every Python. The
catalog's format version (`FORMAT_VERSION`, stored as config `version`) names
the shape of those JSON values; older shapes are rewritten by `catalog.migrations`.

`CatalogState` is the raw in-memory catalog: `(kind, key JSON) -> value JSON`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Final, NamedTuple, Self, TypeAlias, TypeVar, final

from sim.runtime.errors import InvalidUsage

if typing.TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "FORMAT_VERSION",
    "KINDS",
    "CatalogObject",
    "CatalogState",
    "CatalogUpdate",
    "Cluster",
    "ClusterReplica",
    "Column",
    "Config",
    "Database",
    "IdAllocator",
    "Index",
    "MaterializedView",
    "RawKey",
    "Role",
    "Schema",
    "Setting",
    "SystemConfiguration",
    "SystemObjectMapping",
    "Table",
    "TimestampEntry",
    "canonical",
    "decode_object",
    "parse_json",
]

#: The format version this code reads and writes (config `version`).
FORMAT_VERSION: Final = 3

Json: TypeAlias = Any
#: `(kind, canonical key JSON)`: the identity of a catalog entry.
RawKey: TypeAlias = tuple[str, str]

T = TypeVar("T", bound="CatalogObject")


def canonical(value: Json) -> str:
    """The stable text of a JSON value: sorted keys, no whitespace, ASCII only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def parse_json(text: str, what: str) -> Json:
    """Parses `text`; malformed JSON is `InvalidUsage` naming `what`."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise InvalidUsage(f"{what} is not valid JSON: {exc}") from exc


@final
@dataclass(frozen=True, slots=True)
class Column:
    """A table or view column."""

    name: str
    type: str
    nullable: bool = True


class CatalogObject:
    """Base of every catalog object: a frozen dataclass whose first `KEY` fields
    form its key; the other fields are its value."""

    KIND: ClassVar[str]
    KEY: ClassVar[tuple[str, ...]] = ("id",)

    def key_json(self) -> str:
        return canonical({n: _to_json(getattr(self, n)) for n in self.KEY})

    def value_json(self) -> str:
        return canonical(
            {f.name: _to_json(getattr(self, f.name)) for f in _fields(type(self)) if f.name not in self.KEY}
        )

    def raw_key(self) -> RawKey:
        return (self.KIND, self.key_json())

    @classmethod
    def decode(cls, key: str, value: str) -> Self:
        """The object whose encoding is `(key, value)`; anything else (a missing,
        extra or mistyped field) is `InvalidUsage`."""
        k = parse_json(key, f"{cls.KIND} key")
        v = parse_json(value, f"{cls.KIND} value")
        if not isinstance(k, dict) or sorted(k) != sorted(cls.KEY):
            raise InvalidUsage(f"{cls.KIND} key must be an object with fields {list(cls.KEY)}, got {key}")
        if not isinstance(v, dict):
            raise InvalidUsage(f"{cls.KIND} value must be a JSON object, got {value}")
        hints, names, value_names = _schema(typing.cast("Any", cls))
        if sorted(v) != sorted(value_names):
            raise InvalidUsage(f"{cls.KIND} value must have fields {value_names}, got {sorted(v)}")
        merged = {**k, **v}
        args = {n: _from_json(merged[n], hints[n], f"{cls.KIND}.{n}") for n in names}
        return cls(**args)


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


def _decoded(cls: type[T], key: str, value: str) -> T:
    """`cls.decode(key, value)`, memoized: objects are frozen, and every
    catalog view decodes the whole snapshot again (a failed decode raises
    each time; the cache keeps only results)."""
    return typing.cast("T", _decode_memo(typing.cast("Any", cls), key, value))


@functools.lru_cache(maxsize=1 << 16)
def _decode_memo(cls: Any, key: str, value: str) -> Any:
    return cls.decode(key, value)


@functools.cache
def _schema(cls: Any) -> tuple[dict[str, Any], list[str], list[str]]:
    """(type hints, field names, value field names) of an object class, once
    per class: `typing.get_type_hints` re-evaluates every annotation string on
    each call, and decoding a catalog snapshot called it per object (a sixth
    of an anomaly run's time, issue 20)."""
    names = [f.name for f in _fields(cls)]
    return typing.get_type_hints(cls), names, [n for n in names if n not in cls.KEY]


def _to_json(value: Any) -> Json:
    if isinstance(value, Column):
        return {"name": value.name, "type": value.type, "nullable": value.nullable}
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    return value


def _from_json(value: Json, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _from_json(value, inner, where)
    if origin is tuple:
        (inner, _) = typing.get_args(hint)
        if not isinstance(value, list):
            raise InvalidUsage(f"{where} must be a list, got {value!r}")
        return tuple(_from_json(v, inner, f"{where}[]") for v in value)
    if hint is Column:
        if not isinstance(value, dict) or sorted(value) != ["name", "nullable", "type"]:
            raise InvalidUsage(f"{where} must be {{name, type, nullable}}, got {value!r}")
        return Column(
            _from_json(value["name"], str, f"{where}.name"),
            _from_json(value["type"], str, f"{where}.type"),
            _from_json(value["nullable"], bool, f"{where}.nullable"),
        )
    if hint is bool:
        if not isinstance(value, bool):
            raise InvalidUsage(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidUsage(f"{where} must be an integer, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise InvalidUsage(f"{where} must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported field type {hint!r} at {where}")  # a bug in this module


# --- the kinds ---------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Cluster(CatalogObject):
    KIND: ClassVar[str] = "cluster"
    id: int
    name: str
    owner_id: int


@final
@dataclass(frozen=True, slots=True)
class ClusterReplica(CatalogObject):
    KIND: ClassVar[str] = "cluster_replica"
    id: int
    cluster_id: int
    name: str
    size: str


@final
@dataclass(frozen=True, slots=True)
class Database(CatalogObject):
    KIND: ClassVar[str] = "database"
    id: int
    name: str
    owner_id: int


@final
@dataclass(frozen=True, slots=True)
class Schema(CatalogObject):
    KIND: ClassVar[str] = "schema"
    id: int
    database_id: int | None
    name: str
    owner_id: int


@final
@dataclass(frozen=True, slots=True)
class Role(CatalogObject):
    KIND: ClassVar[str] = "role"
    id: int
    name: str


@final
@dataclass(frozen=True, slots=True)
class Table(CatalogObject):
    KIND: ClassVar[str] = "table"
    id: int
    schema_id: int
    name: str
    columns: tuple[Column, ...]
    owner_id: int


@final
@dataclass(frozen=True, slots=True)
class Index(CatalogObject):
    KIND: ClassVar[str] = "index"
    id: int
    schema_id: int
    name: str
    on_id: int
    keys: tuple[str, ...]
    cluster_id: int
    owner_id: int


@final
@dataclass(frozen=True, slots=True)
class MaterializedView(CatalogObject):
    KIND: ClassVar[str] = "materialized_view"
    id: int
    schema_id: int
    name: str
    definition: str
    columns: tuple[Column, ...]
    depends_on: tuple[int, ...]
    cluster_id: int
    owner_id: int


@final
@dataclass(frozen=True, slots=True)
class IdAllocator(CatalogObject):
    """The next id to hand out in one id space (`item`, `cluster`, ...)."""

    KIND: ClassVar[str] = "id_allocator"
    KEY: ClassVar[tuple[str, ...]] = ("name",)
    name: str
    next_id: int


@final
@dataclass(frozen=True, slots=True)
class Config(CatalogObject):
    """Misc integers: `epoch`, `deploy_generation`, `version` (the format version)."""

    KIND: ClassVar[str] = "config"
    KEY: ClassVar[tuple[str, ...]] = ("name",)
    name: str
    value: int


@final
@dataclass(frozen=True, slots=True)
class Setting(CatalogObject):
    """Named string settings, e.g. `catalog_content_version`."""

    KIND: ClassVar[str] = "setting"
    KEY: ClassVar[tuple[str, ...]] = ("name",)
    name: str
    value: str


@final
@dataclass(frozen=True, slots=True)
class TimestampEntry(CatalogObject):
    """A timestamp oracle's persisted value for one timeline."""

    KIND: ClassVar[str] = "timestamp"
    KEY: ClassVar[tuple[str, ...]] = ("timeline",)
    timeline: str
    ts: int


@final
@dataclass(frozen=True, slots=True)
class SystemConfiguration(CatalogObject):
    """A system variable set by the operator (e.g. `max_tables`)."""

    KIND: ClassVar[str] = "system_configuration"
    KEY: ClassVar[tuple[str, ...]] = ("name",)
    name: str
    value: str


@final
@dataclass(frozen=True, slots=True)
class SystemObjectMapping(CatalogObject):
    """Which id and fingerprint a builtin (system) object has (seed 004's
    `set_system_object_mapping`)."""

    KIND: ClassVar[str] = "system_object_mapping"
    KEY: ClassVar[tuple[str, ...]] = ("schema_name", "object_type", "object_name")
    schema_name: str
    object_type: str
    object_name: str
    id: int
    fingerprint: str


#: Every kind, by name, in dump order.
KINDS: Final[dict[str, type[CatalogObject]]] = {
    c.KIND: c
    for c in (
        Config, Setting, IdAllocator, Role, Cluster, ClusterReplica, Database, Schema,
        Table, Index, MaterializedView, TimestampEntry, SystemConfiguration, SystemObjectMapping,
    )
}


def kind_class(kind: str) -> type[CatalogObject]:
    cls = KINDS.get(kind)
    if cls is None:
        raise InvalidUsage(f"unknown object kind {kind!r} (kinds: {', '.join(KINDS)})")
    return cls


def decode_object(kind: str, key: str, value: str) -> CatalogObject:
    """Decodes one entry of the current format version."""
    return kind_class(kind).decode(key, value)


def config_key(name: str) -> str:
    return canonical({"name": name})


# --- updates and state -------------------------------------------------------------------


class CatalogUpdate(NamedTuple):
    """One change of the catalog pTVC: `diff` (+1/-1) of entry `(kind, key) -> value`
    at time `ts`; key and value are canonical JSON."""

    kind: str
    key: str
    value: str
    ts: int
    diff: int

    def decode(self) -> CatalogObject:
        return decode_object(self.kind, self.key, self.value)

    @classmethod
    def of(cls, obj: CatalogObject, ts: int, diff: int) -> CatalogUpdate:
        return cls(obj.KIND, obj.key_json(), obj.value_json(), ts, diff)


@final
class CatalogState:
    """The catalog's contents at one time: `(kind, key) -> value`, raw JSON text.

    Applying updates checks consistency: a retraction must remove exactly the
    current value, an addition must find the key free (one value per key).
    """

    def __init__(self, entries: Mapping[RawKey, str] | None = None) -> None:
        self.entries: dict[RawKey, str] = dict(entries or {})

    def copy(self) -> CatalogState:
        return CatalogState(self.entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CatalogState) and self.entries == other.entries

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CatalogState({len(self.entries)} entries)"

    def apply(self, updates: Iterable[CatalogUpdate]) -> None:
        """Applies updates (retractions first, so a replace at one time works)."""
        for u in sorted(updates, key=lambda u: (u.ts, u.diff, u.kind, u.key, u.value)):
            k = (u.kind, u.key)
            if u.diff == -1:
                if self.entries.get(k) != u.value:
                    raise InvalidUsage(f"inconsistent retraction of {u.kind} {u.key} at {u.ts}")
                del self.entries[k]
            elif u.diff == 1:
                if k in self.entries:
                    raise InvalidUsage(f"{u.kind} {u.key} added twice at {u.ts}")
                self.entries[k] = u.value
            else:
                raise InvalidUsage(f"catalog updates have diff +1 or -1, got {u.diff}")

    def diff(self, base: CatalogState, ts: int) -> list[CatalogUpdate]:
        """The updates at `ts` that turn `base` into this state, sorted."""
        out: list[CatalogUpdate] = []
        for k in sorted(base.entries.keys() | self.entries.keys()):
            old, new = base.entries.get(k), self.entries.get(k)
            if old == new:
                continue
            if old is not None:
                out.append(CatalogUpdate(k[0], k[1], old, ts, -1))
            if new is not None:
                out.append(CatalogUpdate(k[0], k[1], new, ts, 1))
        return out

    def as_updates(self, ts: int) -> list[CatalogUpdate]:
        return [CatalogUpdate(k, key, v, ts, 1) for (k, key), v in sorted(self.entries.items())]

    # Decoded access.

    def objects(self, cls: type[T]) -> list[T]:
        """Every object of `cls`'s kind, sorted by key."""
        out = [
            _decoded(cls, key, value) for (kind, key), value in sorted(self.entries.items()) if kind == cls.KIND
        ]
        if cls.KEY == ("id",):
            out.sort(key=operator.attrgetter("id"))
        return out

    def get(self, cls: type[T], **key: Json) -> T | None:
        value = self.entries.get((cls.KIND, canonical(key)))
        return None if value is None else _decoded(cls, canonical(key), value)

    def config(self, name: str) -> int | None:
        raw = self.entries.get(("config", config_key(name)))
        if raw is None:
            return None
        value = parse_json(raw, f"config {name}")
        v = value.get("value") if isinstance(value, dict) else None
        if not isinstance(v, int) or isinstance(v, bool):
            raise InvalidUsage(f"config {name} holds {raw}, not {{\"value\": <int>}}")
        return v

    def put(self, obj: CatalogObject) -> None:
        self.entries[obj.raw_key()] = obj.value_json()

    def remove(self, kind: str, key: str) -> bool:
        return self.entries.pop((kind, key), None) is not None

    def to_json(self) -> dict[str, list[dict[str, Json]]]:
        """`{kind: [{"key": …, "value": …}, …]}`, kinds and keys sorted."""
        out: dict[str, list[dict[str, Json]]] = {}
        for (kind, key), value in sorted(self.entries.items()):
            out.setdefault(kind, []).append({"key": json.loads(key), "value": json.loads(value)})
        return out
