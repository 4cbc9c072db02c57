"""Format migrations: registered upgrade steps from each older format version to
`FORMAT_VERSION`, and the builtin objects a new catalog starts with.

Steps rewrite the raw JSON state in memory (old shapes cannot be decoded by
today's dataclasses); `DurableCatalog.open` writes their result in the same
compare-and-append that bumps the epoch, so a migration commits at most once;
`check_open` and `coordsim catalog upgrade-check` run them and write nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

from catalog.objects import (
    FORMAT_VERSION,
    KINDS,
    CatalogState,
    Cluster,
    ClusterReplica,
    Config,
    Database,
    IdAllocator,
    Role,
    Schema,
    Setting,
    canonical,
    parse_json,
)
from sim.runtime.errors import CoordsimError

__all__ = [
    "MIN_SUPPORTED_VERSION",
    "STEPS",
    "MigrationError",
    "MigrationPlan",
    "initial_state",
    "legacy_state",
    "migrate",
]

#: The oldest format version this code can upgrade.
MIN_SUPPORTED_VERSION: Final = 1

#: The content version written by this binary (seed 004's `catalog_content_version`).
CONTENT_VERSION: Final = "coordsim-0.1"


class MigrationError(CoordsimError):
    """The catalog cannot be upgraded to this binary's format version."""


Step = Callable[[CatalogState], None]


def _v1_to_v2(state: CatalogState) -> None:
    """Columns gain `nullable` (true: v1 had no NOT NULL)."""
    for (kind, key), raw in list(state.entries.items()):
        if kind not in ("table", "materialized_view"):
            continue
        value = parse_json(raw, f"{kind} {key}")
        cols = value.get("columns")
        if not isinstance(cols, list):
            raise MigrationError(f"v1 {kind} {key} has no columns list")
        value["columns"] = [{**c, "nullable": c.get("nullable", True)} for c in cols]
        state.entries[(kind, key)] = canonical(value)


def _v2_to_v3(state: CatalogState) -> None:
    """Replicas: `size_name` is renamed `size`."""
    for (kind, key), raw in list(state.entries.items()):
        if kind != "cluster_replica":
            continue
        value = parse_json(raw, f"{kind} {key}")
        if "size_name" not in value:
            raise MigrationError(f"v2 cluster_replica {key} has no size_name")
        value["size"] = value.pop("size_name")
        state.entries[(kind, key)] = canonical(value)


#: `STEPS[v]` upgrades format version `v` to `v + 1`.
STEPS: Final[dict[int, tuple[str, Step]]] = {
    1: ("v1->v2: add column nullability", _v1_to_v2),
    2: ("v2->v3: rename replica size_name to size", _v2_to_v3),
}
assert sorted(STEPS) == list(range(MIN_SUPPORTED_VERSION, FORMAT_VERSION))


@final
@dataclass(frozen=True)
class MigrationPlan:
    """What `migrate` did: `state` is the upgraded catalog (version set)."""

    from_version: int
    to_version: int
    steps: tuple[str, ...]
    state: CatalogState


def migrate(state: CatalogState, *, replica_sizes: frozenset[str] | None = None) -> MigrationPlan:
    """Upgrades a copy of `state` to `FORMAT_VERSION` and validates the result.

    Args:
        replica_sizes: if given, every replica's size must be one of these.

    Raises:
        MigrationError: no version, a version newer than this binary or older
            than `MIN_SUPPORTED_VERSION`, a failing step, or an invalid result.
    """
    version = state.config("version")
    if version is None:
        raise MigrationError("the catalog has no config `version`")
    if version > FORMAT_VERSION:
        raise MigrationError(f"catalog format version {version} is newer than this binary's {FORMAT_VERSION}")
    if version < MIN_SUPPORTED_VERSION:
        raise MigrationError(
            f"catalog format version {version} is older than the oldest upgradable {MIN_SUPPORTED_VERSION}"
        )
    work = state.copy()
    steps: list[str] = []
    for v in range(version, FORMAT_VERSION):
        name, step = STEPS[v]
        step(work)
        steps.append(name)
    work.put(Config("version", FORMAT_VERSION))
    # Everything must decode in the current format.
    for (kind, key), value in sorted(work.entries.items()):
        cls = KINDS.get(kind)
        if cls is None:
            raise MigrationError(f"unknown object kind {kind!r} in the catalog")
        try:
            cls.decode(key, value)
        except CoordsimError as exc:
            raise MigrationError(f"after migration, {kind} {key} does not decode: {exc}") from exc
    if replica_sizes is not None:
        for r in work.objects(ClusterReplica):
            if r.size not in replica_sizes:
                raise MigrationError(
                    f"replica {r.name!r} of cluster {r.cluster_id} has size {r.size!r}, "
                    f"not one of {sorted(replica_sizes)}"
                )
    return MigrationPlan(version, FORMAT_VERSION, tuple(steps), work)


def initial_state(*, epoch: int = 1) -> CatalogState:
    """The builtin objects of a new catalog in the current format."""
    s = CatalogState()
    for obj in (
        Config("version", FORMAT_VERSION),
        Config("epoch", epoch),
        Config("deploy_generation", 0),
        Setting("catalog_content_version", CONTENT_VERSION),
        Role(1, "mz_system"),
        Role(2, "materialize"),
        Cluster(1, "default", 1),
        ClusterReplica(1, 1, "r1", "1"),
        Database(1, "materialize", 2),
        Schema(1, 1, "public", 2),
        Schema(2, None, "mz_catalog", 1),
    ):
        s.put(obj)
    for space, next_id in (
        ("cluster", 2), ("database", 2), ("item", 1), ("replica", 2), ("role", 3), ("schema", 3),
    ):
        s.put(IdAllocator(space, next_id))
    return s


def legacy_state(version: int, *, epoch: int = 1) -> CatalogState:
    """A catalog as an older binary of format `version` would have written it,
    with one table (to exercise the column migration). For tests and the debug
    tool's upgrade check; `version` below 1 gives an unsupported catalog."""
    s = initial_state(epoch=epoch)
    s.put(Config("version", version))
    s.put(IdAllocator("item", 2))
    cols: list[dict[str, object]] = [{"name": "a", "type": "int"}, {"name": "b", "type": "text"}]
    if version >= 2:
        cols = [{**c, "nullable": True} for c in cols]
    s.entries[("table", canonical({"id": 1}))] = canonical(
        {"schema_id": 1, "name": "legacy", "columns": cols, "owner_id": 2}
    )
    if version < 3:
        for (kind, key), raw in list(s.entries.items()):
            if kind == "cluster_replica":
                value = json.loads(raw)
                value["size_name"] = value.pop("size")
                s.entries[(kind, key)] = canonical(value)
    return s
