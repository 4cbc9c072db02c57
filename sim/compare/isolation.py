"""`coordsim isolation`: use-case isolation as seed 004 defines it — "to what
extent can a user pretend that they are the only user of Materialize without
noticing performance impacts from other users" — measured as the ratio of a
victim's latency and throughput with a noisy neighbour to the same without it
(1.0 = perfect isolation), issue 36 build item 4.

The victim is `select-one` (strict-serializable point peeks) from a fixed
number of closed-loop clients. Each neighbour is a fixed number of closed-loop
clients running fixed statements on tables of their own, the same in every
architecture (its *demand* is the same; what it achieves is recorded beside
it, since a closed loop runs as fast as the system lets it). Every run sets
up the victim's and every neighbour's schema, with or without the neighbour
running, so the only difference between the two is the neighbour's load.

A pass is one seed: for each architecture, a run without a neighbour and one
with each neighbour, every run on a fresh deployment with that seed. The
ratio's interval is over the passes' paired ratios (with / without at the same
seed), by `sim.compare.stats.estimate`: pairing removes the seed-to-seed
variance the two sides share.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Final, final

import anyio

from coordinator.adapters import MultiAdapterCoordinator
from coordinator.process_adapters import ProcessAdaptersCoordinator
from sim.compare.neighbours import BASELINE, NEIGHBOURS, VICTIM_WORKLOAD
from sim.compare.stats import Estimate, estimate, percentile_shown
from sim.history.recorder import HistoryRecorder
from sim.load.deployment import Deployment
from sim.load.loadgen import LevelResult, Window, measure_closed
from sim.load.workloads import OpContext, standard_schema, workload
from sim.runtime.core import run
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from coordinator.session import Coordinator, Result, Session
    from sim.load.run_config import RunConfig
    from sim.runtime.core import Runtime

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "IsolationRow",
    "PassResult",
    "Ratio",
    "isolation_config",
    "isolation_rows",
    "ratio_estimate",
    "run_pass",
]


@final
@dataclass(frozen=True)
class Architecture:
    """One architecture of the experiment: a configuration (a named one or the
    variant `isolation_config` defines) and where the victim's and the
    neighbour's sessions connect (adapter numbers, 1-based; None: the
    coordinator's own `connect`)."""

    name: str
    config: str
    adapters: int
    victim_adapter: int | None
    neighbour_adapter: int | None
    description: str


ARCHITECTURES: Final[tuple[Architecture, ...]] = (
    Architecture("event-loop", "event-loop", 1, None, None, "victim and neighbour share the one loop"),
    Architecture("decoupled", "decoupled", 1, None, None, "victim and neighbour share the one adapter"),
    Architecture("decoupled-2-adapters", "decoupled-2-adapters", 2, 1, 2,
                 "victim on adapter 1, neighbour on adapter 2"),
)


def isolation_config(cfg: RunConfig) -> RunConfig:
    """`cfg` with the experiment's configurations, those of `ARCHITECTURES`
    (in real mode the two adapters are two OS processes)."""
    variants = {**cfg.variants, "decoupled-2-adapters": {"base": "decoupled", "adapters": 2}}
    return cfg.with_overrides(configurations=[a.config for a in ARCHITECTURES], variants=variants,
                              workloads=[VICTIM_WORKLOAD])


# --- one run ---------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class PassResult:
    """One run: the victim's window beside `neighbour` (or `BASELINE`), and
    what the neighbour achieved in that window. Latencies in ms, rates per
    second (simulated seconds in virtual mode)."""

    architecture: str
    neighbour: str
    index: int  # the pass, 1-based
    seed: int
    window_s: float
    victim_ops: int  # completed in the window (throughput)
    victim_samples: int  # started in the window (latencies)
    victim_errors: int
    victim_ops_s: float
    victim_p50_ms: float
    victim_p99_ms: float
    neighbour_ops_s: float
    neighbour_errors: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _connect(coord: Coordinator, adapter: int | None) -> Session:
    if adapter is None:
        return coord.connect()
    if not isinstance(coord, MultiAdapterCoordinator | ProcessAdaptersCoordinator):
        raise InvalidUsage(f"pinning a session to adapter {adapter} needs a multi-adapter coordinator")
    return coord.connect(adapter=adapter)


async def _must(s: Session, sql: str) -> None:
    r = await s.execute(sql)
    if r.error is not None:
        raise InvalidUsage(f"isolation setup {sql[:60]!r} failed: {r.error.code.value} {r.error.message}")


async def _setup(s: Session) -> None:
    """The victim's schema (`select-one`'s) and every neighbour's tables, in
    every run alike."""
    await standard_schema(s, 1)
    await _must(s, "CREATE TABLE n_insert (a int)")
    await _must(s, "CREATE TABLE n_peek (a int)")
    await _must(s, "INSERT INTO n_peek VALUES " + ", ".join(f"({v})" for v in range(1, 11)))
    await _must(s, "CREATE INDEX n_peek_a ON n_peek (a)")


def _neighbour_op(name: str, rt: Runtime) -> Callable[[Session, int, int], Awaitable[Result]]:
    churn = workload("ddl-churn")
    counter = [0]

    async def op(s: Session, client: int, seq: int) -> Result:
        if name == "ddl-churn":
            return await churn.op(s, OpContext(client, seq, 1, rt, counter, level=0))
        if name == "insert-storm":
            counter[0] += 1
            return await s.execute(f"INSERT INTO n_insert VALUES ({counter[0]})")
        return await s.execute("SELECT * FROM n_peek WHERE a = 1")

    return op


async def measure_run(
    cfg: RunConfig, arch: Architecture, neighbour: str, rt: Runtime, *, victim_clients: int
) -> tuple[LevelResult, list[tuple[float, bool]]]:
    """One run on a fresh deployment: set-up, the neighbour's clients started
    (unless `BASELINE`), the victim measured in one window after the warm-up
    (`sim.load.loadgen.measure_closed`), then the neighbour stopped. Returns
    the victim's window and the neighbour's (completion time, ok) pairs."""
    victim = workload(VICTIM_WORKLOAD)
    w = cfg.window()
    window = Window(warmup_s=w.warmup_s, duration_s=w.duration_s, repeat=1, drain_s=w.drain_s)
    done: list[tuple[float, bool]] = []
    async with Deployment.for_config(cfg, arch.config, rt, HistoryRecorder(rt.now), workload=VICTIM_WORKLOAD) as dep:
        coord = dep.newest
        assert coord is not None
        await _setup(_connect(coord, arch.victim_adapter))
        sessions = [_connect(coord, arch.victim_adapter) for _ in range(victim_clients)]
        counter = [0]

        async def victim_op(client: int, k: int) -> str | None:
            r = await victim.op(sessions[client], OpContext(client, k, 1, rt, counter, level=victim_clients))
            return None if r.error is None else r.error.code.value

        async def noisy(client: int) -> None:
            s = _connect(coord, arch.neighbour_adapter)
            op = _neighbour_op(neighbour, rt)
            seq = 0
            while True:
                r = await op(s, client, seq)
                seq += 1
                done.append((rt.now(), r.ok))

        async with anyio.create_task_group() as tg:
            if neighbour != BASELINE:
                for c in range(NEIGHBOURS[neighbour].clients):
                    tg.start_soon(noisy, c)
            (result,) = await measure_closed(rt, victim_op, concurrency=victim_clients, window=window)
            tg.cancel_scope.cancel()
    return result, done


def run_pass(
    cfg: RunConfig, arch: Architecture, neighbour: str, *, index: int, victim_clients: int
) -> PassResult:
    """Pass `index` (1-based, seed `cfg.seed + index - 1`) of `arch` beside
    `neighbour`, on its own loop (virtual or real, as `cfg.mode`)."""
    seed = cfg.seed + index - 1

    async def main(rt: Runtime) -> tuple[LevelResult, list[tuple[float, bool]]]:
        return await measure_run(cfg, arch, neighbour, rt, victim_clients=victim_clients)

    result, done = run(main, seed=seed, virtual=cfg.mode == "virtual", latency=cfg.latency())
    start, end = result.start_s, result.start_s + result.elapsed_s
    inside = [ok for t, ok in done if start <= t < end]
    p50, p99 = result.percentiles_ms((50, 99))
    return PassResult(
        architecture=arch.name, neighbour=neighbour, index=index, seed=seed, window_s=result.elapsed_s,
        victim_ops=result.ops, victim_samples=result.measured, victim_errors=result.errors,
        victim_ops_s=result.throughput, victim_p50_ms=p50, victim_p99_ms=p99,
        neighbour_ops_s=sum(inside) / result.elapsed_s if result.elapsed_s > 0 else 0.0,
        neighbour_errors=len(inside) - sum(inside),
    )


# --- the ratios ------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class Ratio:
    """One victim metric with and without the neighbour (each a mean over the
    passes with its 95 % interval), and the with/without ratio: the geometric
    mean of the paired passes' ratios with its 95 % interval, both from
    `estimate` over the ratios' logarithms. Why logarithms: a ratio lives on a
    multiplicative scale (x2 and x1/2 are equally far from 1), its spread
    grows with it, and an interval on its log is never below 0, as a plain
    t-interval over a few passes of a ratio near 100 was."""

    without: Estimate
    with_: Estimate
    log_ratio: Estimate

    @property
    def n(self) -> int:
        return self.log_ratio.n

    @property
    def value(self) -> float:
        """The ratio (geometric mean over the passes); NaN with none."""
        return math.exp(self.log_ratio.mean) if self.n else math.nan

    @property
    def low(self) -> float | None:
        """The 95 % interval's lower end; None with fewer than 2 passes."""
        return None if self.log_ratio.half is None else math.exp(self.log_ratio.low)

    @property
    def high(self) -> float | None:
        return None if self.log_ratio.half is None else math.exp(self.log_ratio.high)

    def as_dict(self) -> dict[str, float | int | None]:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(x, 6)

        return {
            "without": num(self.without.mean), "without_ci95": num(self.without.half),
            "with": num(self.with_.mean), "with_ci95": num(self.with_.half),
            "ratio": num(self.value), "ratio_low": num(self.low), "ratio_high": num(self.high),
            "passes": self.n,
        }


def ratio_estimate(without: Sequence[float], with_: Sequence[float]) -> Ratio:
    """The with/without ratio over paired passes (`without[i]` and `with_[i]`
    ran at the same seed; see `Ratio`). A pass with a side at 0 (no
    operation) has no ratio and is left out.

    Raises:
        InvalidUsage: the two sides have different numbers of passes.
    """
    if len(without) != len(with_):
        raise InvalidUsage(f"paired passes needed: {len(without)} without, {len(with_)} with")
    logs = [math.log(w / b) for b, w in zip(without, with_, strict=True) if b > 0 and w > 0]
    return Ratio(estimate(without), estimate(with_), estimate(logs))


@final
@dataclass(frozen=True)
class IsolationRow:
    """One (architecture, neighbour): the victim's p50, p99 and throughput
    with and without the neighbour, as ratios; the neighbour's achieved rate;
    `thin_tail`: some pass had too few victim operations for its p99 to be
    estimable (`sim.compare.stats.percentile_shown`)."""

    architecture: str
    neighbour: str
    passes: int
    seeds: tuple[int, ...]
    p50: Ratio
    p99: Ratio
    throughput: Ratio
    neighbour_ops_s: Estimate
    victim_errors: int
    neighbour_errors: int
    thin_tail: bool
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "architecture": self.architecture, "neighbour": self.neighbour, "passes": self.passes,
            "seeds": list(self.seeds), "p50_ms": self.p50.as_dict(), "p99_ms": self.p99.as_dict(),
            "throughput_ops_s": self.throughput.as_dict(),
            "neighbour_ops_s": None if not self.neighbour_ops_s.n else round(self.neighbour_ops_s.mean, 3),
            "victim_errors": self.victim_errors, "neighbour_errors": self.neighbour_errors,
            "p99_thin_tail": self.thin_tail, "note": self.note,
        }


def isolation_rows(results: Sequence[PassResult], neighbours: Sequence[str]) -> list[IsolationRow]:
    """A row per (architecture, neighbour) in `ARCHITECTURES` x `neighbours`
    order, from every pass's results (architectures without results are left
    out). Each neighbour's run is paired with its architecture's baseline at
    the same pass."""
    by_key = {(r.architecture, r.neighbour, r.index): r for r in results}
    rows: list[IsolationRow] = []
    for arch in ARCHITECTURES:
        indexes = sorted({r.index for r in results if r.architecture == arch.name})
        if not indexes:
            continue
        for n in neighbours:
            pairs = [(by_key[arch.name, BASELINE, i], by_key[arch.name, n, i]) for i in indexes
                     if (arch.name, BASELINE, i) in by_key and (arch.name, n, i) in by_key]
            if not pairs:
                continue
            base, noisy = [b for b, _ in pairs], [w for _, w in pairs]
            rows.append(IsolationRow(
                architecture=arch.name, neighbour=n, passes=len(pairs), seeds=tuple(b.seed for b in base),
                p50=ratio_estimate([b.victim_p50_ms for b in base], [w.victim_p50_ms for w in noisy]),
                p99=ratio_estimate([b.victim_p99_ms for b in base], [w.victim_p99_ms for w in noisy]),
                throughput=ratio_estimate([b.victim_ops_s for b in base], [w.victim_ops_s for w in noisy]),
                neighbour_ops_s=estimate([w.neighbour_ops_s for w in noisy]),
                victim_errors=sum(r.victim_errors for b, w in pairs for r in (b, w)),
                neighbour_errors=sum(w.neighbour_errors for w in noisy),
                thin_tail=any(not percentile_shown(r.victim_samples, 99) for b, w in pairs for r in (b, w)),
            ))
    return rows
