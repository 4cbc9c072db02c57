"""Scaled copies of a run's configuration, for `coordsim compare
--sensitivity` (`sim.compare.breakeven`): one cost family multiplied by a
factor, all else equal. CPU costs go through the `[costs]` table; latencies
through a profile written beside the run, so every rerun can be reproduced
from its files (DESIGN.md §10).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from controllers.replica_costs import REPLICA_LATENCIES
from coordinator.config import Costs
from sim.load.latency_profile import profile_cores, profile_costs_tables
from sim.load.run_config import DEFAULT_PROFILE
from sim.model.unmeasured import PROFILE_LATENCIES
from sim.runtime.latency import Constant, Distribution, Empirical, LogNormal, Uniform
from sim.runtime.outputs import atomic_write

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sim.load.run_config import RunConfig

__all__ = ["scaled_costs", "scaled_latencies"]


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


def scaled_costs(cfg: RunConfig, names: Sequence[str], factor: float) -> RunConfig:
    """`cfg` with the CPU costs `names` (`Costs` fields) multiplied by `factor`
    through its `[costs]` table (the run's own overrides are what is scaled)."""
    base = Costs()
    costs = dict(cfg.costs)
    costs.update({n: float(cfg.costs.get(n, getattr(base, n))) * factor for n in names})
    return replace(cfg, costs=costs)


def scaled_latencies(cfg: RunConfig, names: Sequence[str], factor: float, path: Path, *, why: str) -> RunConfig:
    """`cfg` with the latencies `names` multiplied by `factor`, through a
    profile written to `path` (so the rerun can be reproduced from it). A name
    the run's profile does not configure is scaled from its code default
    (`REPLICA_LATENCIES`, `PROFILE_LATENCIES`); `why` heads the file."""
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
    text = _toml_profile(spec, why) + _carried(Path(cfg.latency_profile or DEFAULT_PROFILE))
    atomic_write(path, lambda p: p.write_text(text))
    return replace(cfg, latency_profile=str(path))


def _carried(profile: Path) -> str:
    """What a profile holds besides its latencies and the rerun must keep: the
    cores it gives `decoupled` (`profile_cores`: without them a rerun would
    run on 1 core and differ from its base in more than the scaled cost), and
    its `[costs]` tables (`calibrate --from`'s Python coordinator)."""
    out = [f"[cpu]\ncores = {profile_cores(profile)}\n"]
    costs = profile_costs_tables(profile)
    flat = {k: v for k, v in costs.items() if not isinstance(v, dict)}
    if flat:
        out.append("[costs]\n" + "".join(f"{k} = {float(v)!r}\n" for k, v in flat.items()))
    for name, table in costs.items():
        if isinstance(table, dict):
            out.append(f'[costs."{name}"]\n' + "".join(f"{k} = {float(v)!r}\n" for k, v in table.items()))
    return "\n".join(out)
