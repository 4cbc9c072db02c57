"""The run configuration of `coordsim compare` / `run` as one value: mode,
configurations, workloads, sweep, locations, latency profile, cost overrides,
seed and output directory. Loadable from TOML, overridable by flags; every
field is validated when the value is built, so bad input fails before anything
starts or is written.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

from coordinator.config import (
    CONFIGURATIONS,
    Architecture,
    CatalogKind,
    CoordinatorConfig,
    Costs,
    GroupCommitPolicy,
    KnownBad,
    OracleKind,
    named,
)
from persist.location import InvalidUsage
from sim.runtime import LatencyModel, LatencySpecError
from sim.workloads import workload

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DEFAULT_PROFILE", "Config", "Mode", "load_profile"]

Mode = str  # "real" | "virtual"
MODES: Final = ("real", "virtual")

#: The shipped latency profile virtual mode uses unless told otherwise.
DEFAULT_PROFILE: Final = Path(__file__).parent / "profiles" / "default.toml"


@final
@dataclass(frozen=True)
class Config:
    """One `coordsim compare` run (see the module docstring).

    `ops_per_level` is the number of operations at concurrency 1; level c
    measures `ops_per_level * sqrt(c)` (`sim.loadgen.ops_for_level`).
    `open_loop_rate` switches from the closed-loop sweep to Poisson arrivals at
    that rate, with `concurrency` as the connection pool sizes.
    """

    mode: Mode = "real"
    configurations: tuple[str, ...] = tuple(CONFIGURATIONS)
    workloads: tuple[str, ...] = ("select-one", "insert", "update")
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    ops_per_level: int = 8
    warmup_ops: int = 10
    tables: int = 1
    open_loop_rate: float | None = None
    seed: int = 1
    output: str = "coordsim-out"
    latency_profile: str | None = None  # None: the shipped default profile
    postgres_url: str | None = None  # real mode; None: $COORDSIM_POSTGRES_URL or embedded
    blob_url: str | None = None  # real mode; None: files under the output directory
    costs: Mapping[str, float] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)  # CoordinatorConfig fields

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidUsage(f"unknown mode {self.mode!r}; known: {', '.join(MODES)}")
        if not self.configurations:
            raise InvalidUsage("no configurations chosen")
        if not self.workloads:
            raise InvalidUsage("no workloads chosen")
        for name in self.configurations:
            named(name)
        for name in self.workloads:
            workload(name)
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise InvalidUsage(f"concurrency levels must be >= 1, got {list(self.concurrency)}")
        for name, value in (("ops_per_level", self.ops_per_level), ("tables", self.tables)):
            if value < 1:
                raise InvalidUsage(f"{name} must be >= 1, got {value}")
        if self.warmup_ops < 0:
            raise InvalidUsage(f"warmup_ops must be >= 0, got {self.warmup_ops}")
        if self.open_loop_rate is not None and self.open_loop_rate <= 0:
            raise InvalidUsage(f"open_loop_rate must be > 0, got {self.open_loop_rate}")
        known_costs = {f.name for f in fields(Costs)}
        bad = sorted(set(self.costs) - known_costs)
        if bad:
            raise InvalidUsage(f"unknown cost(s) {', '.join(bad)}; known: {', '.join(sorted(known_costs))}")
        for name in self.configurations:
            self.coordinator(name)  # validates overrides

    # --- building ---------------------------------------------------------------------

    @classmethod
    def from_toml(cls, path: str | Path) -> Config:
        """Reads a TOML file whose keys are this class's fields (a `[costs]` and
        an `[overrides]` table); unknown keys and bad values are `InvalidUsage`."""
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except OSError as exc:
            raise InvalidUsage(f"cannot read config {p}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise InvalidUsage(f"bad TOML in {p}: {exc}") from exc
        return cls().with_overrides(**data)

    def with_overrides(self, **changes: Any) -> Config:
        """A copy with the given fields replaced (None values are ignored, so
        unset flags keep the file's or the default's value)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InvalidUsage(f"unknown config key(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        clean: dict[str, Any] = {}
        for k, v in changes.items():
            if v is None:
                continue
            if k in ("configurations", "workloads"):
                v = tuple(_names(k, v))
            elif k == "concurrency":
                v = tuple(_ints(k, v))
            elif k in ("costs", "overrides"):
                if not isinstance(v, dict):
                    raise InvalidUsage(f"{k} must be a table, got {v!r}")
                v = dict(v)
            elif k in ("ops_per_level", "warmup_ops", "tables", "seed"):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise InvalidUsage(f"{k} must be an integer, got {v!r}")
            elif k == "open_loop_rate":
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise InvalidUsage(f"{k} must be a number, got {v!r}")
                v = float(v)
            elif not isinstance(v, str):
                raise InvalidUsage(f"{k} must be a string, got {v!r}")
            clean[k] = v
        try:
            return replace(self, **clean)
        except TypeError as exc:
            raise InvalidUsage(f"bad config: {exc}") from exc

    # --- derived ----------------------------------------------------------------------

    def coordinator(self, name: str) -> CoordinatorConfig:
        """The named coordinator configuration with this run's cost and field overrides."""
        base = named(name)
        changes: dict[str, Any] = {k: _coerce(k, v) for k, v in self.overrides.items()}
        if self.costs:
            try:
                changes["costs"] = replace(base.costs, **{k: float(v) for k, v in self.costs.items()})
            except (TypeError, ValueError) as exc:
                raise InvalidUsage(f"bad cost override: {exc}") from exc
        try:
            return base.with_overrides(**changes) if changes else base
        except TypeError as exc:
            raise InvalidUsage(f"bad configuration override: {exc}") from exc

    def effective_postgres_url(self) -> str | None:
        return self.postgres_url or os.environ.get("COORDSIM_POSTGRES_URL") or None

    def latency(self) -> LatencyModel:
        """The latency model of virtual mode (and of the modeled parts of real mode)."""
        return load_profile(self.latency_profile or DEFAULT_PROFILE)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("configurations", "workloads", "concurrency"):
            d[k] = list(d[k])
        d["costs"] = dict(self.costs)
        d["overrides"] = dict(self.overrides)
        return d

    def to_toml(self) -> str:
        """The value as TOML that `from_toml` reads back (None fields omitted)."""
        lines: list[str] = []
        tables: list[str] = []
        for k, v in self.to_dict().items():
            if v is None:
                continue
            if isinstance(v, dict):
                tables.append(f"\n[{k}]")
                tables.extend(f"{kk} = {_toml_value(vv)}" for kk, vv in sorted(v.items()))
            else:
                lines.append(f"{k} = {_toml_value(v)}")
        return "\n".join(lines + tables) + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in sorted(v.items())) + " }"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(v)


_ENUMS: Final = {
    "architecture": Architecture,
    "oracle": OracleKind,
    "catalog": CatalogKind,
    "group_commit": GroupCommitPolicy,
}


def _coerce(key: str, v: Any) -> Any:
    """TOML values of `CoordinatorConfig` fields: enum names and the `known_bad` table."""
    try:
        if key in _ENUMS and isinstance(v, str):
            return _ENUMS[key](v)
        if key == "known_bad" and isinstance(v, dict):
            return KnownBad(**v)
    except (ValueError, TypeError) as exc:
        raise InvalidUsage(f"bad override {key} = {v!r}: {exc}") from exc
    return v


def _names(key: str, v: Any) -> list[str]:
    if isinstance(v, str):
        v = [x.strip() for x in v.split(",") if x.strip()]
    if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
        raise InvalidUsage(f"{key} must be a list of names, got {v!r}")
    return list(v)


def _ints(key: str, v: Any) -> list[int]:
    if isinstance(v, str):
        try:
            v = [int(x) for x in v.split(",") if x.strip()]
        except ValueError as exc:
            raise InvalidUsage(f"{key} must be integers, got {v!r}") from exc
    if not isinstance(v, list | tuple) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise InvalidUsage(f"{key} must be a list of integers, got {v!r}")
    return list(v)


def load_profile(path: str | Path) -> LatencyModel:
    """Reads a latency profile (TOML or JSON): a `[latency]` table of
    distributions as `LatencyModel.from_dict` reads them, plus an optional
    `[meta]` saying where the numbers came from."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InvalidUsage(f"cannot read latency profile {p}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise InvalidUsage(f"bad latency profile {p}: {exc}") from exc
    spec = data.get("latency")
    if not isinstance(spec, dict):
        raise InvalidUsage(f"latency profile {p} has no [latency] table")
    try:
        return LatencyModel.from_dict(spec)
    except LatencySpecError as exc:
        raise InvalidUsage(f"bad latency profile {p}: {exc}") from exc
