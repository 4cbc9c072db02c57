"""Runs an anomaly scenario (`sim.nemesis.anomaly_scenarios`) as a `Spec`
(`sim.nemesis.anomaly_spec`) says, optionally under a nemesis
(`sim.nemesis.nemesis`), and returns the recorded history the checkers judge.

`run_scenario` is the one entry point the regression suite, `coordsim anomalies`,
`coordsim shrink` and the Spark sweep call. In virtual mode (the default) same
arguments ⇒ same history; real mode runs the same bodies on the stock loop
against a fresh Postgres database, where the seed fixes the statements and the
fault plan but not the interleaving. Importing this module has no side effects.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Final

import anyio

from coordinator.config import KnownBad
from sim.history.recorder import HistoryRecorder
from sim.load.deployment import switchable_latency
from sim.load.driver import drive
from sim.load.scenarios.builtin import PROGRAMS
from sim.nemesis.anomaly_scenarios import latency_model, scenario_named
from sim.nemesis.anomaly_spec import coordinator_config, default_spec, rollout_config
from sim.nemesis.nemesis import Nemesis
from sim.runtime.core import Runtime, run
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.latency import LogNormal

if TYPE_CHECKING:
    from collections.abc import Callable

    from sim.history.model import Event, History
    from sim.nemesis.anomaly_spec import Spec
    from sim.nemesis.plan import FaultPlan, Mode

__all__ = ["RunStuck", "run_scenario", "run_spec", "stuck_error"]

#: How many of a stuck run's last operations its report shows.
STUCK_LAST_OPS: Final = 5


class RunStuck(CoordsimError):
    """A run did not finish within its stuck limit: a result (a liveness
    failure, exit 1), not a crash. `last` describes its last operations."""

    def __init__(self, after_s: float, *, virtual: bool, last: list[str], ops: int, why: str = "") -> None:
        unit = "simulated s" if virtual else "s of wall time"
        shown = "; ".join(last) if last else "none"
        what = why or f"not finished after {after_s:g} {unit}"
        super().__init__(f"the run was stuck: {what} ({ops} operations recorded; last: {shown})")
        self.after_s = after_s
        self.last = last
        self.ops = ops


def run_scenario(
    name: str,
    config_name: str,
    seed: int,
    *,
    known_bad: KnownBad = KnownBad(),  # noqa: B008 - frozen, never mutated
    faults: FaultPlan | None = None,
    size: int | None = None,
    clients: int | None = None,
    mode: Mode = "virtual",
    postgres_url: str | None = None,
) -> tuple[History, list[Event]]:
    """Runs one scenario and returns its history and internal events.

    Args:
        name: a key of `SCENARIOS` (`sim.nemesis.anomaly_scenarios`).
        config_name: a named coordinator configuration (`coordinator.config.named`).
        seed: drives every choice (jitter, operations, the default fault plan).
        known_bad: defects to switch on.
        faults: the nemesis plan; None: the scenario's default plan for `seed`.
        size: operations (or rounds) per client; None: the scenario's default.
        clients: None: the scenario's default.
        mode: "virtual" or "real" (see `run_spec`).
        postgres_url: real mode's server (see `run_spec`).
    """
    spec = default_spec(name, config_name, seed, known_bad=known_bad, mode=mode)
    spec = replace(
        spec,
        faults=spec.faults if faults is None else faults,
        size=spec.size if size is None else size,
        clients=spec.clients if clients is None else clients,
    )
    return run_spec(spec, postgres_url=postgres_url)


def run_spec(
    spec: Spec, *, postgres_url: str | None = None, on_death: Callable[[int], None] | None = None
) -> tuple[History, list[Event]]:
    """Runs `spec` (see `run_scenario`). `on_death` is told the pid of an
    embedded server's postmaster that dies under the run.

    Virtual mode: the virtual-time loop and in-memory stores with modeled
    latency. Real mode: the stock loop, and a fresh database (dropped
    afterwards) on `postgres_url`'s server — else `$COORDSIM_POSTGRES_URL`'s,
    else an embedded throwaway cluster started for this run — holding persist's
    Consensus, the oracle, its timestamp store and the catalog stash, with Blob in files. Only the modeled
    parts (replica hops, the catalog feed, coordinator CPU) keep their latency
    model there.

    Raises:
        InvalidUsage: a bad spec.
        BackendUnavailable: real mode found no Postgres.
        RunStuck: the run did not finish within `spec.stuck_limit_s`.
    """
    if spec.mode == "virtual":
        if postgres_url is not None:
            raise InvalidUsage("postgres_url is for real mode; this spec is virtual")
        return _run(spec, None)
    if postgres_url is not None:
        return _run(spec, postgres_url)
    from sim.services.postgres import postgres_server

    with postgres_server(fsync=False, on_death=on_death) as url:
        return _run(spec, url)


def stuck_error(rec: HistoryRecorder, after_s: float, *, virtual: bool, why: str = "") -> RunStuck:
    """The report of a run stopped as stuck: its last operations, one line each."""
    history = rec.history()
    last = []
    for i in range(max(0, history.n - STUCK_LAST_OPS), history.n):
        op = history.op(i)
        what = f"{op.kind.value} {op.obj}" if op.obj is not None else op.kind.value
        last.append(f"process {op.process} {what}: {op.status.value}"
                    + (f" {op.error_code}" if op.error_code else ""))
    return RunStuck(after_s, virtual=virtual, last=last, ops=history.n, why=why)


def _run(spec: Spec, postgres_url: str | None) -> tuple[History, list[Event]]:
    sc = scenario_named(spec.scenario)
    if spec.clients < 1 or spec.size < 1:
        raise InvalidUsage(f"a scenario needs clients >= 1 and size >= 1: {spec}")
    cfg = rollout_config(coordinator_config(spec.config).with_overrides(known_bad=spec.known_bad), spec.faults)
    base = latency_model()
    if sc.oracle_spread is not None:
        base = base.with_overrides({"oracle.pg": LogNormal(0.0008, sc.oracle_spread)})
    latency, switch = switchable_latency(base)
    body = PROGRAMS[sc.program]

    limit = spec.stuck_limit_s

    async def main(rt: Runtime) -> HistoryRecorder:
        rec = HistoryRecorder(rt.now)
        # Virtual seconds: a scenario takes well under one; a run that has not
        # finished after this long is stuck (a liveness bug), not slow. Real
        # mode: wall seconds, `--stuck-after`.
        with anyio.move_on_after(limit) as scope:
            await _scenario_main(rt, rec)
        if scope.cancelled_caught:
            raise stuck_error(rec, limit, virtual=postgres_url is None)
        return rec

    async def _scenario_main(rt: Runtime, rec: HistoryRecorder) -> None:
        sims = drive(rt, cfg, rec, switch=switch, postgres_url=postgres_url,
                     n_clients=spec.clients, size=spec.size)
        async with sims as sim, anyio.create_task_group() as tg:
            tg.start_soon(Nemesis(sim.dep, spec.faults).run)
            await body(sim)

    rec = run(main, seed=spec.seed, virtual=postgres_url is None, latency=latency, schedule=spec.schedule)
    return rec.history(), rec.events()
