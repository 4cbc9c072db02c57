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
CPU the coordinator spent per handler kind. Each level's row is
`sim.compare.rows.level_row` of its windows.
"""

from __future__ import annotations

import contextlib
import functools
import math
import pickle
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, final

import anyio

from sim.compare import pass_pickle
from sim.compare.hostbound import HostProbe
from sim.compare.rows import LevelRow, level_row
from sim.history.capture import PreparedStatements, RecordingSession
from sim.history.recorder import HistoryRecorder
from sim.history.traces import write_trace
from sim.load.deployment import Deployment
from sim.load.loadgen import LevelResult, Window, measure_closed, measure_open, ops_for_level
from sim.load.workloads import OpContext, workload
from sim.runtime.backend_stats import BACKEND_STATS, BackendStats, BackendWindow
from sim.runtime.core import Runtime, run
from sim.runtime.events import runtime_log
from sim.runtime.pg import isolation_of

if TYPE_CHECKING:
    import concurrent.futures
    from collections.abc import Callable, Generator, Mapping, Sequence
    from pathlib import Path

    from coordinator.session import Coordinator, CoordinatorStatistics
    from sim.history.model import Event, History
    from sim.load.run_config import RunConfig

__all__ = [
    "PassLevel",
    "PassOutput",
    "RunOutput",
    "level_client",
    "level_ops",
    "pass_trace_dir",
    "postmaster_pids",
    "run_pair",
    "run_pass",
    "run_workload",
]


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


def level_ops(cfg: RunConfig, workload_name: str, concurrency: int) -> int:
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
    cfg: RunConfig,
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
                                   backend=[backend] if backend is not None else ()))
    finally:
        BACKEND_STATS.reset(token)
    return levels


async def _level(
    cfg: RunConfig,
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


def postmaster_pids(cfg: RunConfig) -> Callable[[], list[int]] | None:
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




def pass_trace_dir(trace_dir: Path, index: int) -> Path:
    """Where pass `index` (1-based) of a pair writes its trace: the first in
    `trace_dir` itself (where every reader of a compare trace finds it), pass k
    in `trace_dir/pass<k>` (a folder of traces, such as `coordsim replay`
    takes, finds them all)."""
    return trace_dir if index == 1 else trace_dir / f"pass{index}"


def run_pass(
    cfg: RunConfig,
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
    cfg: RunConfig,
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

    # The components' events (when a command listens) say which pass they are of.
    events = runtime_log().bind(**{"config": config_name, "workload": workload_name, "pass": index})
    levels = run(main, seed=cfg.seed + index - 1, virtual=cfg.mode == "virtual", latency=cfg.latency(),
                 events=events)
    recorder: HistoryRecorder = holder["recorder"]
    return levels, recorder.history(), recorder.events()


def _traced(
    cfg: RunConfig,
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
            for lv in levels]
    return PassOutput(index, seed, RunOutput(rows, where, history, events), levels)


def run_workload(
    cfg: RunConfig,
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
                   for index, name in order)
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
                                  backend=backend))
        first = mine[0].output
        out[name] = RunOutput(rows, first.trace_dir, first.history, first.events)
    return out


def _in_workers(
    pool: concurrent.futures.Executor,
    cfg: RunConfig,
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


def _simulated_in_worker(cfg: RunConfig, config_name: str, workload_name: str, index: int) -> bytes:
    """`_simulate` in a worker, its result pickled (`sim.compare.pass_pickle`)."""
    return pass_pickle.dumps(_simulate(cfg, config_name, workload_name, index))



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
    cfg: RunConfig,
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
                        on_level=lambda _name, _index, row: on_level(row))[config_name]
