"""A DDL's metadata round trips (`CoordinatorConfig.ddl_round_trips`, issue 35):
the calls Materialize's CREATE TABLE makes besides its catalog transaction
(PR #35786 counts ~27), each tested by itself with one backend slowed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from coordinator.environment import Environment
from coordinator.running import RunningCoordinator
from sim.load.harness import open_stores
from sim.runtime.core import run
from sim.runtime.latency import Constant, LatencyModel
from tests.coordinator.harness import build_coordinator, config

if TYPE_CHECKING:
    from pathlib import Path

    from coordinator.config import CoordinatorConfig
    from sim.runtime.core import Runtime

pytestmark = pytest.mark.virtual


def _latency(**ms: float) -> LatencyModel:
    return LatencyModel({name.replace("_", "."): Constant(v / 1000) for name, v in ms.items()}, default=Constant(0.0))


def _ddl(cfg: CoordinatorConfig, latency: LatencyModel) -> dict[str, float]:
    """After a first CREATE TABLE (which also opens the builtin-tables shard):
    a second one and a DROP, each timed, with the oracle's `write_ts` calls,
    the loop's blocked time and the builtin-table writes they made."""

    async def main(rt: Runtime) -> dict[str, float]:
        # Persist with modeled latency (`consensus.*`), as a deployment's.
        async with open_stores(None, modeled=rt) as stores, build_coordinator(
            cfg, Environment(rt, blob=stores.blob, consensus=stores.consensus), rt
        ) as coord:
            assert isinstance(coord, RunningCoordinator)
            s = coord.connect()
            assert (await s.execute("CREATE TABLE first (a int)")).ok
            oracle = coord.incarnation.oracle
            inner = getattr(getattr(oracle, "inner", oracle), "inner", oracle)
            out: dict[str, float] = {}
            for kind, sql in (("create", "CREATE TABLE t (a int)"), ("drop", "DROP TABLE t")):
                writes = inner.statistics().op("write_ts").start_count
                busy = coord.statistics().loop_busy_s
                builtin = coord.incarnation.storage.statistics().builtin_appends
                t0 = rt.now()
                assert (await s.execute(sql)).ok
                out[f"{kind}_s"] = rt.now() - t0
                out[f"{kind}_write_ts"] = inner.statistics().op("write_ts").start_count - writes
                out[f"{kind}_blocked_s"] = coord.statistics().loop_busy_s - busy
                out[f"{kind}_builtin"] = coord.incarnation.storage.statistics().builtin_appends - builtin
                if kind == "create":
                    ids = sorted(t.id for t in coord.incarnation.catalog.get_tables())
                    out["table_ids"] = float(ids[0] * 1000 + ids[1])
            return out

    result = run(main, seed=1, latency=latency)
    assert isinstance(result, dict)
    return result


def test_the_round_trips_are_off_unless_asked_for() -> None:
    """Off by default, as `frontend` (`CoordinatorConfig.ddl_round_trips`)."""
    assert not config("event-loop+pg-oracle").ddl_round_trips
    assert not config("decoupled").ddl_round_trips


def _event_loop(**overrides: object) -> CoordinatorConfig:
    # No keepalive commit in the window: its oracle calls would mix in.
    return config("event-loop+pg-oracle", group_commit_interval_s=3600.0, **overrides)


def test_create_table_awaits_three_write_timestamps_on_the_loop_and_drop_two() -> None:
    """`get_catalog_write_ts` before `allocate_user_id`, `catalog_transact`'s
    `get_local_write_ts`, and the builtin-table write's; a DROP allocates no
    id. All awaited in the DDL's handler, so the loop is blocked for them."""
    on = _ddl(_event_loop(ddl_round_trips=True), _latency(oracle_pg=100.0))
    off = _ddl(_event_loop(ddl_round_trips=False), _latency(oracle_pg=100.0))
    assert (on["create_write_ts"], on["drop_write_ts"]) == (3, 2)
    assert (off["create_write_ts"], off["drop_write_ts"]) == (0, 0)
    assert on["create_s"] - off["create_s"] == pytest.approx(0.3, abs=1e-6)
    assert on["create_blocked_s"] - off["create_blocked_s"] == pytest.approx(0.3, abs=1e-3)
    assert on["drop_s"] - off["drop_s"] == pytest.approx(0.2, abs=1e-6)


def test_create_table_allocates_its_id_in_a_catalog_transaction_of_its_own() -> None:
    """`allocate_user_id` is one more catalog transaction before the
    statement's own, and the table gets the id it allocated: the ids are the
    ones allocated without it."""
    on = _ddl(_event_loop(ddl_round_trips=True), _latency(catalog_stash_txn=100.0))
    off = _ddl(_event_loop(ddl_round_trips=False), _latency(catalog_stash_txn=100.0))
    assert on["create_s"] - off["create_s"] == pytest.approx(0.1, abs=1e-6)
    assert on["drop_s"] == pytest.approx(off["drop_s"], abs=1e-6)
    assert on["table_ids"] == off["table_ids"] == 1002  # tables 1 and 2: consecutive, as before


@pytest.mark.parametrize("name", ["event-loop+pg-oracle", "decoupled"])
def test_a_new_table_shard_takes_four_more_round_trips_and_each_ddl_one_builtin_write(name: str) -> None:
    """Storage's set-up of the new table's shard (critical since in the
    controller's epoch, two recent uppers, the txns registration) and the
    builtin-table write's compare-and-append: five consensus round trips more
    for a CREATE TABLE, one more for a DROP. The event loop awaits them in
    the DDL; the decoupled adapter answers once the catalog committed (its
    controllers follow the catalog), so only its builtin write is the DDL's."""
    cfg = config(name) if name == "decoupled" else _event_loop()
    on = _ddl(cfg.with_overrides(ddl_round_trips=True), _latency(consensus=100.0))
    off = _ddl(cfg.with_overrides(ddl_round_trips=False), _latency(consensus=100.0))
    assert (on["create_builtin"], on["drop_builtin"]) == (1, 1)
    assert (off["create_builtin"], off["drop_builtin"]) == (0, 0)
    setup = 0.4 if name == "event-loop+pg-oracle" else 0.0
    assert on["create_s"] - off["create_s"] == pytest.approx(setup + 0.1, abs=1e-6)
    if name == "event-loop+pg-oracle":  # a decoupled DROP may wait for the CREATE's storage set-up
        assert on["drop_s"] - off["drop_s"] == pytest.approx(0.1, abs=1e-6)


def test_a_peek_staged_across_a_fence_is_refused_not_left_waiting() -> None:
    """Found by a split-brain run with these round trips on (seed 16, random
    schedule): a SELECT whose optimizer stage was still out when its loop
    learned it was deposed sent its peek anyway, and no replica answered it,
    so the client waited forever. A fenced loop halts, as Materialize's
    process does: the peek is refused with the fence's 57P01."""
    from coordinator.statements import SqlState

    async def main(rt: Runtime) -> str:
        cfg = config("event-loop+pg-oracle", group_commit_interval_s=3600.0)
        async with build_coordinator(cfg, Environment(rt), rt) as coord:
            assert isinstance(coord, RunningCoordinator)
            s = coord.connect()
            assert (await s.execute("CREATE TABLE t (a int)")).ok
            answer: list[str] = []

            async def select() -> None:
                r = await s.execute("SELECT * FROM t")
                answer.append(r.error.code.value if r.error is not None else "ok")

            import anyio

            async with anyio.create_task_group() as tg:
                tg.start_soon(select)
                await rt.sleep(0.05)  # the SELECT's read_ts is out (100 ms)
                coord._fence(RuntimeError("a newer coordinator"))
            return answer[0]

    assert run(main, seed=1, latency=_latency(oracle_pg=100.0)) == SqlState.ADMIN_SHUTDOWN.value


@pytest.mark.parametrize("knob", ["ddl_round_trips", "stash_commit_reads"])
def test_a_run_config_turns_the_round_trips_on_and_refuses_a_non_switch(tmp_path: Path, knob: str) -> None:
    from sim.load.run_config import RunConfig
    from sim.runtime.errors import InvalidUsage

    good = tmp_path / "on.toml"
    good.write_text(f"configurations = ['event-loop+pg-oracle']\n[overrides]\n{knob} = true\n")
    assert getattr(RunConfig.from_toml(good).coordinator("event-loop+pg-oracle"), knob)
    bad = tmp_path / "bad.toml"
    bad.write_text(f"configurations = ['event-loop+pg-oracle']\n[overrides]\n{knob} = 1\n")
    with pytest.raises(InvalidUsage, match=f"{knob} must be true or false"):
        RunConfig.from_toml(bad).coordinator("event-loop+pg-oracle")


def test_a_peek_in_flight_when_its_loop_is_fenced_is_refused_at_once() -> None:
    """The other half of a fenced loop's halt (`EventLoopPeeks._fence`): a
    peek already sent to a replica is answered with the fence's 57P01 at the
    fencing, not with whatever the replica answers later (or never)."""
    from coordinator.statements import SqlState

    async def main(rt: Runtime) -> tuple[str, float]:
        cfg = config("event-loop+pg-oracle", group_commit_interval_s=3600.0)
        async with build_coordinator(cfg, Environment(rt), rt) as coord:
            assert isinstance(coord, RunningCoordinator)
            s = coord.connect()
            assert (await s.execute("CREATE TABLE t (a int)")).ok
            answer: list[tuple[str, float]] = []

            async def select() -> None:
                r = await s.execute("SELECT * FROM t")
                answer.append((r.error.code.value if r.error is not None else "ok", rt.now()))

            import anyio

            async with anyio.create_task_group() as tg:
                tg.start_soon(select)
                await rt.sleep(0.05)  # the peek is at the replica (100 ms each way)
                fenced_at = rt.now()
                coord._fence(RuntimeError("a newer coordinator"))
            code, at = answer[0]
            return code, at - fenced_at

    code, after = run(main, seed=1, latency=_latency(replica_command=100.0, replica_response=100.0))
    assert code == SqlState.ADMIN_SHUTDOWN.value
    assert after < 0.01  # at the fencing, not when the replica's answer arrives


def test_the_stash_names_its_transactions_by_shape() -> None:
    """The in-memory stash's transactions are reads, writes or the epoch check
    alone (`catalog.stash.txn.read`, `.write`, `.confirm`): the 2024 stash
    made a different number of round trips for each. A DDL's catalog
    transaction is one write; its reads come from the catalog's cache."""
    slow = _ddl(_event_loop(), _latency(catalog_stash_txn_write=1000.0, catalog_stash_txn_read=100.0))
    fast = _ddl(_event_loop(), _latency(catalog_stash_txn_read=100.0))
    assert slow["create_s"] - fast["create_s"] == pytest.approx(1.0, abs=1e-6)
    assert slow["drop_s"] - fast["drop_s"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("round_trips", [False, True])
def test_the_2024_stash_catalog_reads_three_times_before_a_ddls_write(round_trips: bool) -> None:
    """`stash_commit_reads`: the snapshot `transaction()` took and
    `is_stash_initialized`'s two reads (its collections, then its config),
    before each DDL's catalog write; the id allocation (`ddl_round_trips`) is
    a write of its own, with none."""
    assert not config("event-loop+pg-oracle").stash_commit_reads  # an era knob: off unless asked for
    lat = _latency(catalog_stash_txn_read=100.0)
    on = _ddl(_event_loop(ddl_round_trips=round_trips, stash_commit_reads=True), lat)
    off = _ddl(_event_loop(ddl_round_trips=round_trips, stash_commit_reads=False), lat)
    assert on["create_s"] - off["create_s"] == pytest.approx(0.3, abs=1e-6)
    assert on["drop_s"] - off["drop_s"] == pytest.approx(0.3, abs=1e-6)
    assert on["create_blocked_s"] - off["create_blocked_s"] == pytest.approx(0.3, abs=1e-3)  # on the loop


@pytest.mark.parametrize(("name", "catalog"), [("decoupled", None), ("event-loop+pg-oracle", "persist")])
def test_the_stash_reads_are_refused_where_there_is_no_stash_or_no_loop(name: str, catalog: str | None) -> None:
    from coordinator.config import CatalogKind
    from sim.runtime.errors import InvalidUsage

    more = {} if catalog is None else {"catalog": CatalogKind(catalog)}
    with pytest.raises(InvalidUsage, match="stash_commit_reads applies to the event loop on the stash catalog"):
        config(name, stash_commit_reads=True, **more)


@pytest.mark.parametrize("knob", ["ddl_round_trips", "stash_commit_reads"])
def test_a_backend_failure_before_the_catalog_write_is_determinate_and_writes_nothing(
    knob: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The id allocation's `write_ts` (`ddl_round_trips`) and the 2024 stash's
    reads (`stash_commit_reads`) come before the statement's catalog write:
    if the backend fails there, nothing was written, so the statement fails
    with 40001 (retryable, determinate: DESIGN.md §9) and no table exists."""
    from sim.runtime.errors import Determinate

    async def main(rt: Runtime) -> tuple[str | None, list[str]]:
        async with open_stores(None, modeled=rt) as stores, build_coordinator(
            _event_loop(**{knob: True}), Environment(rt, blob=stores.blob, consensus=stores.consensus), rt
        ) as coord:
            assert isinstance(coord, RunningCoordinator)
            inc = coord.incarnation

            async def down() -> None:
                raise Determinate("the metadata store refused the connection")

            if knob == "ddl_round_trips":
                monkeypatch.setattr(getattr(inc.oracle, "inner", inc.oracle), "write_ts", down)
            else:
                monkeypatch.setattr(inc.catalog, "is_initialized", down)
            r = await coord.connect().execute("CREATE TABLE t (a int)")
            assert not r.ok
            assert r.error is not None
            assert "before the catalog transaction" in r.error.message
            return r.error.code, [t.name for t in inc.catalog.get_tables()]

    code, tables = run(main, seed=1, latency=_latency())
    assert code == "40001"
    assert tables == []


@pytest.mark.parametrize("name", ["event-loop+pg-oracle", "decoupled"])
def test_a_failed_builtin_write_is_indeterminate_and_the_table_exists(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The builtin-table write comes after the catalog committed: if it fails,
    the statement is answered 08007 (committed, not acknowledged as such:
    DESIGN.md §9), in both architectures, and the table is in the catalog."""
    from sim.runtime.errors import Indeterminate

    cfg = config(name) if name == "decoupled" else _event_loop()

    async def main(rt: Runtime) -> tuple[str | None, str, list[str]]:
        async with open_stores(None, modeled=rt) as stores, build_coordinator(
            cfg.with_overrides(ddl_round_trips=True), Environment(rt, blob=stores.blob, consensus=stores.consensus), rt
        ) as coord:
            assert isinstance(coord, RunningCoordinator)
            inc = coord.incarnation

            async def down(ts: int) -> int:
                raise Indeterminate("the metadata store went away mid-write")

            monkeypatch.setattr(inc.storage, "append_builtin", down)
            r = await coord.connect().execute("CREATE TABLE t (a int)")
            assert not r.ok
            assert r.error is not None
            return r.error.code, r.error.message, [t.name for t in inc.catalog.get_tables()]

    code, message, tables = run(main, seed=1, latency=_latency())
    assert code == "08007"
    assert message.startswith("builtin tables:")
    assert tables == ["t"]
