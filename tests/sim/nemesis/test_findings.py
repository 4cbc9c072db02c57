"""What the simulator found about the designs themselves (not bugs in it).

Seed 000 drops `confirm_leadership()` once the Postgres oracle linearizes
timestamps. That holds for data: every read_ts comes from the shared row. It
does not hold for the catalog in `event-loop+pg-oracle`: the loop plans against
its in-memory catalog, so after a second coordinator starts, the deposed one
keeps serving reads from a catalog that no longer is the latest — a client
that saw B create a table is told by A that it does not exist. Today's
`event-loop` catches this with `confirm_leadership()` (A learns it is fenced),
seed 000's rollout kept that check for the same reason ("we could produce
linearization anomalies when switching"), and the decoupled design closes it
for good: each peek carries a `catalog_ts` from the catalog timeline, which A's
controllers can only reach by reading B's writes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from coordinator.config import named
from coordinator.environment import Environment
from coordinator.factory import build_coordinator
from sim.history.capture import RecordingSession, event_sink
from sim.history.checker import check_history
from sim.history.recorder import HistoryRecorder
from sim.nemesis.anomalies import run_scenario
from sim.nemesis.anomaly_scenarios import latency_model
from sim.runtime.core import run

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig
    from sim.runtime.core import Runtime

pytestmark = pytest.mark.virtual


def _read_through_deposed(config: CoordinatorConfig) -> tuple[str | None, list[str]]:
    """A serves; B starts on the same stores and creates `x`; once that is
    acknowledged, a client of A reads `x`. Returns the read's error code and
    the checkers' anomaly names."""

    async def main(rt: Runtime) -> tuple[str | None, list[str]]:
        rec = HistoryRecorder(rt.now)
        env = Environment(rt)
        sink = event_sink(rec)
        async with build_coordinator(config, env, rt, events=sink, actor="a") as a:
            sa = RecordingSession(a.connect(), rec, client="c1")
            assert (await sa.execute("CREATE TABLE t (a int)")).ok
            assert (await sa.execute("SELECT * FROM t")).ok
            async with build_coordinator(config, env, rt.derive("b"), events=sink, actor="b") as b:
                sb = RecordingSession(b.connect(), rec, client="c2")
                assert (await sb.execute("CREATE TABLE x (a int)")).ok
                assert (await sb.execute("INSERT INTO x VALUES (1)")).ok
                r = await sa.execute("SELECT * FROM x")
        return r.code, check_history(rec.history(), rec.events()).names

    return run(main, seed=1, latency=latency_model())


def test_pg_oracle_without_confirm_leadership_serves_a_stale_catalog() -> None:
    code, names = _read_through_deposed(named("event-loop+pg-oracle"))
    assert code == "42P01", code
    assert "select-unknown-table" in names, names


@pytest.mark.parametrize("config", ["event-loop", "decoupled"])
def test_other_designs_fence_the_deposed_reader(config: str) -> None:
    code, names = _read_through_deposed(named(config))
    assert code in {None, "57P01"}, code
    assert not names, names


def test_confirm_leadership_closes_it_for_the_pg_oracle() -> None:
    """Seed 000's rollout: the Postgres oracle with the check kept (through the
    catalog's epoch, the in-memory oracle being gone)."""
    config = dataclasses.replace(named("event-loop+pg-oracle"), confirm_leadership=True)
    code, names = _read_through_deposed(config)
    assert code == "57P01", code
    assert not names, names


def test_split_brain_stale_catalog_ts_on_the_pg_oracle() -> None:
    """The regression suite's split brain shows the same hole to the whitebox
    checker: A's reads stamp its stale catalog_ts after B's reads stamped a
    later one (`uv run coordsim anomalies run split-brain --config
    event-loop+pg-oracle --seed 4`). Its clients read only tables nobody
    drops, so no black-box anomaly — the test above makes it visible."""
    history, events = run_scenario("split-brain", "event-loop+pg-oracle", 4)
    report = check_history(history, events)
    assert report.names == ["not-strict-serializable"], report.names
    found = [a for v in report.verdicts for a in v.anomalies]
    assert all("catalog timeline" in a.explanation for a in found), found


#: Split-brain seeds on which each coordinator fences the other: the new one
#: because the deposed one appended to a table it writes too ("another
#: coordinator wrote this table"), the deposed one by the catalog's epoch. Both
#: stay up refusing statements with 57P01 (nothing here restarts a halted
#: coordinator, as an orchestrator would). `decoupled` once never finished
#: these runs (the nightly 10,000-seed sweep found 2266, 5149, 5292, 5490,
#: 7299, 7465 and 8584, README): each client, refused by both, waited forever
#: for a coordinator to start. Clients now try again after a backoff
#: (sim/load/driver.py), so the runs end with those statements refused. Which
#: seeds reach the double fence moves with the schedule: these are all seeds
#: below 10,000 that do since `concurrently` runs its first call in the
#: calling task (issue 20), found by this test's own criterion; found again
#: (7 min on 2 cores) after issue 35 gave `decoupled` the profile's 2 cores
#: instead of 4 and staged the loop's messages, and again (5 min on 2 busy
#: cores, this test's criterion over seeds 0..9,999) after DDL's CPU came to
#: grow with the catalog's entries, the catalog feed became a latency rather
#: than a queue (`coordinator.follow_catalog`) and a statement whose
#: catalog snapshot is beyond its read_ts came to apply it.
DOUBLY_FENCED_SPLIT_BRAIN_SEEDS = (565, 1072, 1243, 1844, 2166, 4801, 5478, 6687, 7260, 8447, 9192, 9905)


@pytest.mark.parametrize("seed", DOUBLY_FENCED_SPLIT_BRAIN_SEEDS)
def test_split_brain_seeds_where_both_coordinators_fence_finish_clean(seed: int) -> None:
    from sim.nemesis.anomalies import run_spec
    from sim.nemesis.anomaly_spec import default_spec

    history, events = run_spec(default_spec("split-brain", "decoupled", seed))
    report = check_history(history, events)
    assert report.names == [], report.names
    refused = [op for op in history.ops() if (op.error or "").startswith("57P01")]
    last = max(op.invoke_ns for op in history.ops())
    # Statements are refused to the end: no coordinator served again.
    assert refused, "expected statements refused by fenced coordinators"
    assert any(op.invoke_ns == last for op in refused), "the last statement is refused"
