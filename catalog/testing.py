"""The conformance suite of `DurableCatalog`, run on every implementation.

Pytest-free: `await check_catalog(new_location)` where `new_location()` returns a
fresh, empty location as an `OpenCatalog` — a callable giving a new handle on
that location each time it is entered (a new "process": its own client,
connections and cache). Every check works on its own fresh location, so runs
never interfere, even on a shared server.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, TypeAlias

import anyio

from catalog.api import (
    Appended,
    BelowSince,
    CatalogNotReady,
    Changes,
    Conflict,
    DurableCatalog,
    Progress,
)
from catalog.migrations import MigrationError, legacy_state
from catalog.objects import (
    FORMAT_VERSION,
    CatalogState,
    CatalogUpdate,
    Column,
    SystemObjectMapping,
    Table,
    canonical,
)
from catalog.transaction import CatalogError
from sim.runtime.conformance import ConformanceFailure, expect
from sim.runtime.errors import Fenced, InvalidUsage

if TYPE_CHECKING:
    from catalog.api import Subscription

__all__ = [
    "ConformanceFailure",
    "NewLocation",
    "OpenCatalog",
    "check_catalog",
    "collect_events",
    "create_table",
    "drop_item",
]

#: Enter it to get a new, unopened handle on one location.
OpenCatalog: TypeAlias = Callable[[], AbstractAsyncContextManager[DurableCatalog]]
#: A fresh, empty location each call.
NewLocation: TypeAlias = Callable[[], OpenCatalog]




async def _raises(exc: type[BaseException], what: str, call: Callable[[], Awaitable[object]]) -> BaseException:
    try:
        await call()
    except exc as e:
        return e
    raise ConformanceFailure(f"{what}: expected {exc.__name__}")


def _sync_raises(exc: type[BaseException], what: str, call: Callable[[], object]) -> None:
    try:
        call()
    except exc:
        return
    raise ConformanceFailure(f"{what}: expected {exc.__name__}")


COLUMNS = (Column("a", "int", False), Column("b", "text"))


async def create_table(catalog: DurableCatalog, name: str, *, commit_ts: int | None = None) -> Table | None:
    """CREATE TABLE public.`name` in one transaction; None on `Conflict`."""
    tx = catalog.transaction()
    table = tx.create_table(1, name, COLUMNS)
    result = await catalog.commit_transaction(tx, commit_ts=commit_ts)
    return table if isinstance(result, Appended) else None


async def drop_item(catalog: DurableCatalog, item_id: int) -> bool:
    """DROP … CASCADE in one transaction; False on `Conflict`."""
    tx = catalog.transaction()
    tx.drop_item(item_id, cascade=True)
    return isinstance(await catalog.commit_transaction(tx), Appended)


async def collect_events(sub: Subscription, until: int) -> list[Changes | Progress]:
    """Events of `sub` up to and including the first `Progress` at or past `until`."""
    out: list[Changes | Progress] = []
    async for event in sub:
        out.append(event)
        if isinstance(event, Progress) and event.upper >= until:
            break
    return out


def _state_without_epoch(state: CatalogState) -> dict[tuple[str, str], str]:
    """The state minus what each open rewrites (epoch, deploy generation)."""
    skip = {("config", canonical({"name": n})) for n in ("epoch", "deploy_generation")}
    return {k: v for k, v in state.entries.items() if k not in skip}


async def check_catalog(new_location: NewLocation, *, concurrent_openers: bool = True) -> None:
    """Runs every check, each on a fresh location.

    Args:
        concurrent_openers: also check handles opening concurrently (epochs
            unique, one creator). Off for `ShadowCatalog`, whose two stores may
            order racing openers differently (which it rightly reports).

    Raises:
        ConformanceFailure: naming the first broken promise.
    """
    checks = [
        _lifecycle,
        _transactions,
        _restart,
        _fencing,
        _read_only,
        _concurrent_open,
        _ptvc,
        _since,
        _migration,
        _unsupported_version,
        _misuse,
    ]
    if not concurrent_openers:
        checks.remove(_concurrent_open)
    for check in checks:
        try:
            await check(new_location())
        except ConformanceFailure as exc:
            raise ConformanceFailure(f"{check.__name__.strip('_')}: {exc}") from exc


async def _lifecycle(location: OpenCatalog) -> None:
    async with location() as c:
        expect(not await c.is_initialized(), "a fresh catalog is not initialized")
        expect(await c.fetch_upper() == 0, "a fresh catalog's upper is 0")
        expect(c.epoch() is None, "epoch() is None before open")
        expect(await c.get_deploy_generation() is None, "no deploy generation before init")
        check = await c.check_open()
        expect(not check.initialized and check.steps == (), f"check_open on a fresh catalog: {check}")
        expect(await c.fetch_upper() == 0, "check_open writes nothing")
        await _raises(CatalogNotReady, "open_read_only on a fresh catalog", c.open_read_only)
        _sync_raises(InvalidUsage, "get_tables before open", c.get_tables)
        _sync_raises(InvalidUsage, "transaction before open", c.transaction)
        report = await c.open()
        expect(report.epoch == 1 and report.created and report.steps == (), f"first open: {report}")
        expect(c.epoch() == 1, "the first opener holds epoch 1")
        expect(await c.is_initialized(), "initialized after open")
        config = c.get_config()
        expect(config.get("version") == FORMAT_VERSION and config.get("epoch") == 1, f"config {config}")
        expect(await c.get_deploy_generation() == 0, "deploy generation 0")
        expect([d.name for d in c.get_databases()] == ["materialize"], "builtin database")
        expect([s.name for s in c.get_schemas()] == ["public", "mz_catalog"], "builtin schemas")
        expect([cl.name for cl in c.get_clusters()] == ["default"], "builtin cluster")
        expect(len(c.get_cluster_replicas()) == 1 and len(c.get_roles()) == 2, "builtin replica and roles")
        expect(c.get_settings().get("catalog_content_version") is not None, "content version setting")
        dump = json.loads(c.dump())
        expect(dump.get("config") and dump.get("cluster"), "dump is JSON by kind")
        await c.confirm_leadership()
        await _raises(InvalidUsage, "open twice", c.open)
        expect(await c.sync() == c.cached_upper == await c.fetch_upper(), "sync reaches the upper")


async def _transactions(location: OpenCatalog) -> None:
    async with location() as c:
        await c.open()
        upper0 = c.cached_upper
        tx = c.transaction()
        role = tx.create_role("alice")
        db = tx.create_database("db2", owner_id=role.id)
        schema = tx.create_schema(db.id, "s")
        cluster = tx.create_cluster("c2", replicas=("1", "2"))
        table = tx.create_table(schema.id, "t", COLUMNS)
        index = tx.create_index(schema.id, "t_idx", table.id, ["a"], cluster.id)
        mv = tx.create_materialized_view(
            schema.id, "mv", "SELECT a FROM t", (Column("a", "int", False),), [table.id], cluster.id
        )
        expect(len({table.id, index.id, mv.id}) == 3, "item ids are unique")
        result = await c.commit_transaction(tx)
        expect(result == Appended(upper0 + 1), f"commit without oracle appends at the upper: {result}")
        expect(c.cached_upper == upper0 + 1, "the cache moved past the commit")
        expect([t.name for t in c.get_tables()] == ["t"], "table visible")
        expect([i.name for i in c.get_indexes()] == ["t_idx"], "index visible")
        expect([m.depends_on for m in c.get_materialized_views()] == [(table.id,)], "view visible")
        expect(len(c.get_cluster_replicas()) == 3, "replicas created with the cluster")
        tx = c.transaction()
        for what, code, call in (
            ("duplicate name", "42P07", lambda: tx.create_table(schema.id, "t", COLUMNS)),
            ("unknown column", "42703", lambda: tx.create_index(schema.id, "i2", table.id, ["zz"], cluster.id)),
            ("dependents", "2BP01", lambda: tx.drop_item(table.id)),
            ("cluster in use", "2BP01", lambda: tx.drop_cluster(cluster.id)),
            ("unknown item", "42P01", lambda: tx.drop_item(10_000)),
        ):
            try:
                call()
            except CatalogError as exc:
                expect(exc.code == code, f"{what}: SQLSTATE {exc.code}, expected {code}")
            else:
                raise ConformanceFailure(f"{what}: expected CatalogError {code}")
        dropped = tx.drop_item(table.id, cascade=True)
        expect(sorted(dropped) == sorted([table.id, index.id, mv.id]), f"cascade dropped {dropped}")
        tx.drop_cluster(cluster.id)
        # Two transactions planned on the same state: only the first commits.
        stale = c.transaction()
        stale.create_table(schema.id, "other", COLUMNS)
        expect(isinstance(await c.commit_transaction(tx), Appended), "drop commits")
        before = c.state()
        result = await c.commit_transaction(stale)
        expect(result == Conflict(c.cached_upper), f"a stale transaction conflicts: {result}")
        expect(c.state() == before, "a conflicting commit writes nothing")
        expect(c.get_tables() == [] and len(c.get_cluster_replicas()) == 1, "drops applied")
        # An explicit commit timestamp (the decoupled path) sets the upper.
        ts = c.cached_upper + 100
        t2 = await create_table(c, "t2", commit_ts=ts)
        expect(t2 is not None and c.cached_upper == ts + 1, "commit_ts sets the new upper")
        expect(t2 is not None and t2.id == mv.id + 1, "ids are never reused")
        snap = await c.snapshot_at(ts)
        expect(snap == c.state(), "snapshot at the last write equals the cache")
        expect(await c.snapshot_at(ts - 1) == before, "the gap before commit_ts holds the old state")


async def _restart(location: OpenCatalog) -> None:
    async with location() as c:
        await c.open()
        for n in range(3):
            expect(await create_table(c, f"t{n}") is not None, "create")
        first = c.state()
        upper = c.cached_upper
    async with location() as c:
        report = await c.open(deploy_generation=4)
        expect(report.epoch == 2 and not report.created and report.steps == (), f"reopen: {report}")
        expect(_state_without_epoch(c.state()) == _state_without_epoch(first), "reopen sees the committed objects")
        expect(await c.snapshot_at(upper - 1) == first, "history survives a restart")
        expect(await c.get_deploy_generation() == 4, "open sets the deploy generation")
        mapping = SystemObjectMapping("mz_catalog", "table", "mz_tables", 10_001, "fp1")
        expect(isinstance(await c.set_system_object_mappings([mapping]), Appended), "mappings")
        state = c.state()
    async with location() as c:
        expect(await c.get_deploy_generation() == 4, "the deploy generation is readable before open")
        await c.open()
        expect(c.get_system_object_mappings() == [mapping], "system object mappings survive")
        expect(_state_without_epoch(c.state()) == _state_without_epoch(state), "reopen sees the committed objects")
        expect([t.name for t in c.get_tables()] == ["t0", "t1", "t2"], "tables survive")


async def _fencing(location: OpenCatalog) -> None:
    async with location() as old, location() as new:
        await old.open()
        expect(await create_table(old, "before") is not None, "old writes before the new opens")
        await new.open()
        e_old, e_new = old.epoch(), new.epoch()
        expect(e_old is not None and e_new is not None and e_new > e_old, f"epochs {e_old} < {e_new}")
        upper = await new.fetch_upper()
        tx = old.transaction()
        tx.create_table(1, "fenced", COLUMNS)
        await _raises(Fenced, "the older opener's next write", lambda: old.commit_transaction(tx))
        expect(await new.fetch_upper() == upper, "a fenced write writes nothing")
        await _raises(Fenced, "confirm_leadership of the older opener", old.confirm_leadership)
        # Even at the fresh upper, the older opener cannot write.
        await old.sync()
        fresh = old.cached_upper
        await _raises(Fenced, "a fenced compare_and_append at the current upper",
                      lambda: old.compare_and_append(fresh, fresh + 1, []))
        expect(await new.fetch_upper() == upper, "still nothing written")
        await new.confirm_leadership()
        expect(await create_table(new, "after") is not None, "the newer opener writes")
        names = sorted(t.name for t in new.get_tables())
        expect(names == ["after", "before"], f"the fenced table is absent: {names}")


async def _read_only(location: OpenCatalog) -> None:
    async with location() as writer, location() as reader:
        await writer.open()
        await reader.open_read_only()
        expect(reader.epoch() is None, "a read-only catalog holds no epoch")
        _sync_raises(InvalidUsage, "transaction on a read-only catalog", reader.transaction)
        await _raises(InvalidUsage, "compare_and_append on a read-only catalog",
                      lambda: reader.compare_and_append(reader.cached_upper, reader.cached_upper + 1, []))
        await _raises(InvalidUsage, "confirm_leadership on a read-only catalog", reader.confirm_leadership)
        await writer.confirm_leadership()  # read-only opening does not fence
        expect(await create_table(writer, "t") is not None, "the writer still writes")
        await reader.sync()
        expect(reader.state() == writer.state(), "sync brings a read-only cache up to date")


async def _concurrent_open(location: OpenCatalog) -> None:
    n = 4
    reports: list[tuple[int, bool]] = []
    async with location() as a, location() as b, location() as c, location() as d:

        async def open_one(cat: DurableCatalog) -> None:
            r = await cat.open()
            reports.append((r.epoch, r.created))

        async with anyio.create_task_group() as tg:
            for cat in (a, b, c, d):
                tg.start_soon(open_one, cat)
    epochs = sorted(e for e, _ in reports)
    expect(epochs == list(range(1, n + 1)), f"concurrent openers got epochs {epochs}")
    expect(sum(created for _, created in reports) == 1, "exactly one opener created the catalog")


async def _ptvc(location: OpenCatalog) -> None:
    async with location() as c:
        await c.open()
        start = c.cached_upper
        states = {start - 1: c.state()}
        for n in range(4):
            t = await create_table(c, f"t{n}", commit_ts=c.cached_upper + 2 * n)
            expect(t is not None, "create")
            states[c.cached_upper - 1] = c.state()
        upper = c.cached_upper
        # Raw appends: a stale expected upper conflicts, an inconsistent one is misuse.
        bogus = CatalogUpdate("setting", canonical({"name": "x"}), canonical({"value": "y"}), upper - 1, 1)
        expect(await c.compare_and_append(upper - 1, upper + 1, [bogus]) == Conflict(upper),
                "compare_and_append at a stale upper")
        retract = CatalogUpdate("setting", canonical({"name": "x"}), canonical({"value": "y"}), upper, -1)
        await _raises(InvalidUsage, "retracting an absent entry", lambda: c.compare_and_append(upper, upper + 1, [retract]))
        expect(await c.fetch_upper() == upper, "nothing written by refused appends")
        add = bogus._replace(ts=upper)
        expect(await c.compare_and_append(upper, upper + 1, [add]) == Appended(upper + 1), "raw append")
        expect(c.get_settings().get("x") == "y", "raw append visible")
        states[upper] = c.state()
        # Snapshots at every write time, and in the gaps between them.
        for ts, state in states.items():
            expect(await c.snapshot_at(ts) == state, f"snapshot_at({ts})")
        # subscribe_at(mid) == snapshot_at(mid) + every later change, in order.
        times = sorted(states)
        mid = times[2]
        async with await c.subscribe_at(mid) as sub:
            expect(sub.snapshot == states[mid], "subscription snapshot == snapshot_at")
            later = upper + 10
            sub_task_events: list[Changes | Progress] = []

            async def consume() -> None:
                sub_task_events.extend(await collect_events(sub, later + 1))

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                expect(await create_table(c, "late", commit_ts=later) is not None, "late create")
                states[later] = c.state()
        replay = states[mid].copy()
        seen_ts: list[int] = []
        last_progress = mid
        for ev in sub_task_events:
            if isinstance(ev, Changes):
                expect(ev.ts > last_progress - 1 and ev.ts > mid, f"changes at {ev.ts} after progress {last_progress}")
                seen_ts.append(ev.ts)
                replay.apply(ev.updates)
                expect(replay == states[ev.ts], f"snapshot + changes up to {ev.ts} == snapshot_at({ev.ts})")
            else:
                expect(ev.upper > last_progress, f"progress went from {last_progress} to {ev.upper}")
                last_progress = ev.upper
        expect(seen_ts == [t for t in sorted(states) if t > mid], f"changes at {seen_ts}")
        expect(replay == c.state(), "subscription reproduces the catalog")


async def _since(location: OpenCatalog) -> None:
    async with location() as c:
        await c.open()
        for n in range(3):
            await create_table(c, f"t{n}")
        upper = c.cached_upper
        mid = upper - 2
        expected = await c.snapshot_at(mid)
        await c.downgrade_since(mid)
        expect(await c.since() == mid, "since after downgrade")
        err = await _raises(BelowSince, "snapshot_at below the since", lambda: c.snapshot_at(mid - 1))
        expect("since" in str(err), f"the error names the since: {err}")
        await _raises(BelowSince, "subscribe_at below the since", lambda: c.subscribe_at(mid - 1))
        expect(await c.snapshot_at(mid) == expected, "snapshot_at the since still works")
        await c.downgrade_since(mid - 1)
        expect(await c.since() == mid, "the since never moves back")
        await _raises(InvalidUsage, "a since at the upper", lambda: c.downgrade_since(upper + 5))
        expect(await create_table(c, "after") is not None, "writes continue after compaction")


async def _migration(location: OpenCatalog) -> None:
    async with location() as c:
        report = await c.open(bootstrap=legacy_state(1))
        expect(report.created and report.steps == (), "bootstrap writes as is")
    async with location() as c:
        check = await c.check_open()
        expect(check.version == 1 and len(check.steps) == FORMAT_VERSION - 1, f"check_open on v1: {check}")
        upper = await c.fetch_upper()
        expect(await c.check_open() == check and await c.fetch_upper() == upper, "check_open writes nothing")
        await _raises(CatalogNotReady, "open_read_only needing a migration", c.open_read_only)
    async with location() as c:
        report = await c.open()
        expect(report.migrated_from == 1 and len(report.steps) == FORMAT_VERSION - 1, f"migrating open: {report}")
        tables = c.get_tables()
        expect([t.columns for t in tables] == [(Column("a", "int"), Column("b", "text"))], f"migrated {tables}")
        expect(c.get_config()["version"] == FORMAT_VERSION, "version bumped")
        expect([r.size for r in c.get_cluster_replicas()] == ["1"], "replica size migrated")
    async with location() as c:
        report = await c.open()
        expect(report.steps == () and report.migrated_from is None, "migrations run once")


async def _unsupported_version(location: OpenCatalog) -> None:
    async with location() as c:
        await c.open(bootstrap=legacy_state(0))
    async with location() as c:
        upper = await c.fetch_upper()
        await _raises(MigrationError, "check_open on an unsupported version", c.check_open)
        await _raises(MigrationError, "open on an unsupported version", c.open)
        expect(await c.fetch_upper() == upper, "a failed migration writes nothing")


async def _misuse(location: OpenCatalog) -> None:
    async with location() as c:
        await _raises(InvalidUsage, "compare_and_append before open", lambda: c.compare_and_append(0, 1, []))
        await c.open()
        u = c.cached_upper
        upd = CatalogUpdate("setting", canonical({"name": "x"}), canonical({"value": "y"}), u, 1)
        for what, call in (
            ("new_upper <= expected_upper", lambda: c.compare_and_append(u, u, [])),
            ("update outside the range", lambda: c.compare_and_append(u, u + 1, [upd._replace(ts=u + 1)])),
            ("diff 2", lambda: c.compare_and_append(u, u + 1, [upd._replace(diff=2)])),
            ("unknown kind", lambda: c.compare_and_append(u, u + 1, [upd._replace(kind="nope")])),
            ("negative timestamp", lambda: c.snapshot_at(-1)),
        ):
            await _raises(InvalidUsage, what, call)
        expect(await c.fetch_upper() == u, "misuse writes nothing")
