"""The row of one concurrency level of one (workload, configuration): what
`results.csv`, the tables, plots and conclusions read, merged from every
pass's window(s) of that level (`level_row`).

A row carries each figure with what judges it: throughput with its interval
and per-pass samples, latencies with their sample count (None when too few to
estimate), and whether the cell is steady and not host-bound, the condition
for any conclusion to rest on it.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, final

from sim.compare.hostbound import host_bound
from sim.compare.stats import estimate, percentile_shown
from sim.load import steady
from sim.load.loadgen import LevelResult, Moments, new_histogram, values_at_percentiles
from sim.runtime.backend_stats import BackendWindow, HandlerStats, KindStats
from sim.runtime.pg import isolation_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hdrh.histogram import HdrHistogram

    from sim.load.run_config import RunConfig

__all__ = ["BACKEND_GROUPS", "LevelRow", "level_row"]

#: Backend kinds reported together as well as one by one (`<prefix>*` in
#: `LevelRow.backend`): the Postgres oracle's statements, the timestamp store's
#: transactions (today's oracle: `confirm_leadership`, `write_upper`), the catalog
#: stash's and persist Consensus's operations.
BACKEND_GROUPS: Final = ("oracle.pg.", "stash.", "catalog.stash.", "consensus.")


@final
@dataclass(frozen=True)
class LevelRow:
    """One concurrency level of one (workload, configuration): `results.csv`'s
    row (see `sim.compare.report`). Throughput is the mean over `repeats` windows with
    its 95 % half-width (None with one window); latencies (ms) come from every
    window's operations together, `latency_samples` of them, and are None when
    too few to estimate (`sim.compare.stats.percentile_shown`). Errors are operations
    that failed, by SQLSTATE-like code. `verdict` is the checkers' judgement
    of the whole run this level belongs to ("" until checked)."""

    workload: str
    config: str
    mode: str
    concurrency: int
    repeats: int
    window_s: float
    ops: int
    errors: int
    errors_by_code: tuple[tuple[str, int], ...]
    throughput_ops_s: float
    throughput_ci95: float | None
    throughput_samples: tuple[float, ...]
    latency_samples: int
    p50_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    p50_samples_ms: tuple[float, ...]
    p99_samples_ms: tuple[float, ...]
    oracle_queries_per_op: float | None  # None: not sampled (a scenario script's row)
    loop_busy_fraction: float | None
    loop_messages_per_op: float | None = None  # None: not sampled, or no event loop (decoupled)
    verdict: str = ""
    # --- issue 33: uncensored latency, steady state, host-bound -----------------
    #: Latency over every operation started in the windows (ms): mean, sample
    #: standard deviation, least and greatest; None with no operation.
    mean_ms: float | None = None
    stddev_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    #: Operations still running at the drain limit: counted at their lower bound.
    censored: int = 0
    #: Closed loop: mean latency x throughput / clients (1.0 in steady state,
    #: Little's law); None for an open loop or with no operation.
    littles_law_ratio: float | None = None
    #: Whether the cell passed the steady-state checks (`sim.compare.steady`);
    #: `steady_note` says which failed ("" when steady).
    steady: bool = True
    steady_note: str = ""
    #: Real mode: the host resource that limited the cell (e.g. "coordsim CPU 97 %"), else "".
    host_bound: str = ""
    #: Real mode, averaged over the passes' levels (None in virtual mode):
    #: coordsim's process CPU / wall (of the one core its loop can use), how
    #: late a 1 ms timer fired (ms), the cores Postgres's processes and the
    #: whole machine used (`sim.compare.hostbound`).
    coordsim_cpu: float | None = None
    loop_lag_ms: float | None = None
    postgres_cpu_cores: float | None = None
    host_cpu_cores: float | None = None
    #: Open loop: the offered arrival rate (ops/s) and whether the queue grew.
    offered_ops_s: float | None = None
    saturated: bool = False
    #: Per pass: mean latency (ms), window actually used (s), Little's law ratio.
    mean_samples_ms: tuple[float, ...] = ()
    window_samples_s: tuple[float, ...] = ()
    littles_law_samples: tuple[float, ...] = ()
    #: Per pass: throughput in the first and second half of its window (ops/s).
    first_half_samples: tuple[float, ...] = ()
    second_half_samples: tuple[float, ...] = ()
    #: Every window's latencies together (µs), for `.hgrm` files; not a CSV column.
    histogram: HdrHistogram | None = field(default=None, compare=False, repr=False)
    # --- issue 35: what the backends cost, at which isolation level -----------------
    #: Real mode: the level the oracle, timestamp-store, catalog-stash and Consensus sessions ran at
    #: (`serializable`, as CockroachDB, or `read-committed`); "" in virtual mode.
    pg_isolation: str = ""
    #: Real mode, over the level's span in every pass: round trips per backend
    #: kind (`oracle.pg.read_ts`, `stash.confirm_leadership`, `catalog.stash.append`,
    #: `consensus.cas`, …) and per `BACKEND_GROUPS` prefix (`oracle.pg.*`, …), with
    #: count, p50, p99 and retries; empty in virtual mode.
    backend: tuple[KindStats, ...] = field(default=(), compare=False)
    #: Real mode: failed backend attempts that were retried, and of them the
    #: serialization failures (SQLSTATE 40001); None in virtual mode.
    backend_retries: int | None = None
    retries_40001: int | None = None
    #: Real mode, over the level's span in every pass: the Python CPU the
    #: coordinator spent per handler kind (`client.Select`, `internal.stage.ready`,
    #: `statement.Insert`, …); empty in virtual mode, whose CPU is `Costs`.
    handler_cpu: tuple[HandlerStats, ...] = field(default=(), compare=False)
    # --- issue 36: several serving processes ---------------------------------------
    #: The configuration's adapters (serving processes sharing oracle, catalog,
    #: shards and controllers); 1 for the event loop.
    adapters: int = 1
    #: Modeled cores of the whole configuration (every adapter's pool); 1
    #: for the event loop. The scale-out table tells adapters from cores by it.
    cores: int = 1
    #: Of the level's group commits, the retries after another adapter's
    #: append won (a shared-shard contention figure; 0 with one adapter).
    lost_races_per_commit: float | None = None
    #: Group commits per statement over the level (periodic ones included):
    #: its inverse is how many writes a commit carried, and the per-commit
    #: work (oracle calls, appends) is spread over that many statements.
    group_commits_per_op: float | None = None

    @property
    def error_rate(self) -> float:
        return self.errors / self.ops if self.ops else 0.0

    @property
    def concludable(self) -> bool:
        """Whether conclusions may use this cell: steady and not host-bound."""
        return self.steady and not self.host_bound

def level_row(
    cfg: RunConfig, config_name: str, workload_name: str, res: list[LevelResult], before: Any, after: Any, c: int,
    span: float, *, script: bool = False, backend: Sequence[BackendWindow] = (),
) -> LevelRow:
    """`span`: the level's whole time (warm-up and drain included), over which
    the coordinator's counters moved from `before` to `after` (both None when
    they were not sampled). `script`: the row of a scenario script, which is
    one run of operations, not a steady-state window. `backend`: real mode,
    the backends' round trips over the level's span in each pass."""
    ops = sum(r.ops for r in res)
    merged = new_histogram()
    codes: dict[str, int] = {}
    moments = Moments()
    for r in res:
        merged.add(r.histogram)
        moments = moments.merged(r.latency)
        for code, n in r.errors_by_code.items():
            codes[code] = codes.get(code, 0) + n
    samples = merged.get_total_count()
    tput = estimate([r.throughput for r in res])

    p50, p99, p999 = values_at_percentiles(merged, (50, 99, 99.9))
    shown = functools.partial(percentile_shown, samples)

    oracle_per_op: float | None = None
    busy_fraction: float | None = None
    messages_per_op: float | None = None
    lost_races: float | None = None
    commits_per_op: float | None = None
    if before is not None and after is not None:
        # Both over the level's whole span, warm-up included (the counters are
        # read before and after it): a ratio, so the span cancels out.
        statements = after.statements - before.statements or 1
        oracle_per_op = (after.oracle_calls - before.oracle_calls) / statements
        if after.loop_messages:
            messages_per_op = (after.loop_messages - before.loop_messages) / statements
        busy = after.loop_busy_s - before.loop_busy_s
        busy_fraction = busy / span / max(1, after.loop_cores) if span > 0 else 0.0
        commits = after.group_commits - before.group_commits
        lost_races = (after.lost_races - before.lost_races) / commits if commits > 0 else None
        commits_per_op = commits / statements
    per_result = [r.percentiles_ms((50, 99)) for r in res]
    open_loop = cfg.open_loop_rate is not None and not script
    little = (moments.mean * tput.mean / c if moments.n and c and not open_loop and not script else None)
    return LevelRow(
        workload=workload_name,
        config=config_name,
        mode=cfg.mode,
        concurrency=c,
        repeats=len(res),
        window_s=statistics.fmean(r.elapsed_s for r in res) if res else 0.0,
        ops=ops,
        errors=sum(codes.values()),
        errors_by_code=tuple(sorted(codes.items())),
        throughput_ops_s=tput.mean,
        throughput_ci95=tput.half,
        throughput_samples=tuple(r.throughput for r in res),
        latency_samples=samples,
        p50_ms=p50 / 1000.0 if shown(50) else None,
        p99_ms=p99 / 1000.0 if shown(99) else None,
        p999_ms=p999 / 1000.0 if shown(99.9) else None,
        p50_samples_ms=tuple(p[0] for p in per_result),
        p99_samples_ms=tuple(p[1] for p in per_result),
        oracle_queries_per_op=oracle_per_op,
        loop_busy_fraction=busy_fraction,
        loop_messages_per_op=messages_per_op,
        histogram=merged,
        mean_ms=moments.mean * 1000 if moments.n else None,
        stddev_ms=moments.stdev * 1000 if moments.n else None,
        min_ms=moments.least * 1000 if moments.n else None,
        max_ms=moments.greatest * 1000 if moments.n else None,
        censored=sum(r.censored for r in res),
        littles_law_ratio=little,
        steady=not (note := _steady_note(res, moments, little, tput.half, script=script, open_loop=open_loop)),
        steady_note=note,
        host_bound=host_bound(hosts := [r.host for r in res if r.host is not None]),
        coordsim_cpu=_mean([h.own_cpu for h in hosts]),
        loop_lag_ms=_mean([h.lag_mean_ms for h in hosts]),
        postgres_cpu_cores=_mean([h.postgres_cores for h in hosts]),
        host_cpu_cores=_mean([h.host_cores for h in hosts]),
        offered_ops_s=cfg.open_loop_rate if open_loop else None,
        saturated=note.startswith("saturated"),
        mean_samples_ms=tuple(r.latency.mean * 1000 for r in res),
        window_samples_s=tuple(r.elapsed_s for r in res),
        littles_law_samples=tuple(r.littles_law_ratio or 0.0 for r in res) if little is not None else (),
        first_half_samples=tuple(steady.Slices(tuple(r.slices), r.elapsed_s).first_rate for r in res),
        second_half_samples=tuple(steady.Slices(tuple(r.slices), r.elapsed_s).second_rate for r in res),
        adapters=cfg.coordinator(config_name).adapters,
        cores=max(1, after.loop_cores) if after is not None else 1,
        lost_races_per_commit=lost_races,
        group_commits_per_op=commits_per_op,
        **_backend_fields(cfg, backend),
    )


def _backend_fields(cfg: RunConfig, backend: Sequence[BackendWindow]) -> dict[str, Any]:
    """`LevelRow`'s real-mode backend figures (its defaults in virtual mode)."""
    if cfg.mode != "real":
        return {}
    isolation = isolation_of(cfg.effective_postgres_url()).value
    if not backend:  # not recorded (a scenario script's row)
        return {"pg_isolation": isolation}
    window = BackendWindow.merged(backend)
    kinds = window.kinds()
    return {
        "pg_isolation": isolation,
        "backend": (*kinds, *(window.group(p) for p in BACKEND_GROUPS)),
        "backend_retries": sum(k.retries for k in kinds),
        "retries_40001": sum(k.retries_40001 for k in kinds),
        "handler_cpu": window.handlers(),
    }


def _mean(xs: Sequence[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return statistics.fmean(known) if known else None


def _steady_note(
    res: Sequence[LevelResult], moments: Moments, little: float | None, ci95: float | None, *, script: bool,
    open_loop: bool,
) -> str:
    """Why a level is not steady ("" when it is): `sim.load.steady`'s checks
    on the passes' windows together."""
    if script:
        return "a scenario script: one run, not a steady-state window"
    if not res or not moments.n:
        return "no operation measured"
    if open_loop:
        first, second = Moments(), Moments()
        for r in res:
            first, second = first.merged(r.half_latency[0]), second.merged(r.half_latency[1])
        return steady.saturation_note(
            arrivals=moments.n, completions=sum(r.ops for r in res),
            first_mean_s=first.mean if first.n else None, second_mean_s=second.mean if second.n else None,
            first_n=first.n, second_n=second.n,
        )
    notes = [steady.littles_note(little), steady.window_note(min(r.elapsed_s for r in res), moments.mean)]
    if all(any(r.slices) for r in res):  # fixed-operations runs have no slices
        notes.append(steady.halves_note([steady.Slices(tuple(r.slices), r.elapsed_s) for r in res],
                                        ci95))
    return "; ".join(n for n in notes if n)
