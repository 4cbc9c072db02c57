"""A user's Python scenario measured beside the workloads: each run is one
measurement window of every completed operation, and `--repeat` runs (seeds
`seed`, `seed + 1`, …) give the row its interval. Scripts run on the one
harness (`sim.load.driver.drive`), like the shipped programs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

from sim.compare.rows import level_row
from sim.compare.runner import RunOutput
from sim.history.model import NONE, STATUSES, Status
from sim.history.recorder import HistoryRecorder
from sim.history.traces import write_trace
from sim.load.loadgen import LevelResult
from sim.runtime.core import Runtime, run

if TYPE_CHECKING:
    from collections.abc import Callable

    from sim.history.checker.run import Report
    from sim.history.model import Event, History
    from sim.load.driver import Sim
    from sim.load.run_config import RunConfig
    from sim.load.scenarios import PythonScenario
    from sim.runtime.errors import CoordsimError

__all__ = ["ScriptRun", "run_script", "run_script_once", "verdict_text"]


#: Wall seconds a scenario script may hold the event loop without yielding
#: before it is stopped as stuck: far beyond any one step of a simulation.
NO_YIELD_S: Final = 10.0


@final
@dataclass(frozen=True)
class ScriptRun:
    """One run of a user's Python scenario: what it recorded, the expectations
    it reported failed, and the exception it raised (its own bug), if any."""

    history: History
    events: list[Event]
    failures: list[str]
    error: Exception | None
    #: It did not finish within the stuck limit (a result, exit 1): why.
    stuck: CoordsimError | None = None


def run_script_once(
    cfg: RunConfig, config_name: str, sc: PythonScenario, *, seed: int,
    on_recorder: Callable[[HistoryRecorder], None] | None = None,
) -> ScriptRun:
    """Runs `sc` once on a fresh deployment of `config_name`. The scenario's own
    exception is captured, not raised: the caller reports it with what the
    scenario recorded until then. A scenario that has not finished after the
    anomaly runs' stuck limit (virtual mode: `STUCK_AFTER_S` simulated seconds,
    which only the simulation's progress advances; real mode:
    `REAL_STUCK_AFTER_S` of wall time) is stopped: `stuck` says so. So is one
    that holds the loop (never yields) for `NO_YIELD_S` of wall time, which
    no stuck limit could see (`sim.runtime.watchdog`). `on_recorder` is
    given the run's recorder as it starts (a progress line counts its
    operations)."""
    import anyio

    from sim.load.deployment import Deployment
    from sim.load.driver import Sim
    from sim.load.limits import REAL_STUCK_AFTER_S, STUCK_AFTER_S
    from sim.load.scenarios import raised_by_scenario
    from sim.nemesis.anomalies import stuck_error
    from sim.runtime.watchdog import LoopStalled, loop_watchdog

    holder: dict[str, Any] = {}
    virtual = cfg.mode == "virtual"
    limit = STUCK_AFTER_S if virtual else REAL_STUCK_AFTER_S

    async def main(rt: Runtime) -> None:
        recorder = HistoryRecorder(rt.now)
        if on_recorder is not None:
            on_recorder(recorder)
        deployments = Deployment.for_config(cfg, config_name, rt, recorder)
        async with deployments as dep:
            sim = Sim(rt, dep, recorder)
            holder["sim"] = sim
            with anyio.move_on_after(limit) as scope, loop_watchdog(NO_YIELD_S):
                try:
                    await sc.main(sim)
                except LoopStalled as exc:  # it never gave the loop back
                    holder["stuck"] = stuck_error(recorder, exc.limit_s, virtual=False, why=str(exc))
                except BaseException as exc:  # the scenario's own bug, or its sys.exit
                    if not raised_by_scenario(exc):
                        raise
                    holder["error"] = exc
            if scope.cancelled_caught:
                holder["stuck"] = stuck_error(recorder, limit, virtual=virtual)

    run(main, seed=seed, virtual=cfg.mode == "virtual", latency=cfg.latency())
    sim: Sim = holder["sim"]
    return ScriptRun(sim.recorder.history(), sim.recorder.events(), list(sim.failures), holder.get("error"),
                     holder.get("stuck"))


def run_script(cfg: RunConfig, config_name: str, sc: PythonScenario, trace_dir: Path) -> RunOutput:
    """A user's Python scenario under `config_name`, `cfg.window().repeat`
    times with seeds `cfg.seed`, `cfg.seed + 1`, …, as one row: its operations'
    throughput (operations / the span from the first invocation to the last
    completion) with its interval over the runs, their latencies and errors;
    the coordinator's counters are not sampled (None).
    The first run's trace is written to `trace_dir` and returned for checking."""
    from sim.load.scenarios import scenario_error

    results: list[LevelResult] = []
    kept: ScriptRun | None = None
    clients = 0
    for i in range(cfg.window().repeat):
        one = run_script_once(cfg, config_name, sc, seed=cfg.seed + i)
        if one.error is not None:
            raise scenario_error(sc.path or Path(sc.name), one.error) from one.error
        if one.stuck is not None:
            raise one.stuck
        results.append(_script_result(one.history))
        clients = max(clients, len(set(one.history.client)))
        if kept is None:
            kept = one
            write_trace(trace_dir, one.history, one.events, run=f"{sc.name}/{config_name}", config=config_name,
                        seed=cfg.seed, extra_meta={"workload": sc.name, "mode": cfg.mode})
    assert kept is not None
    # A script may restart its coordinator, whose counters then start over:
    # they are not reported rather than reported wrong.
    row = level_row(cfg, config_name, sc.name, results, None, None, clients, sum(r.elapsed_s for r in results),
                    script=True)
    return RunOutput([row], trace_dir, kept.history, kept.events)


def _script_result(h: History) -> LevelResult:
    """One script run as a measurement window: every completed operation."""
    res = LevelResult(0)
    done = [i for i in range(h.n) if h.complete[i] != NONE]
    if not done:
        return res
    start = min(h.invoke[i] for i in done)
    end = max(h.complete[i] for i in done)
    res.elapsed_s = max(1e-9, (end - start) / 1e9)
    for i in done:
        code = None if STATUSES[h.status[i]] is Status.OK else (h.error_code[i] or "failed")
        res.add((h.complete[i] - h.invoke[i]) / 1e9, code)
    return res


def verdict_text(run_: ScriptRun, report: Report, *, scenario: str, config_name: str, cfg: RunConfig) -> str:
    """`coordsim run`'s verdict on one run of a Python scenario (printed, and
    kept as `verdict.txt`): each checker's outcome and anomalies, the
    coverage, the verdict, the scenario's failed expectations, and a last
    line `FAIL` when either fails the run."""
    lines = [f"{scenario} under {config_name} ({cfg.mode}, seed {cfg.seed}): {len(run_.history)} operations"]
    for v in report.verdicts:
        counts = ", ".join(f"{n} x{c}" for n, c in v.counts.items())
        state = (f"skipped ({v.reason})" if v.reason else "skipped") if v.skipped else v.outcome.value
        lines.append(f"  {v.checker:<9} {state}{' - ' + counts if counts else ''}")
        lines.extend(f"    {a.name}: ops {', '.join(str(o) for o in a.ops)}: {a.explanation}" for a in v.anomalies)
    # A skipped checker is fine only where another judged the same operations
    # (issue 34): the coverage says whether every operation was judged.
    lines.extend(report.coverage_lines() if not report.complete else [f"coverage: {report.coverage_summary()}"])
    lines.append(f"checker verdict: {report.outcome.value}")
    lines.extend(f"expectation failed: {f}" for f in run_.failures)
    if run_.failures or report.outcome.value == "invalid":
        lines.append("FAIL")
    return "\n".join(lines) + "\n"
