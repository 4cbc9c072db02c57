"""Catalog changes -> deterministic controller commands: one pure function for
both architectures.

Today's coordinator calls `derive` on the updates of the catalog transaction it
just committed; the decoupled adapter's per-controller task calls
`derive_event` on each event of its catalog subscription (and `derive` on the
subscription's snapshot, `CatalogState.as_updates`). Same changes, same
commands, in the same order, every time, in every Python: the output depends
only on the updates' contents, never on set or dict iteration order.

Order: times in the order given (the catalog's order); within one time the
updates are a set (a diff), so drops come first — dataflows (newest id first),
tables, replicas, clusters — then creates — clusters, replicas, tables,
dataflows (oldest id first) — which is dependency order, since catalog ids are
allocated in creation order. A retraction and an addition of the same key at
one time is a replace: nothing if the derived commands are the same (a rename),
else drop then create.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from catalog.objects import Cluster, ClusterReplica, Index, MaterializedView, Table
from controllers.commands import (
    AdvanceCatalogFrontier,
    CreateCluster,
    CreateDataflow,
    CreateReplica,
    CreateTable,
    DeterministicCommand,
    DropCluster,
    DropDataflow,
    DropReplica,
    DropTable,
    table_shard_id,
)
from controllers.transform import Transform, parse_select
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from catalog.objects import CatalogObject, CatalogUpdate

__all__ = ["derive", "derive_event", "replica_workers"]

#: Kinds that produce commands, in dependency order (creates go this way).
_RANK: Final = {
    Cluster.KIND: 0,
    ClusterReplica.KIND: 1,
    Table.KIND: 2,
    MaterializedView.KIND: 3,
    Index.KIND: 3,
}


def replica_workers(size: str) -> int:
    """Modeled cores of a replica of `size`: a plain integer size ("1", "4") is the
    worker count; named sizes are one worker (the simulator has no size table)."""
    return int(size) if size.isdigit() and int(size) >= 1 else 1


def _create(obj: CatalogObject) -> DeterministicCommand:
    if isinstance(obj, Cluster):
        return CreateCluster(obj.id)
    if isinstance(obj, ClusterReplica):
        return CreateReplica(obj.cluster_id, obj.id, replica_workers(obj.size))
    if isinstance(obj, Table):
        return CreateTable(obj.id, table_shard_id(obj.id), tuple(c.name for c in obj.columns))
    if isinstance(obj, Index):
        # An index arranges its relation whole; its key columns only matter for
        # lookups, which the simulator does not distinguish.
        return CreateDataflow(obj.id, obj.cluster_id, "index", obj.on_id, Transform())
    assert isinstance(obj, MaterializedView)
    if len(obj.depends_on) != 1:
        raise InvalidUsage(
            f"materialized view {obj.id} depends on {list(obj.depends_on)}: "
            "only single-input views are modeled"
        )
    try:
        _, transform = parse_select(obj.definition)
    except InvalidUsage as exc:
        raise InvalidUsage(f"materialized view {obj.id}: bad definition {obj.definition!r}: {exc}") from exc
    return CreateDataflow(obj.id, obj.cluster_id, "materialized-view", obj.depends_on[0], transform)


def _drop(obj: CatalogObject) -> DeterministicCommand:
    if isinstance(obj, Cluster):
        return DropCluster(obj.id)
    if isinstance(obj, ClusterReplica):
        return DropReplica(obj.cluster_id, obj.id)
    if isinstance(obj, Table):
        return DropTable(obj.id)
    assert isinstance(obj, Index | MaterializedView)
    return DropDataflow(obj.id)


def _object_id(obj: CatalogObject) -> int:
    assert isinstance(obj, Cluster | ClusterReplica | Table | Index | MaterializedView)
    return obj.id


def _one_time(updates: Sequence[CatalogUpdate]) -> list[DeterministicCommand]:
    """Commands for the updates of a single time (see the module docstring)."""
    added: dict[tuple[str, str], CatalogObject] = {}
    removed: dict[tuple[str, str], CatalogObject] = {}
    for u in updates:
        if u.kind not in _RANK:
            continue
        if u.diff not in (1, -1):
            raise InvalidUsage(f"catalog updates have diff +1 or -1, got {u.diff}")
        side = added if u.diff == 1 else removed
        if (u.kind, u.key) in side:
            raise InvalidUsage(f"{u.kind} {u.key} changes twice in one direction at {u.ts}")
        side[(u.kind, u.key)] = u.decode()
    drops: list[CatalogObject] = []
    creates: list[CatalogObject] = []
    for k, old in removed.items():
        new = added.get(k)
        if new is not None and _create(new) == _create(old):
            del added[k]  # a replace that changes nothing the controllers see
            continue
        drops.append(old)
    creates.extend(added.values())
    drops.sort(key=lambda o: (-_RANK[o.KIND], -_object_id(o), o.KIND))
    creates.sort(key=lambda o: (_RANK[o.KIND], _object_id(o), o.KIND))
    return [_drop(o) for o in drops] + [_create(o) for o in creates]


def derive(updates: Iterable[CatalogUpdate]) -> list[DeterministicCommand]:
    """The deterministic commands for catalog `updates` (any number of times, in
    the catalog's time order). Pure: no I/O, no state, no clock.

    Raises:
        InvalidUsage: inconsistent updates (a key added twice at one time, a
            diff other than ±1) or a view the simulator cannot model.
    """
    out: list[DeterministicCommand] = []
    batch: list[CatalogUpdate] = []
    for u in updates:
        if batch and u.ts != batch[0].ts:
            if u.ts < batch[0].ts:
                raise InvalidUsage(f"catalog updates out of time order: {u.ts} after {batch[0].ts}")
            out += _one_time(batch)
            batch = []
        batch.append(u)
    if batch:
        out += _one_time(batch)
    return out


def derive_event(event: object) -> list[DeterministicCommand]:
    """Commands for one event of a catalog subscription (`catalog.api.Changes`
    or `Progress`): a `Progress(upper)` becomes `AdvanceCatalogFrontier(upper)`."""
    from catalog.api import Changes, Progress

    if isinstance(event, Changes):
        return derive(event.updates)
    if isinstance(event, Progress):
        return [AdvanceCatalogFrontier(event.upper)]
    raise InvalidUsage(f"not a catalog subscription event: {event!r}")
