"""Crash test: the embedded Postgres's postmaster is SIGKILLed in the middle of a
real-mode run of the decoupled coordinator (`pg-sigkill`: no shutdown at all,
every connection drops, nothing listens until `restart()`), then restarted.
Every checker must still say `valid`, no acknowledged write may be lost, and
the failures the outage causes must be logged one line each, never as raw
tracebacks.

Real runs are not deterministic: a failure prints the replay command, which
reruns the same statements and faults, not necessarily the same interleaving.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from sim.history.checker import CHECKERS, check_history
from sim.history.model import Kind, Status
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_spec import default_spec
from sim.nemesis.plan import Fault, FaultKind, FaultPlan
from sim.runtime.errors import InvalidUsage
from sim.services import pg_processes
from sim.services import postgres as backends
from tests.sim.nemesis.helpers import EXPECTED_FINDINGS, unexpected_names

if TYPE_CHECKING:
    from sim.history.model import History, Op
    from sim.services.postgres import EmbeddedPostgres

SCENARIO: Final = "ddl-dml"
CONFIG: Final = "decoupled"
#: Operations per client: enough that writes are acknowledged before the kill
#: and read after the restart, and that the run outlasts the fault.
SIZE: Final = 20
#: The postmaster dies 100 ms in and stays dead 200 ms (then the restart's
#: crash recovery): far longer than any statement takes otherwise.
PLAN: Final = FaultPlan.parse("pg-sigkill@100ms+200ms")
SEEDS: Final = (0, 1)
#: Shared tables: inserted into and read by every client, never dropped.
_SHARED: Final = re.compile(r"t\d+")
#: A URL with its password in clear (redact_url writes `:***@`).
_CLEAR_PASSWORD: Final = re.compile(r"[a-z]+://[^:/@\s]*:(?!\*\*\*@)[^@\s/]+@")


def _ops(history: History) -> list[Op]:
    return [history.op(i) for i in range(history.n)]


def _lost_writes(ops: list[Op]) -> list[tuple[Op, Op]]:
    """(acknowledged insert, later read that misses it) on the shared tables."""
    adds = [o for o in ops if o.kind is Kind.ADD and o.status is Status.OK and _shared(o)]
    reads = [o for o in ops if o.kind is Kind.READ and o.status is Status.OK and _shared(o)]
    return [
        (a, r)
        for a in adds
        for r in reads
        if a.obj == r.obj
        and a.complete_ns is not None
        and a.complete_ns < r.invoke_ns
        and not set(a.elements) <= set(r.result or ())
    ]


def _shared(op: Op) -> bool:
    return op.obj is not None and _SHARED.fullmatch(op.obj) is not None


@pytest.mark.postgres
def test_decoupled_survives_a_sigkilled_postmaster(private_pg: EmbeddedPostgres) -> None:
    """The fault really happens (its event names the killed postmaster, which
    is gone; another one serves), statements in flight wait it out (the
    decoupled coordinator retries Determinate failures — a refused connection
    sent nothing — so they stall for the outage rather than fail), every
    checker says valid, and every insert acknowledged before the kill is in
    every read after the restart."""
    pg = private_pg
    duration_ns = round(PLAN.faults[0].duration_s * 1e9)
    survived = 0
    for seed in SEEDS:
        spec = replace(default_spec(SCENARIO, CONFIG, seed, mode="real"), faults=PLAN, size=SIZE)
        replay = f"seed {seed}; replay: {spec.command()}"
        before = pg_processes.cluster_pids(pg.datadir)
        history, events = run_spec(spec, postgres_url=pg.url)

        report = check_history(history, events, checkers=CHECKERS)
        first = next((a.explanation for v in report.verdicts for a in v.anomalies), "")
        unexpected = unexpected_names(report, EXPECTED_FINDINGS.get((SCENARIO, CONFIG)))
        assert not unexpected, f"{unexpected}: {first[:300]}\n{replay}"

        (fault,) = [e for e in events if e.kind == "fault"]
        detail = json.loads(fault.detail or "{}")
        assert detail["fault"] == FaultKind.PG_SIGKILL, detail
        assert detail["postmaster"] in before, (detail, before)
        assert not pg_processes.alive(detail["postmaster"]), replay
        assert pg.running
        assert detail["postmaster"] not in pg_processes.cluster_pids(pg.datadir)
        assert fault.end_ns is not None

        ops = _ops(history)
        # Held up: in flight at a moment the server was surely down (the fault
        # sleeps its duration before it restarts the server), answered after.
        # Neither "longer than the outage" nor "after fault.end_ns": a client
        # between statements at the kill starts its next one during the outage,
        # and pg_ctl reports the restart only after the server already answers.
        down_until = fault.start_ns + duration_ns
        waited = [
            o
            for o in ops
            if o.invoke_ns < down_until and (o.complete_ns is None or o.complete_ns > down_until)
        ]
        overlapping = [
            (o.op_id, o.kind.value, o.status.value, (o.invoke_ns - fault.start_ns) / 1e6,
             None if o.complete_ns is None else (o.complete_ns - fault.start_ns) / 1e6)
            for o in ops
            if o.invoke_ns < fault.end_ns and (o.complete_ns is None or o.complete_ns > fault.start_ns)
        ]
        diagnosis = (
            f"outage {(fault.end_ns - fault.start_ns) / 1e6:.0f} ms; ops overlapping it "
            f"(id, kind, status, invoke/complete ms after the kill): {overlapping}\n{replay}"
        )
        assert waited, f"no statement was held up by the outage; {diagnosis}"
        # Some stalled rather than failed: the outage's refusals are retried.
        assert any(o.status is Status.OK for o in waited), diagnosis
        assert any(o.status is Status.OK for o in ops if o.invoke_ns > fault.end_ns), replay

        assert not _lost_writes(ops), f"{_lost_writes(ops)[:3]}\n{replay}"
        survived += sum(
            1
            for a in ops
            for r in ops
            if a.kind is Kind.ADD and a.status is Status.OK and _shared(a)
            and a.complete_ns is not None and a.complete_ns < fault.start_ns
            and r.kind is Kind.READ and r.status is Status.OK
            and r.obj == a.obj and r.invoke_ns > fault.end_ns
        )
    # Writes acknowledged before the kill were read back after the restart.
    assert survived > 0


def test_pg_sigkill_is_a_real_mode_fault() -> None:
    fault = Fault.parse("pg-sigkill@10ms+50ms")
    assert fault == Fault(0.01, FaultKind.PG_SIGKILL, 0.05)
    assert str(fault) == "pg-sigkill@10ms+50ms"
    assert "--faults pg-sigkill@100ms+200ms" in replace(
        default_spec(SCENARIO, CONFIG, 0, mode="real"), faults=PLAN
    ).command()
    with pytest.raises(InvalidUsage, match="pg-sigkill needs --mode real"):
        replace(default_spec(SCENARIO, CONFIG, 0), faults=PLAN)
    # Never drawn at random: a seed's default plan stays what it always was.
    assert all(
        f.kind is not FaultKind.PG_SIGKILL
        for s in range(100)
        for f in default_spec(SCENARIO, CONFIG, s, mode="real").faults.faults
    )


@pytest.mark.postgres
def test_pg_sigkill_needs_the_embedded_server(
    private_pg: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a server this process did not start (as `$COORDSIM_POSTGRES_URL`'s)
    there is no postmaster to kill: misuse, said before any fault acts."""
    monkeypatch.setattr(backends, "embedded_serving", lambda _url: None)
    spec = replace(default_spec(SCENARIO, CONFIG, 0, mode="real"), faults=PLAN, size=1)
    with pytest.raises(ExceptionGroup) as info:  # raised inside the run's task groups
        run_spec(spec, postgres_url=private_pg.url)
    assert info.group_contains(
        InvalidUsage, match="pg-sigkill needs the embedded Postgres", depth=None
    )
    assert private_pg.running


# --- the CLI: one line per failure on stderr ---------------------------------------------------


@pytest.fixture(scope="module")
def cli_run() -> subprocess.CompletedProcess[str]:
    """`coordsim anomalies run` under pg-sigkill, on the embedded cluster the
    command starts itself (the fault needs its owner), stderr not a terminal."""
    coordsim = Path(sys.executable).with_name("coordsim")
    if not coordsim.exists():
        pytest.fail(f"the coordsim command is not installed next to {sys.executable}", pytrace=False)
    env = {k: v for k, v in os.environ.items() if k != backends.POSTGRES_URL_ENV}
    argv = [str(coordsim), "anomalies", "run", SCENARIO, "--config", CONFIG, "--seed", "1",
            "--mode", "real", "--size", str(SIZE), "--faults", str(PLAN)]
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=300, check=False, cwd="/"
    )


@pytest.mark.postgres
def test_cli_run_under_pg_sigkill_is_valid(cli_run: subprocess.CompletedProcess[str]) -> None:
    assert cli_run.returncode == 0, cli_run
    assert "verdict: valid" in cli_run.stdout
    assert f"faults: {PLAN}" in cli_run.stdout
    assert not _CLEAR_PASSWORD.search(cli_run.stdout + cli_run.stderr)


@pytest.mark.postgres
def test_cli_logs_outage_failures_one_line_each(
    cli_run: subprocess.CompletedProcess[str],
) -> None:
    assert "Traceback" not in cli_run.stderr, cli_run.stderr
    lines = [json.loads(line) for line in cli_run.stderr.splitlines() if line.strip()]
    assert all(isinstance(line, dict) for line in lines)  # structlog's JSON lines
    # The outage was seen, and each library failure is one classified line.
    failures = [line for line in lines if "error" in line]
    assert all(line.get("tier") in ("determinate", "indeterminate") for line in failures), failures
