"""Break-even factors: how far each modeled cost must move, alone, before a
conclusion of `coordsim compare` reverses (issue 35, item 7). A conclusion
is fragile when a cost moving within x/÷2 reverses it.

A *claim* is one ratio of the Conclusions (`sim.compare.conclusions`) whose
direction the run supports; it *flips* where its paired ratio reaches 1
(direction, not significance: significance depends on how many passes were
run, parity does not), or where it can no longer be measured. A *cost* is a
family scaled together: the coordinator CPU costs, or the latencies sharing
a first dotted name (`oracle.pg.*`, `consensus.*`, …), measured or not, so a
latency a profile gains is varied without a change here.

Per cost and direction the search walks a grid (x2, the fragility boundary;
x64, the range's end; the same downward), then bisects each bracket in log
space to `PRECISION`; claims whose brackets share a midpoint share its run,
and the factor reported is where the log-ratio, linear in the log factor
between the final bracket's ends, crosses 0. It assumes no flip and flip
back between grid points. Each run is a deterministic virtual rerun with the
base run's seeds and windows, cut to the workloads, configurations and
levels its claims need (exact: a pass measures its levels in order on its
own deployment, so a cell does not depend on what else ran). A claim whose
ratio is bit-identical at the first grid point never draws the cost: it is
`unaffected`, and not searched further.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final, final

from controllers.replica import REPLICA_LATENCIES
from coordinator.config import Costs
from sim.compare.conclusions import ONE_PASS, conclude, paired_ratio
from sim.compare.sensitivity import scaled_costs, scaled_latencies
from sim.model.unmeasured import LATENCY_SOURCES, PROFILE_LATENCIES
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from sim.compare.conclusions import Measure, Ratio
    from sim.compare.runner import LevelRow
    from sim.load.config import Config

__all__ = [
    "FRAGILE_WITHIN",
    "GRID",
    "MAX_FACTOR",
    "PRECISION",
    "BreakEven",
    "BreakEvens",
    "Claim",
    "Cost",
    "Evaluate",
    "Side",
    "break_even",
    "claims_of",
    "costs_of",
    "markdown_lines",
    "render_lines",
    "search",
]

#: The searched range is 1/MAX_FACTOR .. MAX_FACTOR.
MAX_FACTOR: Final = 64.0
#: The bracketing walk's factors above 1 (their inverses below): x2, the
#: fragility boundary, then the range's end. A grid point reruns every
#: pending claim (at first the whole comparison), a bisection step only the
#: workload and pair it refines: a (4, 16, 64) grid would cost two more whole
#: reruns per cost to save two bisection steps per reversed claim.
GRID: Final = (2.0, 64.0)
#: Bisection stops when a bracket's ends are within this ratio.
PRECISION: Final = 1.05
#: A claim reversed by a cost moving less than this (up or down) is fragile.
FRAGILE_WITHIN: Final = 2.0

_TIMES: Final = "\N{MULTIPLICATION SIGN}"
_DASH: Final = "\N{EN DASH}"
_COLUMNS: Final[Mapping[str, str]] = {
    "throughput": "throughput_samples",
    "p50": "p50_samples_ms",
    "p99": "p99_samples_ms",
}
#: What a latency family stands for, by its first dotted name (a singular
#: noun: "unless the oracle round trip grows 6.2x"); others are "the <prefix>.* latency".
_LATENCY_WHAT: Final[Mapping[str, str]] = {
    "oracle": "the oracle round trip",
    "stash": "the timestamp-stash transaction",
    "catalog": "the catalog-stash transaction",
    "consensus": "the persist consensus round trip",
    "blob": "the blob round trip",
    "replica": "the replica's hops and CPU",
    "controller": "the catalog feed",
}
_CPU: Final = "coordinator-cpu"


@final
@dataclass(frozen=True)
class Cost:
    """One family of model inputs scaled together: `Costs` fields (`cpu`) or
    latency names; `measured` iff `coordsim calibrate` measures all of them."""

    name: str
    what: str
    names: tuple[str, ...]
    cpu: bool
    measured: bool


def costs_of(cfg: Config, *, defaults: Mapping[str, object] | None = None) -> list[Cost]:
    """Every cost family of `cfg`'s model: coordinator CPU, then each first
    dotted name among the profile's latencies and the code defaults
    (`REPLICA_LATENCIES`, `PROFILE_LATENCIES`, plus `defaults`), sorted. A
    latency that is zero (the profile's `default`) has nothing to scale."""
    model = cfg.latency()
    names = set(model.names()) | set(REPLICA_LATENCIES) | set(PROFILE_LATENCIES) | set(defaults or {})
    groups: dict[str, list[str]] = {}
    for name in sorted(names):
        if model.configures(name) and model.distribution(name).mean() == 0:
            continue
        groups.setdefault(name.split(".", 1)[0], []).append(name)
    cpu = tuple(f.name for f in fields(Costs))
    out = [Cost(_CPU, "the coordinator CPU", cpu, cpu=True, measured=False)]
    for prefix, members in sorted(groups.items()):
        what = _LATENCY_WHAT.get(prefix, f"the {prefix}.* latency")
        measured = not any(n in LATENCY_SOURCES for n in members)
        out.append(Cost(prefix, what, tuple(members), cpu=False, measured=measured))
    return out


@final
@dataclass(frozen=True)
class Claim:
    """`config` / `reference` = `ratio` for `measure` at `concurrency` clients
    of `workload`; it holds at a scaling while the ratio stays on its side of 1."""

    workload: str
    config: str
    reference: str
    concurrency: int
    measure: Measure
    ratio: float

    @property
    def faster(self) -> bool:
        return (self.ratio > 1) == (self.measure == "throughput")

    def holds(self, ratio: float | None) -> bool:
        """Iff `ratio` is on the same side of 1 as the claim's (parity or an
        unmeasurable ratio does not hold)."""
        return ratio is not None and ratio != 1 and (ratio > 1) == (self.ratio > 1)

    def text(self) -> str:
        """'select-one c=64: decoupled faster than event-loop (throughput 7.41x)'."""
        how = "faster" if self.faster else "slower"
        return (f"{self.workload} c={self.concurrency}: {self.config} {how} than {self.reference} "
                f"({self.measure} {_x(self.ratio)}{_TIMES})")  # fmt: skip


@final
@dataclass(frozen=True)
class Side:
    """One direction of one claim's search: it still `held` at that factor
    (1.0: not even the first step), and reversed at `flipped` (None: not
    within the search, which reached `held`). `at` is where the ratio,
    interpolated log-linearly between the two, reaches 1 (None: a side's
    ratio was not measurable)."""

    held: float
    flipped: float | None
    at: float | None = None

    @property
    def factor(self) -> float | None:
        """The break-even: `at`, else the bracket's geometric middle (None: no flip found)."""
        if self.flipped is None:
            return None
        return self.at if self.at is not None else math.sqrt(self.held * self.flipped)

    def width(self) -> float:
        return 1.0 if self.flipped is None else max(self.flipped / self.held, self.held / self.flipped)


@final
@dataclass(frozen=True)
class BreakEven:
    """How far `cost` may move before `claim` reverses: `up` (factors > 1)
    and `down` (< 1); `unaffected` when its runs never draw the cost."""

    claim: Claim
    cost: Cost
    up: Side
    down: Side
    unaffected: bool = False

    @property
    def fragile(self) -> bool:
        """Iff the claim reverses within x/÷ `FRAGILE_WITHIN`."""
        u, d = self.up.factor, self.down.factor
        return (u is not None and u <= FRAGILE_WITHIN) or (d is not None and d >= 1 / FRAGILE_WITHIN)

    def cell(self, *, max_factor: float = MAX_FACTOR) -> str:
        """'1/3.1x, > 64x': the scalings down and up at which the claim
        reverses ('< 1/64x', '> 64x': not within the range); an em dash for
        unaffected."""
        if self.unaffected:
            return "\N{EM DASH}"
        return f"{_side(self.down, up=False, max_factor=max_factor)}, {_side(self.up, up=True, max_factor=max_factor)}"


def _x(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def _factor(f: float) -> str:
    """6.2x, or 1/3.1x below 1 (a scaling down reads as a division): two
    digits, as many as a 5 % search gives."""
    v = f if f >= 1 else 1 / f
    digits = f"{v:.2g}" if v < 100 else f"{v:.0f}"
    return f"{digits}{_TIMES}" if f >= 1 else f"1/{digits}{_TIMES}"


def _side(s: Side, *, up: bool, max_factor: float) -> str:
    """'6.2x' (a bracket wider than the precision shows its ends), or
    '> 64x' / '< 1/64x' when it never reversed ('(budget)' if the search
    stopped short of the range's end)."""
    f = s.factor
    if f is not None:
        if s.width() <= PRECISION * (1 + 1e-9):
            return _factor(f)
        return f"{_factor(f)} ({_factor(s.held)}{_DASH}{_factor(s.flipped or 1.0)})"
    full = abs(math.log(s.held)) >= math.log(max_factor) * (1 - 1e-9)
    reach = s.held if not full else (max_factor if up else 1 / max_factor)
    return f"{'>' if up else '<'} {_factor(reach)}" + ("" if full else " (budget)")


@final
@dataclass(frozen=True)
class BreakEvens:
    """The whole analysis: every claim's break-even per cost, and what it
    cost (`runs`: reruns; `pass_levels`: simulated (pass, level) cells)."""

    reference: str
    costs: tuple[Cost, ...]
    claims: tuple[Claim, ...]
    entries: tuple[BreakEven, ...]
    runs: int
    pass_levels: int
    max_factor: float = MAX_FACTOR
    precision: float = PRECISION
    grid: tuple[float, ...] = GRID
    budget_hit: bool = False

    def as_dict(self) -> dict[str, Any]:
        """For `summary.json`: plain JSON types (None where a side never reversed)."""
        return {
            "reference": self.reference,
            "max_factor": self.max_factor,
            "precision": self.precision,
            "grid": list(self.grid),
            "runs": self.runs,
            "pass_levels": self.pass_levels,
            "budget_hit": self.budget_hit,
            "costs": [{"name": c.name, "what": c.what, "names": list(c.names), "measured": c.measured}
                      for c in self.costs],
            "conclusions": [
                {
                    **asdict(claim),
                    "fragile": any(e.fragile for e in self.of(claim)),
                    "break_even": {
                        e.cost.name: {"up": e.up.factor, "down": e.down.factor, "up_searched_to": e.up.held,
                                      "down_searched_to": e.down.held, "unaffected": e.unaffected}
                        for e in self.of(claim)
                    },
                }
                for claim in self.claims
            ],
        }

    def of(self, claim: Claim) -> list[BreakEven]:
        return [e for e in self.entries if e.claim == claim]

    def fragile(self) -> list[Claim]:
        return [c for c in self.claims if any(e.fragile for e in self.of(c))]

    def rule(self) -> str:
        lo = _factor(1 / self.max_factor)
        return (
            f"Each cost scaled alone, over {', '.join(_factor(f) for f in self.grid)} and their inverses (to "
            f"{lo}{_DASH}{_factor(self.max_factor)}), then bisected to {(self.precision - 1) * 100:g} %, on "
            "virtual reruns with the run's seeds and windows. A conclusion (a ratio whose direction "
            "the run supports) breaks even where its ratio reaches 1; it is fragile if a cost moving "
            f"within {_factor(FRAGILE_WITHIN)} either way reverses it. {self.runs} reruns "
            f"({self.pass_levels} pass-levels)"
            + ("; the run budget ran out before every search ended." if self.budget_hit else ".")
        )

    def sentence(self, claim: Claim) -> str:
        """'select-one c=64: decoupled stays faster than event-loop (throughput
        7.41x) unless the oracle round trip grows 6.2x or the coordinator CPU
        shrinks to 1/3.1x; nothing else within 1/64x-64x reverses it'."""
        mine = self.of(claim)
        breaks: list[tuple[float, str]] = []
        for e in mine:
            for side, verb in ((e.up, "grows"), (e.down, "shrinks to")):
                f = side.factor
                if f is not None:
                    breaks.append((abs(math.log(f)), f"{e.cost.what} {verb} {_factor(f)}"))
        breaks.sort()
        how = "faster" if claim.faster else "slower"
        head = (f"{claim.workload} c={claim.concurrency}: {claim.config} stays {how} than {claim.reference} "
                f"({claim.measure} {_x(claim.ratio)}{_TIMES})")  # fmt: skip
        rng = f"{_factor(1 / self.max_factor)}{_DASH}{_factor(self.max_factor)}"
        if not breaks:
            tail = f" whatever one cost does within {rng}"
        else:
            tail = " unless " + " or ".join(t for _, t in breaks)
            if len(breaks) < 2 * len(mine):
                tail += f"; nothing else within {rng} reverses it" if not self.budget_hit else \
                    "; nothing else searched reverses it"  # fmt: skip
        fragile = any(e.fragile for e in mine)
        return ("FRAGILE: " if fragile else "") + head + tail


def render_lines(result: BreakEvens) -> list[str]:
    """For the terminal, within 80 columns: a heading, then one sentence per
    claim, fragile ones marked."""
    out = [f"break-even factors vs {result.reference} (each cost alone; {result.runs} reruns):"]
    if not result.claims:
        out.append("  no conclusion with a direction to break")
    for c in result.claims:
        out += textwrap.wrap(result.sentence(c), 80, initial_indent="  ", subsequent_indent="    ")
    n = len(result.fragile())
    out.append(f"  {n} of {len(result.claims)} conclusion(s) fragile" if n else "  no conclusion is fragile")
    return out


def markdown_lines(result: BreakEvens) -> list[str]:
    """The `## Break-even factors` section of `report.md`: the rule, a table
    (a row per claim, a column per cost: the range within which it holds),
    and the sentences."""
    out = ["## Break-even factors", "", result.rule(), ""]
    if not result.claims:
        return [*out, "No conclusion had a direction to break."]
    heads = [f"{c.what.removeprefix('the ')}{'' if c.measured else ' (unmeasured)'}" for c in result.costs]
    out += ["| conclusion | " + " | ".join(heads) + " | fragile |", "|---|" + "---|" * len(heads) + "---|"]
    for claim in result.claims:
        by = {e.cost.name: e for e in result.of(claim)}
        cells = []
        for cost in result.costs:
            e = by.get(cost.name)
            text = "not searched" if e is None else e.cell(max_factor=result.max_factor)
            cells.append(f"**{text}**" if e is not None and e.fragile else text)
        fragile = any(e.fragile for e in by.values())
        out.append(f"| {claim.text()} | " + " | ".join(cells) + f" | {'**yes**' if fragile else 'no'} |")
    out += ["", f"Cells: the scaling of the cost, down and up, at which the conclusion reverses "
            f"(> {_factor(result.max_factor)}: not within the searched range; bold: fragile; an em dash: the "
            "runs never draw that cost).", ""]  # fmt: skip
    out += [f"- {result.sentence(c)}" for c in result.claims]
    return out


# --- the search ---------------------------------------------------------------------------

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
                           f"{max_factor}, {list(grid)}")  # fmt: skip
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
                      max_factor, precision, tuple(walk), runner.budget_hit)  # fmt: skip


def _walk(cost: Cost, claims: Sequence[Claim], states: dict[Claim, _State], grid: Sequence[float],
          runner: _Runner) -> None:  # fmt: skip
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
            precision: float) -> None:  # fmt: skip
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
                 if abs(math.log(hi / lo)) > limit]  # fmt: skip
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
           concurrency: int, measure: Measure) -> float | None:  # fmt: skip
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


def _restricted(cfg: Config, claims: Sequence[Claim], reference: str) -> Config:
    """`cfg` cut to what `claims` need: their workloads and configurations
    (and the reference), and the levels up to the highest of theirs, in
    sweep order (earlier levels stay: they build the state later ones see)."""
    workloads = [w for w in cfg.workloads if any(c.workload == w for c in claims)]
    configs = [n for n in cfg.configurations if n == reference or any(c.config == n for c in claims)]
    last = max(i for i, level in enumerate(cfg.concurrency) if any(c.concurrency == level for c in claims))
    return cfg.with_overrides(workloads=workloads, configurations=configs, concurrency=list(cfg.concurrency[: last + 1]))


def break_even(
    cfg: Config,
    rows: Sequence[LevelRow],
    sweep: Callable[[Config, str], Sequence[LevelRow]],
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
                           f"this run is {cfg.mode}")  # fmt: skip
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
                  if (c.workload, c.config, c.concurrency) in cells}  # fmt: skip
        return ratios, len(sub.workloads) * len(sub.configurations) * len(sub.concurrency) * passes

    return search(claims, chosen, evaluate, reference=reference, max_factor=max_factor, grid=grid,
                  precision=precision, max_runs=max_runs)  # fmt: skip
