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

This module holds what a break-even is and how it reads (the terminal's
sentences, `report.md`'s table); `sim.compare.breakeven_search` finds them.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Final, final

from controllers.replica_costs import REPLICA_LATENCIES
from coordinator.config import Costs
from sim.model.unmeasured import LATENCY_SOURCES, PROFILE_LATENCIES

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sim.compare.conclusions import Measure
    from sim.load.run_config import RunConfig

__all__ = [
    "FRAGILE_WITHIN",
    "GRID",
    "MAX_FACTOR",
    "PRECISION",
    "BreakEven",
    "BreakEvens",
    "Claim",
    "Cost",
    "Side",
    "costs_of",
    "markdown_lines",
    "render_lines",
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
#: What a latency family stands for, by its first dotted name (a singular
#: noun: "unless the oracle round trip grows 6.2x"); others are "the <prefix>.* latency".
_LATENCY_WHAT: Final[Mapping[str, str]] = {
    "oracle": "the oracle round trip",
    "stash": "the timestamp-store transaction",
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


def costs_of(cfg: RunConfig, *, defaults: Mapping[str, object] | None = None) -> list[Cost]:
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
                f"({self.measure} {_x(self.ratio)}{_TIMES})")


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
                f"({claim.measure} {_x(claim.ratio)}{_TIMES})")
        rng = f"{_factor(1 / self.max_factor)}{_DASH}{_factor(self.max_factor)}"
        if not breaks:
            tail = f" whatever one cost does within {rng}"
        else:
            tail = " unless " + " or ".join(t for _, t in breaks)
            if len(breaks) < 2 * len(mine):
                tail += f"; nothing else within {rng} reverses it" if not self.budget_hit else \
                    "; nothing else searched reverses it"
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
            "runs never draw that cost).", ""]
    out += [f"- {result.sentence(c)}" for c in result.claims]
    return out
