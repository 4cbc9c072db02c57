"""The break-even search (`sim.compare.breakeven`): per cost and direction it
walks a grid (x2, the fragility boundary; x64, the range's end; the same
downward), then bisects each bracket in log space to `PRECISION`.

Claims whose brackets share a midpoint share its run, and the factor
reported is where the log-ratio, linear in the log factor between the final
bracket's ends, crosses 0. It assumes no flip and flip back between grid
points. Each run is a deterministic virtual rerun with the base run's seeds
and windows, cut to the workloads, configurations and levels its claims need
(exact: a pass measures its levels in order on its own deployment, so a cell
does not depend on what else ran). A claim whose ratio is bit-identical at
the first grid point never draws the cost: it is `unaffected`, and not
searched further.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from sim.compare.breakeven import (
    GRID,
    MAX_FACTOR,
    PRECISION,
    BreakEven,
    BreakEvens,
    Claim,
    Cost,
    Side,
    costs_of,
)
from sim.compare.conclusions import ONE_PASS, conclude, paired_ratio
from sim.compare.sensitivity import scaled_costs, scaled_latencies
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from sim.compare.conclusions import Measure, Ratio
    from sim.compare.rows import LevelRow
    from sim.load.run_config import RunConfig

__all__ = ["Evaluate", "break_even", "claims_of", "search"]

_COLUMNS: Final[Mapping[str, str]] = {
    "throughput": "throughput_samples",
    "p50": "p50_samples_ms",
    "p99": "p99_samples_ms",
}

#: `evaluate(cost, factor, claims)` → the ratio of (at least) each of `claims`
#: with `cost` scaled by `factor` (None: not measurable), and the pass-levels
#: the run simulated. One call is one rerun.
Evaluate = Callable[[Cost, float, Sequence[Claim]], tuple[Mapping[Claim, float | None], int]]


@dataclass
class _State:
    """One (claim, cost) search: per direction the bracket so far."""

    up_held: float = 1.0
    up_flipped: float | None = None
    down_held: float = 1.0
    down_flipped: float | None = None
    unaffected: bool = False
    up_done: bool = False
    down_done: bool = False


@dataclass
class _Runner:
    """Counts and caches reruns: (cost, factor) → every ratio any run gave."""

    evaluate: Evaluate
    max_runs: int | None
    runs: int = 0
    pass_levels: int = 0
    budget_hit: bool = False
    cache: dict[tuple[str, float], dict[Claim, float | None]] = field(default_factory=dict)

    @staticmethod
    def _key(cost: Cost, f: float) -> tuple[str, float]:
        return cost.name, round(math.log(f), 9)

    def crossing(self, cost: Cost, claim: Claim, held: float, flipped: float | None) -> float | None:
        """Where `claim`'s log-ratio, linear in log factor between `held` and
        `flipped`, is 0 (None: no flip, or either end not measured)."""
        if flipped is None:
            return None
        at_held = claim.ratio if held == 1 else self.cache.get(self._key(cost, held), {}).get(claim)
        at_flipped = self.cache.get(self._key(cost, flipped), {}).get(claim)
        if at_held is None or at_flipped is None or at_flipped <= 0:
            return None
        a, b = math.log(at_held), math.log(at_flipped)
        t = a / (a - b)  # a and b differ in sign (or b is 0): 0 < t <= 1
        return math.exp(math.log(held) + t * (math.log(flipped) - math.log(held)))

    def ratios(self, cost: Cost, f: float, claims: Sequence[Claim]) -> Mapping[Claim, float | None] | None:
        """The claims' ratios at `f` (None: over budget)."""
        key = self._key(cost, f)
        have = self.cache.setdefault(key, {})
        missing = [c for c in claims if c not in have]
        if missing:
            if self.max_runs is not None and self.runs >= self.max_runs:
                self.budget_hit = True
                return None
            got, cells = self.evaluate(cost, f, missing)
            self.runs += 1
            self.pass_levels += cells
            have.update(got)
            for c in missing:
                have.setdefault(c, None)
        return have


def search(
    claims: Sequence[Claim],
    costs: Sequence[Cost],
    evaluate: Evaluate,
    *,
    reference: str,
    max_factor: float = MAX_FACTOR,
    grid: Sequence[float] = GRID,
    precision: float = PRECISION,
    max_runs: int | None = None,
) -> BreakEvens:
    """Every claim's break-even per cost (see the module docstring), calling
    `evaluate` once per rerun, at most `max_runs` times (None: no limit; a
    search cut short reports how far it got).

    Args:
        grid: the walk's factors above 1, increasing; those beyond
            `max_factor` are dropped and `max_factor` ends it.

    Raises:
        InvalidUsage: `precision` or `max_factor` not above 1, or a grid
            factor not above 1.
    """
    if not (precision > 1 and max_factor > 1 and all(f > 1 for f in grid)):
        raise InvalidUsage(f"precision, max_factor and the grid's factors must be > 1, got {precision}, "
                           f"{max_factor}, {list(grid)}")
    runner = _Runner(evaluate, max_runs)
    walk = sorted({f for f in grid if f < max_factor * (1 - 1e-9)} | {max_factor})
    entries: list[BreakEven] = []
    for cost in costs:
        states = {c: _State() for c in claims}
        _walk(cost, claims, states, walk, runner)
        _bisect(cost, claims, states, runner, precision)
        for c in claims:
            s = states[c]
            up = Side(s.up_held, s.up_flipped, runner.crossing(cost, c, s.up_held, s.up_flipped))
            down = Side(s.down_held, s.down_flipped, runner.crossing(cost, c, s.down_held, s.down_flipped))
            entries.append(BreakEven(c, cost, up, down, unaffected=s.unaffected))
    return BreakEvens(reference, tuple(costs), tuple(claims), tuple(entries), runner.runs, runner.pass_levels,
                      max_factor, precision, tuple(walk), runner.budget_hit)


def _walk(cost: Cost, claims: Sequence[Claim], states: dict[Claim, _State], grid: Sequence[float],
          runner: _Runner) -> None:
    """The bracketing walk: grid[0], 1/grid[0], grid[1], … until each claim
    has reversed in both directions or the grid ends."""
    first = True
    for f_up in grid:
        for f in (f_up, 1 / f_up):
            up = f > 1
            pending = [c for c in claims if not states[c].unaffected and not (states[c].up_done if up else states[c].down_done)]
            if not pending:
                continue
            got = runner.ratios(cost, f, pending)
            if got is None:
                return
            for c in pending:
                s, r = states[c], got.get(c)
                if first and r is not None and r == c.ratio:
                    s.unaffected = True  # not one draw of the cost moved a thing
                    continue
                held = c.holds(r)
                if up:
                    s.up_held, s.up_flipped, s.up_done = (f, None, False) if held else (s.up_held, f, True)
                else:
                    s.down_held, s.down_flipped, s.down_done = (f, None, False) if held else (s.down_held, f, True)
            first = False


def _bisect(cost: Cost, claims: Sequence[Claim], states: dict[Claim, _State], runner: _Runner,
            precision: float) -> None:
    """Halve (in log space) the widest open bracket until each is within
    `precision`; every claim whose bracket holds that midpoint gets it."""
    limit = math.log(precision) * (1 + 1e-9)

    def brackets() -> Iterable[tuple[Claim, bool, float, float]]:
        for c in claims:
            s = states[c]
            if s.up_flipped is not None:
                yield c, True, s.up_held, s.up_flipped
            if s.down_flipped is not None:
                yield c, False, s.down_held, s.down_flipped

    while True:
        open_ = [(abs(math.log(hi / lo)), c, up, lo, hi) for c, up, lo, hi in brackets()
                 if abs(math.log(hi / lo)) > limit]
        if not open_:
            return
        # Widest first, then claim order: deterministic, and a midpoint many
        # brackets share is run once for all of them.
        _, _, _, lo, hi = max(open_, key=lambda t: (t[0], -claims.index(t[1])))
        mid = math.exp((math.log(lo) + math.log(hi)) / 2)
        inside = [(c, up) for _, c, up, a, b in open_ if min(a, b) < mid < max(a, b)]
        got = runner.ratios(cost, mid, [c for c, _ in inside])
        if got is None:
            return
        for c, up in inside:
            s, held = states[c], c.holds(got.get(c))
            if up:
                s.up_held, s.up_flipped = (mid, s.up_flipped) if held else (s.up_held, mid)
            else:
                s.down_held, s.down_flipped = (mid, s.down_flipped) if held else (s.down_held, mid)


# --- on a compare run ---------------------------------------------------------------------


def _supported(r: Ratio) -> bool:
    """Iff the run supports `r`'s direction: labelled, one pass, or an
    interval that excludes 1 on its own (Holm over the run's many comparisons
    may still call it indistinguishable; its direction is what can flip)."""
    if r.decided or r.label == ONE_PASS:
        return r.ratio != 1
    return r.lo is not None and r.hi is not None and (r.lo > 1 or r.hi < 1)


def claims_of(rows: Sequence[LevelRow], *, reference: str, every_level: bool = False) -> list[Claim]:
    """The claims of a run: every concludable ratio with a supported direction
    (`_supported`), at the highest such level per (workload, configuration,
    measure) unless `every_level`, in the Conclusions' order."""
    found = [r for r in conclude(rows, reference=reference).ratios if _supported(r)]
    if not every_level:
        top: dict[tuple[str, str, str], int] = {}
        for r in found:
            k = (r.workload, r.config, r.measure)
            top[k] = max(top.get(k, 0), r.concurrency)
        found = [r for r in found if r.concurrency == top[(r.workload, r.config, r.measure)]]
    cells = _cells(rows)
    out = []
    for r in found:
        ratio = _ratio(cells, r.workload, r.config, reference, r.concurrency, r.measure)
        if ratio is not None:
            out.append(Claim(r.workload, r.config, reference, r.concurrency, r.measure, ratio))
    return out


def _cells(rows: Iterable[LevelRow]) -> dict[tuple[str, str, int], LevelRow]:
    return {(r.workload, r.config, r.concurrency): r for r in rows}


def _ratio(cells: Mapping[tuple[str, str, int], LevelRow], workload: str, config: str, reference: str,
           concurrency: int, measure: Measure) -> float | None:
    """The paired ratio of one cell over the reference's, steady or not (a
    rerun's cell is judged by its direction only); None if either side has
    no usable sample."""
    row, ref = cells.get((workload, config, concurrency)), cells.get((workload, reference, concurrency))
    if row is None or ref is None:
        return None
    new: Sequence[float] = getattr(row, _COLUMNS[measure])
    old: Sequence[float] = getattr(ref, _COLUMNS[measure])
    n = min(len(new), len(old))
    if n == 0 or not all(math.isfinite(x) and x > 0 for x in (*new[:n], *old[:n])):
        return None
    return paired_ratio(new[:n], old[:n]).ratio


def _restricted(cfg: RunConfig, claims: Sequence[Claim], reference: str) -> RunConfig:
    """`cfg` cut to what `claims` need: their workloads and configurations
    (and the reference), and the levels up to the highest of theirs, in
    sweep order (earlier levels stay: they build the state later ones see)."""
    workloads = [w for w in cfg.workloads if any(c.workload == w for c in claims)]
    configs = [n for n in cfg.configurations if n == reference or any(c.config == n for c in claims)]
    last = max(i for i, level in enumerate(cfg.concurrency) if any(c.concurrency == level for c in claims))
    return cfg.with_overrides(workloads=workloads, configurations=configs, concurrency=list(cfg.concurrency[: last + 1]))


def break_even(
    cfg: RunConfig,
    rows: Sequence[LevelRow],
    sweep: Callable[[RunConfig, str], Sequence[LevelRow]],
    workdir: Path,
    *,
    reference: str,
    every_level: bool = False,
    costs: Sequence[Cost] | None = None,
    max_factor: float = MAX_FACTOR,
    grid: Sequence[float] = GRID,
    precision: float = PRECISION,
    max_runs: int | None = None,
) -> BreakEvens:
    """The break-even factors of a compare run's claims (`claims_of(rows)`)
    for every cost (`costs_of(cfg)` unless given).

    Args:
        cfg: the run's configuration; must be virtual (a real rerun is
            neither deterministic nor short).
        rows: the run's rows.
        sweep: `sweep(config, label)` runs a comparison and returns its rows
            (as `run_sensitivity`'s); `label` is unique per call.
        workdir: where the scaled profiles are written.
        reference: the Conclusions' reference configuration.
        max_runs: the most reruns (None: as many as the search takes).

    Raises:
        InvalidUsage: `cfg` is not virtual, or bad search parameters.
    """
    if cfg.mode != "virtual":
        raise InvalidUsage("break-even factors need virtual mode (deterministic, short reruns); "
                           f"this run is {cfg.mode}")
    workdir.mkdir(parents=True, exist_ok=True)
    claims = claims_of(rows, reference=reference, every_level=every_level)
    chosen = list(costs) if costs is not None else costs_of(cfg)
    passes = cfg.window().repeat
    count = [0]

    def evaluate(cost: Cost, factor: float, need: Sequence[Claim]) -> tuple[dict[Claim, float | None], int]:
        count[0] += 1
        sub = _restricted(cfg, need, reference)
        label = f"{count[0]:03d} {cost.name} x{factor:.4g}"
        if cost.cpu:
            scaled = scaled_costs(sub, cost.names, factor)
        else:
            path = workdir / f"profile-{cost.name}-x{factor:.6g}.toml"
            why = f"coordsim compare --sensitivity (break-even): the run's profile with {cost.name}.* x{factor:.6g}"
            scaled = scaled_latencies(sub, cost.names, factor, path, why=why)
        got = sweep(scaled, label)
        cells = _cells(got)
        ratios = {c: _ratio(cells, c.workload, c.config, reference, c.concurrency, c.measure) for c in claims
                  if (c.workload, c.config, c.concurrency) in cells}
        return ratios, len(sub.workloads) * len(sub.configurations) * len(sub.concurrency) * passes

    return search(claims, chosen, evaluate, reference=reference, max_factor=max_factor, grid=grid,
                  precision=precision, max_runs=max_runs)
