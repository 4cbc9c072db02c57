"""`coordsim compare --sensitivity`: do the comparison's conclusions hang on
the costs nobody measured?

The unmeasured costs (`sim.model.unmeasured`: coordinator CPU, the simulated
replica, the catalog feed) are grouped in families; the comparison is rerun
with each family scaled x0.5 and x2, all else equal. A *conclusion* is one
configuration's peak throughput above another's for a workload, decided only
when their 95 % intervals do not overlap (otherwise "no difference"). It
*survives* if every rerun reaches the same decision; one that changes is
printed as fragile, with the scaling that changed it (DESIGN.md §10).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, final

from controllers.replica import REPLICA_LATENCIES
from coordinator.config import Costs
from sim.model.unmeasured import COST_SOURCES, LATENCY_SOURCES, PROFILE_LATENCIES
from sim.runtime.latency import Constant, Distribution, Empirical, LogNormal, Uniform
from sim.runtime.outputs import atomic_write

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from sim.compare.runner import LevelRow
    from sim.load.config import Config

__all__ = ["FACTORS", "FAMILIES", "Conclusion", "conclusions", "run_sensitivity", "scaled_config", "survival_lines"]

#: The scalings tried per family.
FACTORS: Final = (0.5, 2.0)

#: Family → the unmeasured names it scales (`Costs` fields, or latency
#: names), from the one list of unmeasured costs, so a cost added there is
#: scaled here too.
FAMILIES: Final[Mapping[str, tuple[str, ...]]] = {
    "coordinator-cpu": tuple(COST_SOURCES),
    "replica": tuple(n for n in LATENCY_SOURCES if n.startswith("replica.")),
    "catalog-feed": tuple(n for n in LATENCY_SOURCES if not n.startswith("replica.")),
}


def _scale(d: Distribution, factor: float) -> Distribution:
    """`d` with every duration multiplied by `factor` (a log-normal keeps its shape)."""
    if isinstance(d, Constant):
        return Constant(d.seconds * factor)
    if isinstance(d, Uniform):
        return Uniform(d.low * factor, d.high * factor)
    if isinstance(d, LogNormal):
        return LogNormal(d.median * factor, d.sigma)
    if isinstance(d, Empirical):
        return Empirical([s * factor for s in d.samples])
    raise TypeError(f"cannot scale {d!r}")


def _toml_profile(spec: Mapping[str, Mapping[str, object]], header: str) -> str:
    def value(v: object) -> str:
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(repr(float(x)) for x in v) + "]"
        return repr(float(v)) if isinstance(v, int | float) else str(v)

    out = [f"# {header}", ""]
    for name, dist in spec.items():
        out.append(f'[latency."{name}"]')
        out += [f"{k} = {value(v)}" for k, v in dist.items()]
        out.append("")
    return "\n".join(out)


def scaled_config(cfg: Config, family: str, factor: float, workdir: Path) -> Config:
    """`cfg` with `family` scaled by `factor`: CPU costs through the `[costs]`
    table; latencies through a profile written to `workdir` (so the rerun can
    be reproduced from it)."""
    names = FAMILIES[family]
    if family == "coordinator-cpu":
        base = Costs()
        costs = {n: float(cfg.costs.get(n, getattr(base, n))) * factor for n in names}
        return replace(cfg, costs=costs)
    model = cfg.latency()
    spec = model.to_dict()
    for name in names:
        if model.configures(name):
            dist = model.distribution(name)
        elif name in REPLICA_LATENCIES:
            dist = REPLICA_LATENCIES[name]
        else:
            dist = PROFILE_LATENCIES[name]
        spec[name] = _scale(dist, factor).to_dict()
    path = workdir / f"profile-{family}-x{factor:g}.toml"
    text = _toml_profile(spec, f"coordsim compare --sensitivity: the run's profile with {family} x{factor:g}")
    atomic_write(path, lambda p: p.write_text(text))
    return replace(cfg, latency_profile=str(path))


@final
@dataclass(frozen=True)
class Conclusion:
    """For one workload: `faster` than `slower` at peak throughput (`None` for
    both: the two peaks' intervals overlap, no difference decided)."""

    workload: str
    a: str
    b: str
    decision: str  # "a>b", "b>a" or "="

    def text(self) -> str:
        if self.decision == "a>b":
            return f"{self.workload}: {self.a} faster than {self.b}"
        if self.decision == "b>a":
            return f"{self.workload}: {self.b} faster than {self.a}"
        return f"{self.workload}: {self.a} and {self.b} not distinguishable"


def _peaks(rows: Sequence[LevelRow]) -> dict[tuple[str, str], tuple[float, float]]:
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for r in rows:
        key = (r.workload, r.config)
        if key not in out or r.throughput_ops_s > out[key][0]:
            out[key] = (r.throughput_ops_s, r.throughput_ci95 or 0.0)
    return out


def conclusions(rows: Sequence[LevelRow]) -> dict[tuple[str, str, str], Conclusion]:
    """Every pairwise peak-throughput conclusion of a comparison's rows."""
    peaks = _peaks(rows)
    out: dict[tuple[str, str, str], Conclusion] = {}
    for wl in dict.fromkeys(r.workload for r in rows):
        configs = [c for (w, c) in peaks if w == wl]
        for a, b in itertools.combinations(configs, 2):
            (ma, ha), (mb, hb) = peaks[(wl, a)], peaks[(wl, b)]
            if ma - ha > mb + hb:
                decision = "a>b"
            elif mb - hb > ma + ha:
                decision = "b>a"
            else:
                decision = "="
            out[(wl, a, b)] = Conclusion(wl, a, b, decision)
    return out


def run_sensitivity(
    cfg: Config, workdir: Path, sweep: Callable[[Config, str], Sequence[LevelRow]]
) -> dict[str, Sequence[LevelRow]]:
    """`sweep(config, label)` once per family and factor; → label → rows."""
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Sequence[LevelRow]] = {}
    for family in FAMILIES:
        for factor in FACTORS:
            label = f"{family} x{factor:g}"
            out[label] = sweep(scaled_config(cfg, family, factor, workdir), label)
    return out


def survival_lines(base: Sequence[LevelRow], reruns: Mapping[str, Sequence[LevelRow]]) -> tuple[list[str], int]:
    """Markdown table of each conclusion and whether it survives every rerun;
    and how many are fragile."""
    ref = conclusions(base)
    lines = ["| conclusion (peak throughput) | " + " | ".join(reruns) + " | survives |",
             "|---|" + "---|" * len(reruns) + "---|"]  # fmt: skip
    fragile = 0
    for key, c in ref.items():
        cells, same = [], True
        for rows in reruns.values():
            other = conclusions(rows).get(key)
            ok = other is not None and other.decision == c.decision
            same &= ok
            cells.append("same" if ok else ("**" + (other.text() if other else "missing") + "**"))
        fragile += not same
        lines.append(f"| {c.text()} | " + " | ".join(cells) + f" | {'yes' if same else '**no: fragile**'} |")
    return lines, fragile
