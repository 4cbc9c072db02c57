"""A recorded run of seed 001's scenario checks valid on every configuration and
survives the trace round trip; the known-bad variant that ignores catalog_ts is
caught by the checker by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from coordinator.config import KnownBad
from sim.history.capture import RecordingSession, event_sink
from sim.history.checker import check_history
from sim.history.checker.verdict import Outcome
from sim.history.recorder import HistoryRecorder
from sim.history.traces import read_trace, write_trace
from sim.runtime.core import run
from tests.coordinator.harness import (
    CONFIG_NAMES,
    build_coordinator,
    config,
    latency_model,
    virtual_env,
)

if TYPE_CHECKING:
    from pathlib import Path

    from sim.runtime.core import Runtime

pytestmark = pytest.mark.virtual


def _record(name: str, seed: int, known_bad: KnownBad | None = None) -> HistoryRecorder:
    async def main(rt: Runtime) -> HistoryRecorder:
        rec = HistoryRecorder(rt.now)
        cfg = config(name, known_bad=known_bad or KnownBad())
        async with build_coordinator(cfg, virtual_env(rt), rt, events=event_sink(rec)) as coord:
            c1 = RecordingSession(coord.connect(), rec, client="c1")
            c2 = RecordingSession(coord.connect(), rec, client="c2")
            for n in range(6):
                await c1.execute(f"CREATE TABLE foo{n} (a int)")
                await rt.sleep(rt.rng.uniform(0, 0.002))
                await c2.execute(f"INSERT INTO foo{n} VALUES ({n}), ({n + 100})")
                await rt.sleep(rt.rng.uniform(0, 0.002))
                await c1.execute(f"SELECT * FROM foo{n}")
                await c2.execute(f"UPDATE foo{n} SET a = a + 1000 WHERE a = {n}")
                await c1.execute(f"SELECT count(*) FROM foo{n}")
        return rec

    return run(main, seed=seed, latency=latency_model())


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_recorded_scenario_is_valid_and_round_trips(name: str, tmp_path: Path) -> None:
    rec = _record(name, seed=1)
    history, events = rec.history(), rec.events()
    assert history.n == 30
    assert any(e.kind == "group-commit" for e in events)
    assert any(e.kind == "oracle.read_ts" for e in events)
    report = check_history(history, events)
    assert report.outcome is Outcome.VALID, report
    write_trace(tmp_path / "t", history, events, run="r", config=name, seed=1)
    trace = read_trace(tmp_path / "t")
    assert trace.history.n == history.n
    assert check_history(trace.history, trace.events).outcome is Outcome.VALID


def test_checker_names_the_anomaly_of_peeks_ignoring_catalog_ts() -> None:
    found: set[str] = set()
    for seed in range(6):
        rec = _record("decoupled", seed, KnownBad(peeks_ignore_catalog_ts=True))
        report = check_history(rec.history(), rec.events())
        if report.outcome is Outcome.INVALID:
            found |= set(report.names)
    assert {"insert-unknown-table", "select-unknown-table"} & found, found


def test_prepared_statements_parse_a_text_once_and_forget_failures() -> None:
    from coordinator.sql import parse
    from coordinator.statements import SqlError
    from sim.history.capture import PreparedStatements

    prepared = PreparedStatements(capacity=2)
    first = prepared("SELECT * FROM t WHERE a = 1")
    assert first.statement == parse("SELECT * FROM t WHERE a = 1")
    assert first.op is not None
    assert first.args_json == '{"where": [["=", 1]]}'
    assert prepared("SELECT * FROM t WHERE a = 1") is first
    assert prepared("SELECT 1").op is None  # a constant query is not recorded
    prepared("SELECT 2")  # evicts the least recently used: the first text
    assert prepared("SELECT * FROM t WHERE a = 1") is not first
    for _ in range(2):  # a failure is raised each time, never cached
        with pytest.raises(SqlError):
            prepared("SELEC nonsense")
    with pytest.raises(ValueError, match="capacity"):
        PreparedStatements(capacity=0)
