"""Latency profiles: the TOML (or JSON) files virtual mode's latencies, and a
calibrated run's cores, CPU costs and interpreter, come from (`coordsim
calibrate` writes them). Every number is checked as it is read, so a bad
profile fails before a run starts, naming the file and the key.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.config import Architecture, Costs, Interpreter
from sim.load.limits import (
    MAX_CORES,
    MAX_DURATION_S,
    MAX_SIGMA,
    check_float,
    check_int,
    read_text_file,
)
from sim.runtime.errors import InvalidUsage
from sim.runtime.latency import LatencyModel, LatencySpecError, TimerRealized

if TYPE_CHECKING:
    from collections.abc import Mapping

    from coordinator.config import CoordinatorConfig
    from sim.runtime.latency import Distribution

__all__ = [
    "load_profile", "profile_cores", "profile_costs", "profile_costs_tables", "profile_interpreter",
    "with_profile_cores",
]


def _profile_document(p: Path) -> dict[str, Any]:
    """A latency profile file (TOML, or JSON by its suffix) as a dict ({} for
    a document that is not a table); one clear line on a file it cannot read."""
    text = read_text_file(p, "latency profile")
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InvalidUsage(f"bad latency profile {p}: {' '.join(str(exc).split())}") from exc
    return data if isinstance(data, dict) else {}


def load_profile(path: str | Path) -> LatencyModel:
    """Reads a latency profile (TOML or JSON): a `[latency]` table of
    distributions as `LatencyModel.from_dict` reads them, plus an optional
    `[meta]` saying where the numbers came from."""
    p = Path(path)
    data = _profile_document(p)
    spec = data.get("latency")
    if not isinstance(spec, dict):
        raise InvalidUsage(f"latency profile {p} has no [latency] table")
    try:
        model = LatencyModel.from_dict(spec)
    except LatencySpecError as exc:
        raise InvalidUsage(f"bad latency profile {p}: {exc}") from exc
    for name, dist in model.to_dict().items():
        _check_distribution(p, name, dist)
    timer = data.get("timer")
    return model if timer is None else _timer_realized(p, model, timer)


def _timer_realized(path: Path, model: LatencyModel, timer: object) -> LatencyModel:
    """`model` with the latencies real mode realizes as timers rounded as the
    profile's `[timer]` says its run's host did (`TimerRealized`)."""
    from controllers.replica_costs import REPLICA_LATENCIES
    from sim.model.unmeasured import PROFILE_LATENCIES, REAL_MODE_TIMERS

    if not isinstance(timer, dict) or set(timer) != {"granularity_ms", "overshoot_ms"}:
        raise InvalidUsage(f"latency profile {path}: [timer] must set granularity_ms and overshoot_ms, and only them")
    values = {}
    for k, v in timer.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise InvalidUsage(f"latency profile {path}: [timer] {k} must be a number of milliseconds, got {v!r}")
        check_float(f"latency profile {path}: [timer] {k}", v, low=0, high=1000.0, unit="ms")
        values[k] = float(v) / 1000
    # A name the profile leaves out keeps the model's own default (as
    # `sim.load.deployment.switchable_latency` does), rounded likewise.
    defaults = {**REPLICA_LATENCIES, **PROFILE_LATENCIES}

    def base(name: str) -> Distribution:
        return model.distribution(name) if model.configures(name) else defaults[name]

    return model.with_overrides({
        name: TimerRealized(base(name), values["granularity_ms"], values["overshoot_ms"])
        for name in REAL_MODE_TIMERS
    })


def profile_cores(path: str | Path) -> int:
    """The cores of the coordinator process a latency profile describes: its
    `[cpu] cores` if it has one; else the cores of the machine it was measured
    on (`[meta] machine`, "…, N cores", as `coordsim calibrate` writes it: real
    mode runs the coordinator there); else 1 — the event loop's one core — so
    that no configuration gets more cores than another without a source."""
    p = Path(path)
    data = _profile_document(p)
    cpu, meta = data.get("cpu"), data.get("meta")
    if isinstance(cpu, dict) and "cores" in cpu:
        cores = cpu["cores"]
        if isinstance(cores, bool) or not isinstance(cores, int):
            raise InvalidUsage(f"latency profile {p}: [cpu] cores must be an integer, got {cores!r}")
    elif isinstance(meta, dict) and isinstance(meta.get("machine"), str):
        found = re.search(r"(\d+) cores?$", meta["machine"].strip())
        if found is None:
            return 1
        cores = int(found.group(1))
    else:
        return 1
    check_int(f"latency profile {p}: cores", cores, low=1, high=MAX_CORES)
    return cores


def profile_costs_tables(path: str | Path) -> dict[str, Any]:
    """A profile's raw `[costs]` table (numbers, and a table per
    configuration), {} if it has none: what a rewritten profile must carry."""
    p = Path(path)
    table = _profile_document(p).get("costs")
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise InvalidUsage(f"latency profile {p}: [costs] must be a table")
    return dict(table)


def profile_costs(path: str | Path, config_name: str) -> dict[str, float]:
    """The coordinator CPU costs (seconds, `Costs` fields) a latency profile sets
    for configuration `config_name`: its `[costs]` numbers, then its
    `[costs."<config_name>"]` table's over them; {} for a profile without
    (every profile before `coordsim calibrate --from`). A run's own [costs]
    still override these."""
    p = Path(path)
    table = profile_costs_tables(p)
    own = table.get(config_name)
    chosen = {k: v for k, v in table.items() if not isinstance(v, dict)}
    chosen.update(own if isinstance(own, dict) else {})
    known = {f.name for f in fields(Costs)}
    for name, cost in chosen.items():
        if name not in known:
            raise InvalidUsage(f"latency profile {p}: unknown cost {name!r}; known: {', '.join(sorted(known))}")
        if isinstance(cost, bool) or not isinstance(cost, int | float):
            raise InvalidUsage(f"latency profile {p}: cost {name} must be a number of seconds, got {cost!r}")
        check_float(f"latency profile {p}: cost {name}", cost, low=0, high=MAX_DURATION_S, unit="seconds")
    return {k: float(v) for k, v in chosen.items()}


def profile_interpreter(path: str | Path, config_name: str, workload: str) -> Interpreter | None:
    """The Python interpreter (`coordinator.config.Interpreter`) that a profile
    built from a real run (`coordsim calibrate --from`) measured for
    `config_name` running `workload`; None if it has none (every other
    profile, and the published system's: it is not Python)."""
    p = Path(path)
    table = _profile_document(p).get("interpreter")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise InvalidUsage(f"latency profile {p}: [interpreter] must be a table")
    per_config = table.get(config_name)
    spec = per_config.get(workload) if isinstance(per_config, dict) else None
    if spec is None:
        return None
    known = {f.name for f in fields(Interpreter)}
    if not isinstance(spec, dict) or set(spec) - known or any(
        isinstance(v, bool) or not isinstance(v, int | float) for v in spec.values()
    ):
        raise InvalidUsage(f"latency profile {p}: [interpreter.{config_name}.{workload}] must map "
                           f"{', '.join(sorted(known))} to numbers")
    return Interpreter(**{k: float(v) for k, v in spec.items()})


def with_profile_cores(config: CoordinatorConfig, path: str | Path) -> CoordinatorConfig:
    """`config` with the profile's cores if it is decoupled (the event loop
    has one core whatever the machine has)."""
    if config.architecture is not Architecture.DECOUPLED:
        return config
    return config.with_overrides(cores=profile_cores(path))


def _check_distribution(path: Path, name: str, dist: Mapping[str, Any]) -> None:
    """Latencies beyond `MAX_DURATION_S` (or a sigma beyond `MAX_SIGMA`) are typos:
    the virtual clock would jump past anything a trace can store."""
    where = f"bad latency profile {path}: latency {name!r}"
    limit_ms = MAX_DURATION_S * 1000
    for key, value in dist.items():
        values = value if key == "samples_ms" else [value] if key.endswith("_ms") else []
        for ms in values:
            if ms > limit_ms:
                raise InvalidUsage(f"{where}: {key} {ms:g} exceeds the maximum {limit_ms:g} ms (one day)")
    sigma = dist.get("sigma")
    if isinstance(sigma, float) and sigma > MAX_SIGMA:
        raise InvalidUsage(f"{where}: sigma {sigma:g} exceeds the maximum {MAX_SIGMA:g}")
