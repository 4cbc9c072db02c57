"""Runs one workload under one or more coordinator configurations, in real or
virtual mode, and returns a row per measured concurrency level plus the run's
traces (every client operation and internal event, DESIGN.md §7).

A level is measured `repeat` times in *passes*: each pass is a fresh deployment
(a fresh database in real mode, fresh in-memory stores in virtual mode) that
sets up the schema, warms up, then measures every level in sweep order, one
window each (after that level's warm-up). Pass k (1-based) of every
configuration runs with seed `seed + k - 1`, so the configurations see the same
statements, and the passes are interleaved across configurations (pass 1 of
each, then pass 2 of each, …: ABCABC, not AAABBBCCC), so drift over the run
(the machine, Postgres checkpoints) shows up as variance within each
configuration instead of as a difference between them. A row's interval is
over its passes: windows of one deployment share its state (its database's
size, its WAL and checkpoint timing) and so understate run-to-run noise.

Real mode also records what the backends cost over each level (issue 35): every
Postgres round trip by kind (`sim.runtime.backend_stats`) and every retry, by
SQLSTATE (40001: a serialization failure, which SERIALIZABLE — the default, as
CockroachDB — adds), the isolation level the sessions ran at, and the Python
CPU the coordinator spent per handler kind.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import operator
import pickle
import statistics
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Final, final

import anyio
from hdrh.histogram import HdrHistogram

from sim.compare.hostbound import HostProbe, host_bound
from sim.compare.stats import estimate, percentile_shown
from sim.history.model import Event
from sim.history.recorder import HistoryRecorder
from sim.history.recording import PreparedStatements, RecordingSession
from sim.history.traces import write_trace
from sim.load import steady
from sim.load.deployment import Deployment
from sim.load.loadgen import (
    LevelResult,
    Moments,
    Window,
    measure_closed,
    measure_open,
    new_histogram,
    ops_for_level,
    values_at_percentiles,
)
from sim.load.workloads import OpContext, workload
from sim.runtime.backend_stats import (
    BACKEND_STATS,
    BackendStats,
    BackendWindow,
    HandlerStats,
    KindStats,
)
from sim.runtime.core import Runtime, run
from sim.runtime.pg import isolation_of

if TYPE_CHECKING:
    import concurrent.futures
    from collections.abc import Callable, Generator, Mapping, Sequence
    from pathlib import Path

    from coordinator.session import Coordinator, CoordinatorStatistics
    from sim.history.model import History
    from sim.load.config import Config

__all__ = [
    "BACKEND_GROUPS",
    "LevelRow",
    "PassLevel",
    "PassOutput",
    "RunOutput",
    "level_client",
    "level_ops",
    "level_row",
    "pass_trace_dir",
    "postmaster_pids",
    "run_pair",
    "run_pass",
    "run_workload",
]


#: Backend kinds reported together as well as one by one (`<prefix>*` in
#: `LevelRow.backend`): the Postgres oracle's statements, the timestamp stash's
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
    #: Real mode: the level the oracle, stash and Consensus sessions ran at
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


@final
@dataclass(frozen=True)
class RunOutput:
    rows: list[LevelRow]
    trace_dir: Path
    history: History
    events: list[Event]


@final
class SessionFactory:
    """Recording sessions on one coordinator, each its own history process;
    they share one cache of parsed statements (a level's 64 sessions send
    the same few texts: one parse each, not one per session)."""

    def __init__(self, coord: Coordinator, recorder: HistoryRecorder) -> None:
        self.coord = coord
        self.recorder = recorder
        self._statements = PreparedStatements()

    def __call__(self, client: str) -> RecordingSession:
        return RecordingSession(self.coord.connect(), self.recorder, client=client, statements=self._statements)


def level_ops(cfg: Config, workload_name: str, concurrency: int) -> int:
    """Operations measured at `concurrency`: `ops_per_level` times the workload's
    `ops_scale`, scaled with sqrt(concurrency) (`sim.load.loadgen.ops_for_level`)."""
    base = max(1, math.ceil((cfg.ops_per_level or 1) * workload(workload_name).ops_scale))
    return ops_for_level(base, concurrency)


def level_client(concurrency: int, client: int) -> str:
    """The history `client` label of a measured operation: `L<level>/c<client>`
    (setup is `setup`, warm-up `warmup/c<i>`, background load `bg/...`)."""
    return f"L{concurrency}/c{client}"




@final
@dataclass(frozen=True)
class PassLevel:
    """One level of one pass: its window(s), and the coordinator's counters
    before and after the level with the level's span (both None when not
    sampled) — what `_row` needs to merge passes into one row."""

    concurrency: int
    results: list[LevelResult]
    before: CoordinatorStatistics | None
    after: CoordinatorStatistics | None
    span: float
    #: Real mode: the backends' round trips and retries over the level's span.
    backend: BackendWindow | None = None


@final
@dataclass(frozen=True)
class PassOutput:
    """One pass of one (workload, configuration): its number `index` (1-based),
    its seed, its own output (a row per level from its one window, the trace it
    wrote, its history) and its levels, for merging with the other passes."""

    index: int
    seed: int
    output: RunOutput
    levels: list[PassLevel]


async def measure(
    cfg: Config,
    config_name: str,
    workload_name: str,
    rt: Runtime,
    recorder: HistoryRecorder,
    on_level: Callable[[LevelRow], None],
) -> list[PassLevel]:
    """One pass on one fresh deployment: set-up, warm-up operations, then each
    level in sweep order on the same coordinator, one window each (after the
    level's own `warmup_s`). `on_level` gets this pass's row of each level."""
    wl = workload(workload_name)
    levels: list[PassLevel] = []
    counter = [0]
    window = replace(cfg.window(), repeat=1)
    # Installed before the deployment opens its backends: their clients pick it
    # up when they connect (the coordinator's tasks inherit this context).
    stats = BackendStats() if cfg.mode == "real" else None
    token = BACKEND_STATS.set(stats)
    try:
        async with Deployment.for_config(cfg, config_name, rt, recorder, workload=workload_name) as dep:
            coord = dep.newest
            assert coord is not None
            sessions = SessionFactory(coord, recorder)
            await wl.setup(sessions("setup"), cfg.tables)
            if cfg.warmup_ops:
                warm = Window(ops=cfg.warmup_ops)
                await _level(cfg, sessions, wl.name, rt, counter, 0, min(4, cfg.warmup_ops), warm)
            for c in cfg.concurrency:
                w = window if window.ops is None else replace(window, ops=level_ops(cfg, wl.name, c))
                mark = stats.mark() if stats is not None else None
                before, t0 = coord.statistics(), rt.now()
                res = await _level(cfg, sessions, wl.name, rt, counter, c, c, w)
                after, span = coord.statistics(), rt.now() - t0
                backend = stats.since(mark) if stats is not None and mark is not None else None
                levels.append(PassLevel(c, res, before, after, span, backend))
                on_level(level_row(cfg, config_name, workload_name, res, before, after, c, span,
                                   backend=[backend] if backend is not None else ()))  # fmt: skip
    finally:
        BACKEND_STATS.reset(token)
    return levels


async def _level(
    cfg: Config,
    factory: SessionFactory,
    workload_name: str,
    rt: Runtime,
    counter: list[int],
    level: int,
    concurrency: int,
    window: Window,
) -> list[LevelResult]:
    wl = workload(workload_name)

    def label(i: int) -> str:
        return level_client(level, i) if level else f"warmup/c{i}"

    sessions = [factory(label(i)) for i in range(concurrency)]

    async def op(client: int, k: int) -> str | None:
        ctx = OpContext(client, k, cfg.tables, rt, counter, level=level)
        r = await wl.op(sessions[client], ctx)
        return None if r.error is None else r.error.code.value

    bg_n = [0]

    def bg_session() -> RecordingSession:
        bg_n[0] += 1
        return factory(f"bg/L{level}/{bg_n[0]}")

    results: list[LevelResult] = []
    probe = (
        HostProbe(rt, postmaster_pids(cfg), own_children=factory.coord.child_pids())
        if cfg.mode == "real" and level
        else None
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(wl.background, bg_session, cfg.tables, rt, tag=str(level)))
        if probe is not None:
            probe.start()
            tg.start_soon(probe.lags)
        if cfg.open_loop_rate is not None and level:
            results = await measure_open(rt, op, rate=cfg.open_loop_rate, max_in_flight=concurrency, window=window)
        else:
            results = await measure_closed(rt, op, concurrency=concurrency, window=window)
        tg.cancel_scope.cancel()
    if probe is not None:
        figures = probe.stop()
        for r in results:
            r.host = figures
    return results


def postmaster_pids(cfg: Config) -> Callable[[], list[int]] | None:
    """The embedded Postgres's postmaster, whose CPU is this run's although
    pg_ctl started it (it is not our descendant): for `HostProbe` and the
    run's `HostSampler`. None in virtual mode or for an external server,
    whose processes may be on another machine."""
    from sim.services import pg_processes
    from sim.services.postgres import embedded_serving

    pg = embedded_serving(cfg.postgres_url) if cfg.mode == "real" and cfg.postgres_url else None
    if pg is None:
        return None
    datadir = pg.datadir

    def pids() -> list[int]:
        pid = pg_processes.postmaster_pid(datadir)
        return [] if pid is None else [pid]

    return pids


def level_row(
    cfg: Config, config_name: str, workload_name: str, res: list[LevelResult], before: Any, after: Any, c: int,
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


def _backend_fields(cfg: Config, backend: Sequence[BackendWindow]) -> dict[str, Any]:
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
                                        ci95))  # fmt: skip
    return "; ".join(n for n in notes if n)


def pass_trace_dir(trace_dir: Path, index: int) -> Path:
    """Where pass `index` (1-based) of a pair writes its trace: the first in
    `trace_dir` itself (where every reader of a compare trace finds it), pass k
    in `trace_dir/pass<k>` (a folder of traces, such as `coordsim replay`
    takes, finds them all)."""
    return trace_dir if index == 1 else trace_dir / f"pass{index}"


def run_pass(
    cfg: Config,
    config_name: str,
    workload_name: str,
    trace_dir: Path,
    *,
    index: int,
    on_level: Callable[[LevelRow], None] = lambda row: None,
) -> PassOutput:
    """Pass `index` (1-based) of `workload_name` under `config_name`: a fresh
    deployment on its own loop (virtual or real) with seed `cfg.seed + index -
    1`, measured by `measure`; writes its trace to `pass_trace_dir(trace_dir,
    index)`."""
    levels, history, events = _simulate(cfg, config_name, workload_name, index, on_level)
    return _traced(cfg, config_name, workload_name, trace_dir, index, levels, history, events)


def _simulate(
    cfg: Config,
    config_name: str,
    workload_name: str,
    index: int,
    on_level: Callable[[LevelRow], None] = lambda row: None,
) -> tuple[list[PassLevel], History, list[Event]]:
    """The run of a pass: its levels, history and events."""
    holder: dict[str, Any] = {}

    async def main(rt: Runtime) -> list[PassLevel]:
        recorder = HistoryRecorder(rt.now)
        holder["recorder"] = recorder
        return await measure(cfg, config_name, workload_name, rt, recorder, on_level)

    levels = run(main, seed=cfg.seed + index - 1, virtual=cfg.mode == "virtual", latency=cfg.latency())
    recorder: HistoryRecorder = holder["recorder"]
    return levels, recorder.history(), recorder.events()


def _traced(
    cfg: Config,
    config_name: str,
    workload_name: str,
    trace_dir: Path,
    index: int,
    levels: list[PassLevel],
    history: History,
    events: list[Event],
) -> PassOutput:
    """A pass's output, its trace written (always by the process that owns
    the output directory: see `_in_workers`)."""
    seed = cfg.seed + index - 1
    where = pass_trace_dir(trace_dir, index)
    label = f"{workload_name}/{config_name}" + (f"/pass{index}" if index > 1 else "")
    write_trace(
        where,
        history,
        events,
        run=label,
        config=config_name,
        seed=seed,
        extra_meta={
            "workload": workload_name,
            "mode": cfg.mode,
            "concurrency": list(cfg.concurrency),
            "open_loop_rate": cfg.open_loop_rate,
            "pass": index,
            "passes": cfg.window().repeat,
            # Real mode: the level the backends' sessions ran at (serializable is
            # CockroachDB's; read-committed is not CockroachDB-like).
            "pg_isolation": isolation_of(cfg.effective_postgres_url()).value if cfg.mode == "real" else None,
            "pg_isolation_note": isolation_of(cfg.effective_postgres_url()).label() if cfg.mode == "real" else None,
            # Each level's measured window(s) in the trace's clock (seconds),
            # after any growth: an operation of that level's clients whose
            # invocation lies in one is measured, to its completion.
            "windows": [{"concurrency": lv.concurrency, "start_s": r.start_s, "end_s": r.start_s + r.elapsed_s}
                        for lv in levels for r in lv.results],
        },
    )
    rows = [level_row(cfg, config_name, workload_name, lv.results, lv.before, lv.after, lv.concurrency, lv.span,
                      backend=[lv.backend] if lv.backend is not None else ())
            for lv in levels]  # fmt: skip
    return PassOutput(index, seed, RunOutput(rows, where, history, events), levels)


def run_workload(
    cfg: Config,
    config_names: Sequence[str],
    workload_name: str,
    trace_dirs: Mapping[str, Path],
    *,
    on_level: Callable[[str, int, LevelRow], None] = lambda name, index, row: None,
    on_pass: Callable[[str, PassOutput], None] = lambda name, p: None,
    pool: concurrent.futures.Executor | None = None,
) -> dict[str, RunOutput]:
    """`workload_name` under every configuration of `config_names`, in
    `cfg.window().repeat` passes interleaved across them (pass 1 of each in
    the given order, then pass 2 of each, …; see the module docstring).

    Args:
        trace_dirs: each configuration's trace directory (its passes go in
            `pass_trace_dir`s of it).
        on_level: called with a configuration, a pass number and that pass's
            row after each level of each pass.
        on_pass: called after each pass with its output (the compare command
            checks each pass's history here).
        pool: in virtual mode, the passes run on these worker processes
            (`sim.runtime.workers`); the callbacks still see them in the order
            above, each pass's levels when the pass is done, and every output
            is the same as without. Real mode always runs one pass at a time,
            here: its numbers are wall-clock.

    Returns:
        Per configuration: a row per level over all passes (`repeats` = the
        number of passes, a sample per pass, latencies merged over them, the
        coordinator's counters summed over them), with the first pass's trace
        directory, history and events.
    """
    order = [(index, name) for index in range(1, cfg.window().repeat + 1) for name in config_names]
    passes: dict[str, list[PassOutput]] = {name: [] for name in config_names}
    outputs: Generator[PassOutput, None, None]
    if pool is not None and cfg.mode == "virtual":
        outputs = _in_workers(pool, cfg, workload_name, trace_dirs, order, on_level)
    else:
        outputs = (run_pass(cfg, name, workload_name, trace_dirs[name], index=index,
                            on_level=functools.partial(on_level, name, index))
                   for index, name in order)  # fmt: skip
    with contextlib.closing(outputs):  # queued passes are cancelled even if on_pass raises
        for (_, name), one in zip(order, outputs, strict=True):
            on_pass(name, one)
            passes[name].append(one)
    out: dict[str, RunOutput] = {}
    for name, mine in passes.items():
        rows = []
        for levels in zip(*(p.levels for p in mine), strict=True):
            res = [r for lv in levels for r in lv.results]
            before, after = _summed([lv.before for lv in levels]), _summed([lv.after for lv in levels])
            span = sum(lv.span for lv in levels)
            backend = [lv.backend for lv in levels if lv.backend is not None]
            rows.append(level_row(cfg, name, workload_name, res, before, after, levels[0].concurrency, span,
                                  backend=backend))  # fmt: skip
        first = mine[0].output
        out[name] = RunOutput(rows, first.trace_dir, first.history, first.events)
    return out


def _in_workers(
    pool: concurrent.futures.Executor,
    cfg: Config,
    workload_name: str,
    trace_dirs: Mapping[str, Path],
    order: Sequence[tuple[int, str]],
    on_level: Callable[[str, int, LevelRow], None],
) -> Generator[PassOutput, None, None]:
    """The passes of `order` submitted to `pool` at once and yielded in that
    order (each after `on_level` has seen its rows). Workers only simulate;
    the traces are written here, as the sweep's are: nothing writes into the
    output directory once this process has stopped (an interrupt) or is
    about to remove it."""
    futures = [pool.submit(_simulated_in_worker, cfg, name, workload_name, index) for index, name in order]
    try:
        for (index, name), future in zip(order, futures, strict=True):
            levels, history, events = pickle.loads(future.result())
            one = _traced(cfg, name, workload_name, trace_dirs[name], index, levels, history, events)
            for row in one.output.rows:
                on_level(name, index, row)
            yield one
    finally:
        for future in futures:  # stopped early: what has not started never will
            future.cancel()


def _simulated_in_worker(cfg: Config, config_name: str, workload_name: str, index: int) -> bytes:
    """`_simulate` in a worker, its result pickled by `_PassPickler`."""
    buffer = io.BytesIO()
    _PassPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(_simulate(cfg, config_name, workload_name, index))
    return buffer.getvalue()


#: An `Event`'s fields in order, read in one call (what `Event(*…)` takes).
_EVENT_FIELDS: Final = operator.attrgetter(*(f.name for f in fields(Event)))


class _PassPickler(pickle.Pickler):
    """Pickles a pass's result for the trip from a worker.

    - A latency histogram goes as HdrHistogram's own encoding: the object
      holds a ctypes array, which pickle refuses; the encoding round-trips
      every count.
    - An `Event` goes as its constructor's arguments. A slotted dataclass
      pickles through `dataclasses`' state functions, which look up the
      fields again for every instance: a pass's 24,000 events took 0.18 s
      to send and receive, more than its trace takes to write (issue 20).
    """

    def reducer_override(self, obj: object) -> Any:
        if type(obj) is Event:
            return Event, _EVENT_FIELDS(obj)
        if isinstance(obj, HdrHistogram):
            return _decoded_histogram, (obj.encode(),)
        return NotImplemented


def _decoded_histogram(encoded: bytes) -> HdrHistogram:
    return HdrHistogram.decode(encoded)


def _summed(stats: Sequence[CoordinatorStatistics | None]) -> CoordinatorStatistics | None:
    """Counters of several passes as one: every counter summed (so a delta of
    sums is the sum of the passes' deltas), except the core count, which is the
    configuration's."""
    if not stats or any(s is None for s in stats):
        return None
    known = [s for s in stats if s is not None]
    total = {f.name: sum(getattr(s, f.name) for s in known) for f in fields(known[0]) if f.name != "loop_cores"}
    return replace(known[0], **total)


def run_pair(
    cfg: Config,
    config_name: str,
    workload_name: str,
    trace_dir: Path,
    *,
    on_level: Callable[[LevelRow], None] = lambda row: None,
) -> RunOutput:
    """`workload_name` under `config_name` alone: `run_workload` with one
    configuration (its `cfg.window().repeat` passes, seeds `cfg.seed`,
    `cfg.seed + 1`, …), the first pass's trace in `trace_dir`."""
    return run_workload(cfg, [config_name], workload_name, {config_name: trace_dir},
                        on_level=lambda _name, _index, row: on_level(row))[config_name]  # fmt: skip
