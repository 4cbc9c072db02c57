"""Anomaly sweeps: one scenario over many seeds, spread over worker processes,
each seed checked by every checker, results gathered into one summary.

The summary is a function of the seeds alone: results are sorted by seed and
hold no wall time and no worker count, so `--jobs 1` and `--jobs 8` write the
same `summary.json`. A seed's run depends only on its `SeedTask` (virtual mode:
same task, same history), which is also all a worker receives.
"""

from __future__ import annotations

import concurrent.futures
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, final

from sim.history.checker import CHECKERS, check_history
from sim.history.checker.verdict import Outcome
from sim.history.traces import write_trace
from sim.history.verdict_file import VERDICT_FILE, outcome_json, verdict_document, write_verdict
from sim.load.limits import MAX_SEEDS
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_spec import Spec, default_spec, parse_known_bad
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import atomic_write
from sim.runtime.schedule import parse_schedule
from sim.runtime.workers import MAX_JOBS, check_jobs, workers

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from sim.history.checker.run import Report
    from sim.history.model import Event, History

__all__ = [
    "MAX_JOBS",
    "SUMMARY_FILE",
    "CheckerRun",
    "SeedResult",
    "SeedTask",
    "Summary",
    "SweepWriter",
    "crash_line",
    "run_seed",
    "sweep",
    "tasks",
    "trace_dir_name",
    "write_run_trace",
]

SUMMARY_FILE: Final = "summary.json"
#: What a seed can end as: the checkers' outcomes, or the simulated system crashed.
CRASHED: Final = "crashed"
INTERNAL_ERROR: Final = "XX000"


@final
@dataclass(frozen=True)
class SeedTask:
    """Everything one seed's run depends on, and all a worker is sent (it must
    pickle). `schedule` is the virtual loop's scheduling policy
    (`sim.runtime.schedule`)."""

    scenario: str
    config: str
    seed: int
    known_bad: tuple[str, ...] = ()
    schedule: str = "fifo"

    def spec(self) -> Spec:
        """The run: the scenario's defaults and the fault plan this seed draws."""
        return default_spec(
            self.scenario, self.config, self.seed, known_bad=parse_known_bad(self.known_bad),
            schedule=self.schedule,
        )

    def rerun(self) -> str:
        """The command that reruns the seed, its scheduling policy included."""
        return self.spec().command()


@final
@dataclass(frozen=True)
class CheckerRun:
    """One checker on one seed: its outcome and time (the sweep's verdict.json
    sums the times; summary.json leaves them out, as they are not deterministic)."""

    name: str
    outcome: str
    seconds: float
    skipped: bool


@final
@dataclass(frozen=True)
class SeedResult:
    """One seed's outcome. `history`/`events`/`report` are kept only for a
    failing seed (its trace is written), so a clean sweep sends back a few
    hundred bytes per seed."""

    seed: int
    ops: int
    #: "valid", "invalid", "unknown" (the checkers'), or "crashed".
    outcome: str
    rerun: str
    #: Anomalies per name, over every checker, including those not kept.
    anomalies: dict[str, int] = field(default_factory=dict)
    #: Operations failed with XX000: every checker allows them (a failed
    #: statement reveals nothing), but each is a bug of the system.
    internal_errors: int = 0
    #: The crash, one line, if the simulated system raised.
    error: str | None = None
    checkers: tuple[CheckerRun, ...] = ()
    #: Operations the checkers had to judge, and judged (issue 34: an
    #: unknown seed is one where they differ).
    ops_to_judge: int = 0
    ops_judged: int = 0
    report: Report | None = None
    history: History | None = None
    events: list[Event] | None = None

    @property
    def failing(self) -> bool:
        """An anomaly, an internal error or a crash: a seed to rerun."""
        return self.outcome in (Outcome.INVALID.value, CRASHED) or self.internal_errors > 0


def tasks(
    scenario: str,
    config: str,
    *,
    seeds: int,
    first_seed: int = 0,
    known_bad: Sequence[str] = (),
    schedule: str = "fifo",
) -> list[SeedTask]:
    """The sweep's tasks, validated here (in the caller's process) so bad input
    is one error before any worker starts.

    Raises:
        InvalidUsage: an unknown scenario, configuration, known-bad variant or
            scheduling policy, or seeds outside 1..MAX_SEEDS or beyond 64 bits.
    """
    policy = parse_schedule(schedule)
    if not 1 <= seeds <= MAX_SEEDS:
        raise InvalidUsage(f"--seeds must be between 1 and {MAX_SEEDS}, got {seeds}")
    last = first_seed + seeds - 1
    if not (first_seed > -(2**63) and last < 2**63):
        raise InvalidUsage(
            f"seeds {first_seed}..{last} do not fit in 64 bits (a trace stores a seed as int64)"
        )
    bad = tuple(sorted({b.replace("-", "_") for b in known_bad}))
    out = [SeedTask(scenario, config, s, bad, policy) for s in range(first_seed, first_seed + seeds)]
    out[0].spec()  # unknown scenario, config or variant: fail now, with the known names
    return out


def run_seed(task: SeedTask) -> SeedResult:
    """Runs and checks one seed with every checker. A crash of the simulated
    system is a result (with its rerun command), not an error of the sweep."""
    spec = task.spec()
    rerun = task.rerun()
    try:
        history, events = run_spec(spec)
    except Exception as exc:  # the system under test crashed: that is a finding
        return SeedResult(task.seed, 0, CRASHED, rerun, error=crash_line(exc))
    report = check_history(history, events, checkers=CHECKERS)
    counts: dict[str, int] = {}
    for v in report.verdicts:
        for name, n in v.counts.items():
            counts[name] = counts.get(name, 0) + n
    internal = sum(1 for code in history.error_code if code == INTERNAL_ERROR)
    runs = tuple(
        CheckerRun(v.checker, v.outcome.value, v.seconds, v.skipped) for v in report.verdicts
    )
    result = SeedResult(
        task.seed, history.n, report.outcome.value, rerun,
        dict(sorted(counts.items())), internal, checkers=runs,
        ops_to_judge=report.ops_to_judge, ops_judged=report.ops_judged,
    )
    if not result.failing:
        return result
    return replace(result, report=report, history=history, events=events)


def crash_line(exc: BaseException) -> str:
    """One line naming a crash: the exception, or for a task group's
    `ExceptionGroup` the exceptions it holds (what actually went wrong; the
    first few, each once), at most 500 characters."""
    leaves: list[str] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            text = " ".join(f"{type(e).__name__}: {e}".split())
            if text not in leaves:
                leaves.append(text)

    walk(exc)
    if not isinstance(exc, BaseExceptionGroup):
        return leaves[0][:500]
    shown = "; ".join(leaves[:3]) + (f"; and {len(leaves) - 3} more" if len(leaves) > 3 else "")
    return f"{type(exc).__name__} of {shown}"[:500]


def sweep(
    work: Sequence[SeedTask],
    *,
    jobs: int,
    on_result: Callable[[SeedResult], None] | None = None,
    run: Callable[[SeedTask], SeedResult] = run_seed,
) -> list[SeedResult]:
    """Runs every task, on `jobs` worker processes (1: in this process), and
    returns the results sorted by seed. `on_result` sees each result as it
    arrives (in completion order), in this process — where traces are written
    and progress shown. `run` replaces `run_seed` (tests); with `jobs > 1` it
    is pickled, so it must be a module-level function.

    Raises:
        InvalidUsage: `jobs` outside 1..MAX_JOBS.
    """
    check_jobs(jobs)
    results: list[SeedResult] = []

    def done(r: SeedResult) -> None:
        if on_result is not None:
            on_result(r)
        # Only the trace needs the history: keep memory flat over 10^4 seeds.
        results.append(_without_history(r))

    with workers(min(jobs, len(work)), preload=__name__) as pool:
        if pool is None:
            for t in work:
                done(run(t))
        else:
            futures = [pool.submit(run, t) for t in work]
            for f in concurrent.futures.as_completed(futures):
                done(f.result())
    return sorted(results, key=lambda r: r.seed)


def _without_history(r: SeedResult) -> SeedResult:
    if r.history is None and r.report is None:
        return r
    return replace(r, report=None, history=None, events=None)


@final
@dataclass(frozen=True)
class Summary:
    """A sweep's totals, from results sorted by seed (see the module docstring)."""

    scenario: str
    config: str
    known_bad: tuple[str, ...]
    results: tuple[SeedResult, ...]
    schedule: str = "fifo"

    @property
    def outcome(self) -> Outcome:
        """invalid if a seed failed (anomaly, internal error, crash), else unknown
        if a checker could not decide for a seed, else valid."""
        if any(r.failing for r in self.results):
            return Outcome.INVALID
        if any(r.outcome == Outcome.UNKNOWN.value for r in self.results):
            return Outcome.UNKNOWN
        return Outcome.VALID

    @property
    def ops(self) -> int:
        return sum(r.ops for r in self.results)

    @property
    def failing(self) -> list[SeedResult]:
        return [r for r in self.results if r.failing]

    def by_name(self) -> dict[str, dict[str, int]]:
        """Per anomaly name: seeds showing it, and anomalies in all (sorted by name)."""
        out: dict[str, dict[str, int]] = {}
        for r in self.results:
            for name, n in r.anomalies.items():
                e = out.setdefault(name, {"seeds": 0, "count": 0})
                e["seeds"] += 1
                e["count"] += n
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, Any]:
        """`summary.json`'s document; trace paths are relative to the output directory."""
        seeds = [r.seed for r in self.results]
        return {
            "scenario": self.scenario,
            "config": self.config,
            "known_bad": list(self.known_bad),
            "schedule": self.schedule,
            "seeds": {"first": min(seeds), "last": max(seeds), "count": len(seeds)},
            "valid": outcome_json(self.outcome),
            "runs": len(self.results),
            "ops": self.ops,
            "anomalies": self.by_name(),
            "internal_errors": sum(r.internal_errors for r in self.results),
            "crashed": [r.seed for r in self.results if r.outcome == CRASHED],
            "unknown": [r.seed for r in self.results if r.outcome == Outcome.UNKNOWN.value],
            "failing": [
                {
                    "seed": r.seed,
                    "outcome": r.outcome,
                    "anomalies": r.anomalies,
                    "internal_errors": r.internal_errors,
                    "error": r.error,
                    "rerun": r.rerun,
                    # The key's name before 0.2 ("replay" names the Spark job): kept until 0.3.
                    "replay": r.rerun,
                    # A crash leaves no history to write: its rerun line is all there is.
                    "trace": None if r.outcome == CRASHED else trace_dir_name(r.seed),
                }
                for r in self.failing
            ],
        }


def trace_dir_name(seed: int) -> str:
    """A failing seed's trace directory, relative to the sweep's output."""
    return f"traces/seed-{seed}"


def write_run_trace(directory: Path, spec: Spec, history: History, events: Sequence[Event]) -> None:
    """The trace of one anomaly run, as `coordsim anomalies run --out` and the
    sweep both write it (its rerun command and scheduling policy in the
    metadata, so a rerun runs the same interleaving; `replay`, the key's name
    before 0.2, is kept until 0.3)."""
    write_trace(directory, history, events, run=f"{spec.scenario}-{spec.seed}", config=spec.config,
                seed=spec.seed, extra_meta={"scenario": spec.scenario, "mode": spec.mode,
                                            "schedule": spec.schedule,
                                            "rerun": spec.command(), "replay": spec.command()})


@final
class SweepWriter:
    """Writes a sweep's output under `stage` (a staging directory; `shown` is
    the output as the user named it): each failing seed's trace and
    verdict.json as it arrives, then summary.json and the sweep's verdict.json."""

    def __init__(self, stage: Path, shown: Path) -> None:
        self.stage = stage
        self.shown = shown
        self._anomalies: list[dict[str, Any]] = []

    def add(self, task: SeedTask, r: SeedResult) -> None:
        """Writes `r`'s trace if it failed (the history is dropped afterwards)."""
        if not r.failing:
            return
        d = self.stage / trace_dir_name(r.seed)
        if r.history is None or r.report is None:
            # A crash leaves no history: the rerun line is the reproduction.
            return
        write_run_trace(d, task.spec(), r.history, r.events or [])
        doc = verdict_document(r.report, trace=str(self.shown / trace_dir_name(r.seed)), ops=r.ops)
        write_verdict(d / VERDICT_FILE, doc)
        self._anomalies += [{"seed": r.seed, **a} for a in doc["anomalies"]]

    def finish(self, summary: Summary) -> None:
        """summary.json, and a verdict.json over the whole sweep: the schema of
        one run's, with each anomaly's `seed`, checker times summed over seeds,
        `trace` the output directory and `runs` the seeds."""
        text = json.dumps(summary.to_json(), indent=2) + "\n"
        atomic_write(self.stage / SUMMARY_FILE, lambda p: p.write_text(text, encoding="utf-8"))
        checkers: dict[str, dict[str, Any]] = {}
        for r in summary.results:
            for c in r.checkers:
                e = checkers.setdefault(
                    c.name, {"name": c.name, "seconds": 0.0, "outcomes": set(), "skipped": True}
                )
                e["seconds"] += c.seconds
                if not c.skipped:
                    e["outcomes"].add(c.outcome)
                    e["skipped"] = False
        anomalies = sorted(self._anomalies, key=lambda a: a["seed"])  # arrival order is the pool's
        doc = {
            "generator": "coordsim",
            "valid": outcome_json(summary.outcome),
            "anomalies": anomalies,
            "checkers": [
                {
                    "name": e["name"],
                    "seconds": e["seconds"],
                    "valid": outcome_json(_worst(e["outcomes"])),
                    "skipped": e["skipped"],
                }
                for e in checkers.values()
            ],
            "anomaly_counts": {n: e["count"] for n, e in summary.by_name().items()},
            "trace": str(self.shown),
            "ops": summary.ops,
            "runs": len(summary.results),
            # Over every seed: what the checkers had to judge and judged; the
            # seeds that left something unjudged (unknown) by number.
            "coverage": {
                "ops": sum(r.ops_to_judge for r in summary.results),
                "judged": sum(r.ops_judged for r in summary.results),
                "unknown_seeds": [r.seed for r in summary.results if r.outcome == Outcome.UNKNOWN.value],
            },
        }
        write_verdict(self.stage / VERDICT_FILE, doc)


def _worst(outcomes: set[str]) -> Outcome:
    for o in (Outcome.INVALID, Outcome.UNKNOWN):
        if o.value in outcomes:
            return o
    return Outcome.VALID
