"""Sweeps on Spark: N seeds of one scenario as Spark tasks, each seed
simulated in-process in virtual mode and written as a trace, then one replay
of them all — the way a simulation farm runs thousands of seeds.

Traces go to a directory every executor can write (local for `local[*]`; a
shared filesystem on a cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["TASKS_PER_CORE", "run_seed", "simulate"]

#: Tasks per core of the sweep: enough that a slow seed does not leave a core
#: idle at the end, few enough that scheduling is not the cost.
TASKS_PER_CORE: Final = 8


def run_seed(
    out: str, scenario: str, config: str, seed: int, known_bad: Sequence[str] = ()
) -> tuple[int, str, int]:
    """Runs one seed and writes its trace to `out/<scenario>-<config>-sNNNN`;
    (seed, trace dir, operations). Executed inside a Spark task."""
    from sim.history.traces import write_trace
    from sim.nemesis.anomalies import run_scenario
    from sim.nemesis.anomaly_scenarios import SCENARIOS
    from sim.nemesis.anomaly_spec import parse_known_bad

    bad = parse_known_bad(list(known_bad))
    h, events = run_scenario(scenario, config, seed, known_bad=bad)
    suffix = "".join(f"+{b}" for b in known_bad)
    run = f"{scenario}-{config}{suffix}-s{seed:04d}"
    d = f"{out.rstrip('/')}/{run}"
    write_trace(d, h, events, run=run, config=config + suffix, seed=seed,
                extra_meta={"workload": scenario, "concurrency": SCENARIOS[scenario].clients})
    return seed, d, h.n


def simulate(
    spark: Any, out: str, scenario: str, config: str, seeds: Sequence[int], known_bad: Sequence[str] = ()
) -> list[tuple[int, str, int]]:
    """Runs `seeds` as Spark tasks (a few seeds per task: `TASKS_PER_CORE`
    tasks per core, so a thousand seeds are not a thousand schedulings); the
    trace directories come back to the driver (a few bytes each), sorted by
    seed."""
    from sim.nemesis.anomaly_scenarios import SCENARIOS
    from sim.nemesis.anomaly_spec import parse_known_bad
    from sim.spark.session import SparkUnavailable

    if scenario not in SCENARIOS:
        raise SparkUnavailable(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    parse_known_bad(list(known_bad))  # bad names fail here, not in a task
    kb = tuple(known_bad)
    cores = max(1, int(spark.sparkContext.defaultParallelism))
    rdd = spark.sparkContext.parallelize(list(seeds), max(1, min(len(seeds), cores * TASKS_PER_CORE)))
    rows = rdd.map(lambda s: run_seed(out, scenario, config, s, kb)).collect()
    return sorted(rows)
