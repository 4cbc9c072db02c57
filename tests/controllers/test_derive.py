"""Derivation of deterministic commands from catalog changes: the mapping, its
order, and determinism (same changes -> same commands, whatever the order of
updates within one time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.api import Changes, Progress
from catalog.objects import (
    CatalogObject,
    CatalogState,
    CatalogUpdate,
    Cluster,
    ClusterReplica,
    Column,
    Index,
    MaterializedView,
    Role,
    Table,
)
from controllers.commands import (
    AdvanceCatalogFrontier,
    CreateCluster,
    CreateDataflow,
    CreateReplica,
    CreateTable,
    DropCluster,
    DropDataflow,
    DropReplica,
    DropTable,
)
from controllers.derive import derive, derive_event
from controllers.transform import Comparison, Transform
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    import random

COLS = (Column("k", "int"), Column("v", "text"))


def _table(i: int, name: str = "t") -> Table:
    return Table(i, 1, f"{name}{i}", COLS, 1)


def _mv(i: int, on: int, definition: str = "SELECT count(*) FROM t WHERE v = 'a'") -> MaterializedView:
    return MaterializedView(i, 1, f"mv{i}", definition, (Column("count", "int"),), (on,), 1, 1)


def test_each_kind_maps_to_its_command_in_dependency_order() -> None:
    state = CatalogState()
    for obj in (
        Cluster(1, "c", 1), ClusterReplica(2, 1, "r1", "4"), ClusterReplica(3, 1, "r2", "xsmall"),
        _table(10), Index(11, 1, "i", 10, ("k",), 1, 1), _mv(12, 10), Role(5, "r"),
    ):
        state.put(obj)
    # `as_updates` sorts by kind name, so "index" comes before "table".
    commands = derive(state.as_updates(7))
    assert commands == [
        CreateCluster(1),
        CreateReplica(1, 2, workers=4),
        CreateReplica(1, 3, workers=1),
        CreateTable(10, "u10", ("k", "v")),
        CreateDataflow(11, 1, "index", 10, Transform()),
        CreateDataflow(12, 1, "materialized-view", 10, Transform((Comparison("v", "=", "a"),), count=True)),
    ]
    dropped = derive([CatalogUpdate(u.kind, u.key, u.value, 8, -1) for u in state.as_updates(8)])
    assert dropped == [
        DropDataflow(12), DropDataflow(11), DropTable(10), DropReplica(1, 3), DropReplica(1, 2), DropCluster(1),
    ]


def test_replace_is_nothing_or_drop_then_create() -> None:
    old, renamed = _table(10), _table(10, "renamed")
    ups = [CatalogUpdate.of(old, 3, -1), CatalogUpdate.of(renamed, 3, 1)]
    assert derive(ups) == []
    moved = Index(11, 1, "i", 10, (), 2, 1)
    ups = [CatalogUpdate.of(Index(11, 1, "i", 10, (), 1, 1), 4, -1), CatalogUpdate.of(moved, 4, 1)]
    assert derive(ups) == [DropDataflow(11), CreateDataflow(11, 2, "index", 10, Transform())]


def test_events_and_errors() -> None:
    ups = (CatalogUpdate.of(Cluster(1, "c", 1), 5, 1),)
    assert derive_event(Changes(5, ups)) == [CreateCluster(1)]
    assert derive_event(Progress(6)) == [AdvanceCatalogFrontier(6)]
    with pytest.raises(InvalidUsage, match="out of time order"):
        derive([CatalogUpdate.of(Cluster(1, "c", 1), 5, 1), CatalogUpdate.of(Cluster(2, "d", 1), 4, 1)])
    with pytest.raises(InvalidUsage, match="bad definition"):
        derive([CatalogUpdate.of(_mv(3, 1, "SELECT FROM"), 5, 1)])
    with pytest.raises(InvalidUsage, match="single-input"):
        derive([CatalogUpdate.of(MaterializedView(3, 1, "m", "SELECT * FROM a", (), (1, 2), 1, 1), 5, 1)])


# A catalog change stream: a random walk of DDL, as (ts, updates) batches.
@st.composite
def _streams(draw: st.DrawFn) -> list[CatalogUpdate]:
    live: dict[int, CatalogObject] = {}
    out: list[CatalogUpdate] = []
    next_id = 1
    for ts in range(draw(st.integers(1, 12))):
        for _ in range(draw(st.integers(0, 4))):
            op = draw(st.sampled_from(["cluster", "replica", "table", "index", "mv", "drop", "role"]))
            tables = sorted(i for i, o in live.items() if isinstance(o, Table))
            clusters = sorted(i for i, o in live.items() if isinstance(o, Cluster))
            obj: CatalogObject
            if op == "cluster":
                obj = Cluster(next_id, f"c{next_id}", 1)
            elif op == "replica" and clusters:
                obj = ClusterReplica(next_id, draw(st.sampled_from(clusters)), "r", draw(st.sampled_from(["1", "2", "m"])))
            elif op == "table":
                obj = _table(next_id)
            elif op == "index" and tables and clusters:
                obj = Index(next_id, 1, f"i{next_id}", draw(st.sampled_from(tables)), (), draw(st.sampled_from(clusters)), 1)
            elif op == "mv" and tables and clusters:
                src = draw(st.sampled_from(tables))
                defn = draw(st.sampled_from(["SELECT * FROM t", "SELECT k FROM t WHERE v <> 'x'", "SELECT count(*) FROM t"]))
                obj = MaterializedView(next_id, 1, f"m{next_id}", defn, (), (src,), draw(st.sampled_from(clusters)), 1)
            elif op == "role":
                obj = Role(next_id, f"r{next_id}")
            elif op == "drop" and live:
                victim = draw(st.sampled_from(sorted(live)))
                out.append(CatalogUpdate.of(live.pop(victim), ts, -1))
                continue
            else:
                continue
            live[next_id] = obj
            next_id += 1
            out.append(CatalogUpdate.of(obj, ts, 1))
    return out


@given(_streams(), st.randoms(use_true_random=False))
def test_derivation_is_deterministic(updates: list[CatalogUpdate], rnd: random.Random) -> None:
    first = derive(updates)
    assert derive(list(updates)) == first
    # Within one time the updates are a set: their order must not matter.
    shuffled: list[CatalogUpdate] = []
    for ts in sorted({u.ts for u in updates}):
        batch = [u for u in updates if u.ts == ts]
        rnd.shuffle(batch)
        shuffled += batch
    assert derive(shuffled) == first
    # Splitting the stream at time boundaries (subscription batches) changes nothing.
    by_batch = [c for ts in sorted({u.ts for u in updates}) for c in derive([u for u in updates if u.ts == ts])]
    assert by_batch == first
