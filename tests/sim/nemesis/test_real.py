"""Anomaly scenarios in real mode: the same bodies on the stock loop against a
fresh Postgres database per run (Consensus, oracle, timestamp store, catalog stash; Blob in files),
under the `pg-kill` fault that terminates the database's backends. The
reconnects and retries it forces must leave every checker `valid`; failing
statements (or `info` ones) are allowed, wrong answers are not.

Real runs are not deterministic: a failure prints its replay command, which
reruns the same statements and faults, not necessarily the same interleaving.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import pytest

from sim.cli.main import main
from sim.history.checker import CHECKERS, check_history
from sim.history.model import Status
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_spec import CONFIG_NAMES, Spec, default_spec
from sim.nemesis.plan import Fault, FaultKind, FaultPlan, check_plan
from sim.runtime.errors import InvalidUsage
from tests.sim.nemesis.helpers import EXPECTED_FINDINGS, Finding, unexpected_names

if TYPE_CHECKING:
    from sim.history.model import Event, History

#: Kills from 5 ms on, every 10 ms for 100 ms: reaches statements in flight
#: and connections the pools just reopened.
PG_KILL: Final = FaultPlan.parse("pg-kill@5ms+100ms")
#: Seeds per configuration in the default run (~1 s per real run).
SEEDS = (0, 1)


def _run(spec: Spec, pg_url: str) -> tuple[History, list[Event], Finding | None]:
    """Runs and checks `spec`; a finding (with its replay command) if not valid."""
    try:
        history, events = run_spec(spec, postgres_url=pg_url)
    except Exception as exc:
        raise AssertionError(
            f"seed {spec.seed} crashed: {exc!r}\n    replay: {spec.command()}"
        ) from exc
    # Every checker runs; the virtual suite's expected findings (each pinned)
    # are expected here too, and nothing else is.
    report = check_history(history, events, checkers=CHECKERS)
    if not unexpected_names(report, EXPECTED_FINDINGS.get((spec.scenario, spec.config))):
        return history, events, None
    first = next((a.explanation for v in report.verdicts for a in v.anomalies), "")
    finding = Finding(spec.seed, report.names, spec.command(), first[:300])
    print(finding)
    return history, events, finding


def _kills(events: list[Event]) -> list[dict[str, Any]]:
    """The details (JSON) of the pg-kill faults among `events`."""
    details = [json.loads(e.detail) for e in events if e.kind == "fault" and e.detail]
    return [d for d in details if d["fault"] == FaultKind.PG_KILL]


def _pg_kill_spec(scenario: str, config: str, seed: int, plan: FaultPlan = PG_KILL) -> Spec:
    return replace(default_spec(scenario, config, seed, mode="real"), faults=plan)


# --- real mode under pg-kill ----------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_ddl_dml_under_pg_kill_is_valid(config: str, pg_url: str) -> None:
    found: list[Finding] = []
    for seed in SEEDS:
        _, events, finding = _run(_pg_kill_spec("ddl-dml", config, seed), pg_url)
        if finding is not None:
            found.append(finding)
        kills = _kills(events)
        assert len(kills) == 1, kills
        assert kills[0]["killed"] > 0, kills
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.postgres
def test_pg_kill_kills_backends_and_the_system_recovers(pg_url: str) -> None:
    """The fault's event names how many backends died and whose (the oracle's
    among them), and statements begun after the last kill still succeed."""
    plan = FaultPlan((Fault(0.005, FaultKind.PG_KILL, 0.15),))
    spec = _pg_kill_spec("ddl-dml", "event-loop+pg-oracle", 3, plan)
    history, events, finding = _run(spec, pg_url)
    assert finding is None, str(finding)
    (fault,) = (e for e in events if e.kind == "fault")
    (kill,) = _kills(events)
    assert kill["killed"] > 0, kill
    assert kill["rounds"] > 1, kill
    assert "coordsim-oracle" in kill["applications"], kill
    assert fault.end_ns is not None
    after = [history.op(i) for i in range(history.n) if history.op(i).invoke_ns > fault.end_ns]
    if after:  # the workload may finish before the fault does; then the kills hit it all
        assert any(op.status is Status.OK for op in after), after
    assert any(history.op(i).status is Status.OK for i in range(history.n))


@pytest.mark.postgres
def test_cli_runs_real_mode_with_pg_kill(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COORDSIM_POSTGRES_URL", pg_url)
    monkeypatch.setattr(
        sys,
        "argv",
        ["coordsim", "anomalies", "run", "ddl-dml", "--config", "decoupled", "--seed", "2",
         "--mode", "real", "--faults", "pg-kill@10ms+50ms"],
    )
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr().out
    assert exit_.value.code == 0, out
    assert "verdict: valid" in out
    assert (
        "rerun: uv run coordsim anomalies run ddl-dml --config decoupled --seed 2 --mode real "
        "--clients 4 --size 10 --faults pg-kill@10ms+50ms" in out
    )


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_ddl_dml_under_pg_kill_many_seeds(config: str, pg_url: str) -> None:
    plans = (PG_KILL, FaultPlan.parse("pg-kill@0ms+1000ms"))
    found = [
        f
        for seed in range(100, 130)
        for f in [_run(_pg_kill_spec("ddl-dml", config, seed, plans[seed % 2]), pg_url)[2]]
        if f is not None
    ]
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("config", CONFIG_NAMES)
@pytest.mark.parametrize("scenario", ["seed001", "ddl-dml", "crash-restart", "split-brain"])
def test_default_real_plans_are_valid(scenario: str, config: str, pg_url: str) -> None:
    """The seed's own fault plans in real mode (pg-kill among ddl-dml's kinds)."""
    found = [
        f
        for seed in range(10)
        for f in [_run(default_spec(scenario, config, seed, mode="real"), pg_url)[2]]
        if f is not None
    ]
    assert not found, "\n".join(str(f) for f in found)


# --- modes and fault kinds (no Postgres) ------------------------------------------------------


def test_pg_kill_in_virtual_mode_is_rejected() -> None:
    with pytest.raises(InvalidUsage, match="pg-kill needs --mode real"):
        replace(default_spec("ddl-dml", "decoupled", 0), faults=PG_KILL)
    with pytest.raises(InvalidUsage, match="oracle-slow needs --mode virtual"):
        check_plan(FaultPlan.parse("oracle-slow@1ms+2msx5"), "real")
    with pytest.raises(InvalidUsage, match="unknown mode"):
        default_spec("ddl-dml", "decoupled", 0, mode="fake")  # type: ignore[arg-type]


def test_random_plans_pick_only_faults_of_their_mode() -> None:
    virtual = [default_spec("ddl-dml", "decoupled", s).faults for s in range(200)]
    real = [default_spec("ddl-dml", "decoupled", s, mode="real").faults for s in range(200)]
    assert all(f.kind is not FaultKind.PG_KILL for p in virtual for f in p.faults)
    assert any(f.kind is FaultKind.ORACLE_SLOW for p in virtual for f in p.faults)
    assert all(f.kind is not FaultKind.ORACLE_SLOW for p in real for f in p.faults)
    assert any(f.kind is FaultKind.PG_KILL for p in real for f in p.faults)


def test_replay_command_names_real_mode_only_when_real() -> None:
    spec = _pg_kill_spec("ddl-dml", "event-loop", 4)
    assert "--mode real" in spec.command()
    assert "--faults pg-kill@5ms+100ms" in spec.command()
    assert "--mode" not in default_spec("ddl-dml", "event-loop", 4).command()
    assert str(FaultPlan.parse("pg-kill@10ms+50ms")) == "pg-kill@10ms+50ms"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--faults", "pg-kill@10ms+50ms"], "pg-kill needs --mode real"),
        (["--mode", "real", "--faults", "oracle-slow@1ms+2ms"], "oracle-slow needs --mode virtual"),
        (["--mode", "fast"], "'fast' is not one of 'virtual', 'real'"),
    ],
)
def test_cli_bad_mode_combinations_exit_2_with_one_line(
    args: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(
        sys, "argv", ["coordsim", "anomalies", "run", "ddl-dml", "--seed", "0", *args]
    )
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
