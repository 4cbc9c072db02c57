"""The run configuration of `coordsim compare` / `run` as one value: mode,
configurations, workloads, sweep, locations, latency profile, cost overrides,
seed and output directory. Loadable from TOML, overridable by flags; every
field is validated when the value is built, so bad input fails before anything
starts or is written.

Its fields, their validation, the TOML it loads and the TOML `config show`
prints live here together, because they must change together (a key added in
one place and not the others is the drift this module exists to prevent). The
bounds it checks against are `sim.load.limits`; the latency profile it names
is read by `sim.load.latency_profile`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import tomli_w

from coordinator.config import (
    CONFIGURATIONS,
    Architecture,
    CatalogKind,
    CoordinatorConfig,
    Costs,
    Frontend,
    GroupCommitPolicy,
    KnownBad,
    OracleCalls,
    OracleKind,
    PeekStages,
    PersistListen,
    check_applies,
    check_known_bad,
    knobs,
    named,
)
from sim.load.latency_profile import (
    load_profile,
    profile_costs,
    profile_interpreter,
    with_profile_cores,
)
from sim.load.limits import (
    MAX_ADAPTERS,
    MAX_BATCH,
    MAX_CONCURRENCY,
    MAX_CORES,
    MAX_DURATION_S,
    MAX_LEVELS,
    MAX_OPS,
    MAX_RATE,
    MAX_REPEAT,
    MAX_SEED,
    MAX_TABLES,
    check_float,
    check_int,
    check_real_adapters,
    read_text_file,
)
from sim.load.loadgen import DEFAULT_DRAIN_S, Window
from sim.load.workloads import workload
from sim.runtime.errors import InvalidUsage
from sim.runtime.urls import redact_mapping

if TYPE_CHECKING:
    from sim.runtime.latency import LatencyModel

__all__ = [
    "DEFAULT_PROFILE", "Mode", "RunConfig", "coerce_override", "is_scenario_file", "knobs_toml",
]

Mode = str  # "real" | "virtual"
MODES: Final = ("real", "virtual")

#: The shipped latency profile virtual mode uses unless told otherwise.
DEFAULT_PROFILE: Final = Path(__file__).parents[1] / "model" / "profiles" / "default.toml"

# --- measurement defaults ------------------------------------------------------------
# Chosen so that a default run (3 passes x 3 workloads x 3 configurations x
# 5 levels x (warm-up + 1 window), each pass on a fresh deployment) takes under
# 5 minutes in real mode and under 2 in virtual mode on the 2-core machine
# (measured: see the README), while each window still holds hundreds to
# thousands of operations at the busier levels.

#: Seconds of one measurement window, by mode (virtual: simulated seconds).
DEFAULT_DURATION_S: Final = {"real": 1.0, "virtual": 0.2}
#: Seconds discarded before each level's window, in every pass.
DEFAULT_WARMUP_S: Final = {"real": 0.5, "virtual": 0.05}
#: The longest a closed-loop window may grow to before a level that is still
#: not steady is reported as such (issue 33: 30 simulated seconds, where long
#: windows are cheap; in real mode 10 s, so that a default run's 135 level
#: windows stay within about half an hour even if every one had to grow).
DEFAULT_MAX_WINDOW_S: Final = {"real": 10.0, "virtual": 30.0}
#: Passes (one window per level each, on a fresh deployment, interleaved
#: across configurations): the throughput interval is over these (n - 1 = 2
#: degrees of freedom: wide, and honest about it).
DEFAULT_REPEAT: Final = 3



@final
@dataclass(frozen=True)
class RunConfig:
    """One `coordsim compare` run (see the module docstring).

    `ops_per_level` is the number of operations at concurrency 1; level c
    measures `ops_per_level * sqrt(c)` (`sim.load.loadgen.ops_for_level`).
    `open_loop_rate` switches from the closed-loop sweep to Poisson arrivals at
    that rate, with `concurrency` as the connection pool sizes.
    """

    #: Virtual by default, in every command (docs/guide.md, "Conventions"):
    #: deterministic and fast; real mode is asked for.
    mode: Mode = "virtual"
    configurations: tuple[str, ...] = tuple(CONFIGURATIONS)
    workloads: tuple[str, ...] = ("select-one", "insert", "update")
    concurrency: tuple[int, ...] = (1, 4, 16, 64, 256)
    #: Steady state: seconds of each measurement window (None: the mode's
    #: default, `DEFAULT_DURATION_S`), after `warmup_s` discarded, `repeat`
    #: windows per level. Setting `ops_per_level` measures a fixed number of
    #: operations per window instead.
    duration_s: float | None = None
    warmup_s: float | None = None
    repeat: int | None = None
    #: The longest a window may grow to until its level is steady (None: the
    #: mode's default, `DEFAULT_MAX_WINDOW_S`; at most `duration_s`: never
    #: grow), and how long after a window its operations are waited for
    #: before the rest count as censored (None: `DEFAULT_DRAIN_S`).
    max_window_s: float | None = None
    drain_s: float | None = None
    ops_per_level: int | None = None
    warmup_ops: int = 10
    tables: int = 1
    open_loop_rate: float | None = None
    seed: int = 0
    #: None (or ""): a new run directory under the runs root
    #: (`sim.runtime.run_dirs.run_dir`); a path: exactly that directory.
    output: str | None = None
    latency_profile: str | None = None  # None: the shipped default profile
    postgres_url: str | None = None  # real mode; None: $COORDSIM_POSTGRES_URL or embedded
    blob_url: str | None = None  # real mode; None: files under the output directory
    costs: Mapping[str, float] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)  # CoordinatorConfig fields
    #: Configurations of the user's own, by name: `{"base": "<a named one>",
    #: field = value, …}` (`[variants."my-decoupled"]` in TOML); `--ablate`
    #: builds its chain of one-mechanism steps this way.
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidUsage(f"unknown mode {self.mode!r}; known: {', '.join(MODES)}")
        if not self.configurations:
            raise InvalidUsage("no configurations chosen")
        if not self.workloads:
            raise InvalidUsage("no workloads chosen")
        for vname, spec in self.variants.items():
            if vname in CONFIGURATIONS:
                raise InvalidUsage(f"variant {vname!r} would shadow the named configuration of that name")
            if not isinstance(spec, Mapping) or not isinstance(spec.get("base"), str):
                raise InvalidUsage(f"variant {vname!r} needs base = \"<configuration>\" and fields to change")
            named(spec["base"])
        for name in self.configurations:
            if name not in self.variants:
                named(name)
        for name in self.workloads:
            if not is_scenario_file(name):
                workload(name)
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise InvalidUsage(f"concurrency levels must be >= 1 (--concurrency), got {list(self.concurrency)}")
        if len(self.concurrency) > MAX_LEVELS:
            raise InvalidUsage(f"{len(self.concurrency)} concurrency levels exceed the maximum {MAX_LEVELS}")
        for c in self.concurrency:
            check_int("--concurrency", c, low=1, high=MAX_CONCURRENCY, unit="clients")
        if self.ops_per_level is not None:
            check_int("ops_per_level (--ops)", self.ops_per_level, low=1, high=MAX_OPS, unit="operations")
        if self.duration_s is not None:
            check_float("duration_s (--duration)", self.duration_s, low=0, high=MAX_DURATION_S,
                        unit="seconds", strict_low=True)
        if self.warmup_s is not None:
            check_float("warmup_s (--warmup)", self.warmup_s, low=0, high=MAX_DURATION_S, unit="seconds")
        if self.max_window_s is not None:
            check_float("max_window_s (--max-window)", self.max_window_s, low=0, high=MAX_DURATION_S,
                        unit="seconds", strict_low=True)
        if self.drain_s is not None:
            check_float("drain_s (--drain-limit)", self.drain_s, low=0, high=MAX_DURATION_S,
                        unit="seconds", strict_low=True)
        if self.repeat is not None:
            check_int("repeat (--repeat)", self.repeat, low=1, high=MAX_REPEAT, unit="repetitions")
        check_int("tables (--tables)", self.tables, low=1, high=MAX_TABLES, unit="tables")
        check_int("warmup_ops (--warmup)", self.warmup_ops, low=0, high=MAX_OPS, unit="operations")
        check_int("--seed", self.seed, low=-MAX_SEED, high=MAX_SEED)
        if self.open_loop_rate is not None:
            check_float("open_loop_rate (--rate)", self.open_loop_rate, low=0, high=MAX_RATE,
                        unit="operations per second", strict_low=True)
        known_costs = {f.name for f in fields(Costs)}
        bad = sorted(set(self.costs) - known_costs)
        if bad:
            raise InvalidUsage(f"unknown cost(s) {', '.join(bad)}; known: {', '.join(sorted(known_costs))}")
        for name, cost in self.costs.items():
            if isinstance(cost, bool) or not isinstance(cost, int | float):
                raise InvalidUsage(f"cost {name} must be a number of seconds, got {cost!r}")
            check_float(f"cost {name}", cost, low=0, high=MAX_DURATION_S, unit="seconds")
        for name in self.configurations:
            coordinator = self.coordinator(name)  # validates overrides
            if self.mode == "real":
                check_real_adapters(name, coordinator)

    # --- building ---------------------------------------------------------------------

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        """Reads a TOML file whose keys are this class's fields (a `[costs]` and
        an `[overrides]` table); unknown keys and bad values are `InvalidUsage`."""
        p = Path(path)
        try:
            data = tomllib.loads(read_text_file(p, "config"))
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise InvalidUsage(f"bad TOML in {p}: {' '.join(str(exc).split())}") from exc
        # `[configuration.*]` tables are what `config show` and an output's
        # config.toml print for reading; they are not settings.
        data.pop("configuration", None)
        return cls().with_overrides(**data)

    def with_overrides(self, **changes: Any) -> RunConfig:
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
            elif k in ("costs", "overrides", "variants"):
                if not isinstance(v, dict):
                    raise InvalidUsage(f"{k} must be a table, got {v!r}")
                v = dict(v)
            elif k in ("duration_s", "warmup_s", "max_window_s", "drain_s"):
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise InvalidUsage(f"{k} must be a number of seconds, got {v!r}")
                v = float(v)
            elif k in ("ops_per_level", "warmup_ops", "tables", "seed", "repeat"):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise InvalidUsage(f"{k} must be an integer, got {v!r}")
            elif k == "open_loop_rate":
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise InvalidUsage(f"{k} must be a number, got {v!r}")
                v = float(v)
            elif not isinstance(v, str):
                raise InvalidUsage(f"{k} must be a string, got {v!r}")
            elif "\x00" in v:
                # A path or URL with a NUL byte: no system call takes it.
                raise InvalidUsage(f"{k} must not contain a NUL character, got {v!r}")
            clean[k] = v
        try:
            return replace(self, **clean)
        except TypeError as exc:
            raise InvalidUsage(f"bad config: {exc}") from exc

    # --- derived ----------------------------------------------------------------------

    def coordinator(self, name: str, workload: str | None = None) -> CoordinatorConfig:
        """The named coordinator configuration with this run's cost and field
        overrides (and, in virtual mode on a profile built from a real run,
        the Python interpreter it measured for `workload`)."""
        variant = self.variants.get(name)
        if variant is not None:
            base = named(variant["base"])
            own = {k: _coerce(k, v) for k, v in variant.items() if k != "base"}
            try:
                base = base.with_overrides(name=name, **own)
            except TypeError as exc:
                raise InvalidUsage(f"bad variant {name!r}: {exc}") from exc
            for k in own:  # a field the variant's architecture ignores is a mistake, as in [overrides]
                check_applies(base, k)
        else:
            base = named(name)
        for k, v in self.overrides.items():
            check_applies(base, k, _coerce(k, v))
        if "cores" not in self.overrides and (variant is None or "cores" not in variant):
            base = with_profile_cores(base, self.latency_profile or DEFAULT_PROFILE)
        if self.mode == "virtual" and self.latency_profile:
            # A profile's [costs] describe a coordinator's CPU (`coordsim calibrate
            # --from`); real mode runs one, whose modeled part stays `Costs`.
            own = profile_costs(self.latency_profile, name)
            if own:
                base = base.with_overrides(costs=replace(base.costs, **own))
            interp = profile_interpreter(self.latency_profile, name, workload) if workload else None
            if interp is not None:
                base = base.with_overrides(interpreter=interp)
        changes: dict[str, Any] = {k: _coerce(k, v) for k, v in self.overrides.items()}
        if self.costs:
            try:
                changes["costs"] = replace(base.costs, **{k: float(v) for k, v in self.costs.items()})
            except (TypeError, ValueError) as exc:
                raise InvalidUsage(f"bad cost override: {exc}") from exc
        try:
            resolved = base.with_overrides(**changes) if changes else base
        except TypeError as exc:
            raise InvalidUsage(f"bad configuration override: {exc}") from exc
        check_known_bad(resolved)
        return resolved

    def window(self) -> Window:
        """How each concurrency level is measured (see `DEFAULT_DURATION_S`)."""
        repeat = self.repeat if self.repeat is not None else DEFAULT_REPEAT
        if self.ops_per_level is not None and self.duration_s is None:
            return Window(warmup_s=0.0, ops=self.ops_per_level, repeat=repeat)
        duration = self.duration_s if self.duration_s is not None else DEFAULT_DURATION_S[self.mode]
        warmup = self.warmup_s if self.warmup_s is not None else DEFAULT_WARMUP_S[self.mode]
        cap = self.max_window_s if self.max_window_s is not None else DEFAULT_MAX_WINDOW_S[self.mode]
        drain = self.drain_s if self.drain_s is not None else DEFAULT_DRAIN_S
        return Window(warmup_s=warmup, duration_s=duration, repeat=repeat,
                      max_duration_s=cap if cap > duration else None, drain_s=drain)

    def effective(self) -> RunConfig:
        """This value with every mode-dependent default filled in, as a run uses
        it (what `config show` prints and an output's `config.toml` records)."""
        w = self.window()
        if w.duration_s is None:
            return replace(self, repeat=w.repeat)
        return replace(self, duration_s=w.duration_s, warmup_s=w.warmup_s, repeat=w.repeat,
                       max_window_s=w.max_duration_s or w.duration_s, drain_s=w.drain_s)

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
        d["variants"] = {k: dict(v) for k, v in self.variants.items()}
        return d

    def redacted(self) -> RunConfig:
        """A copy safe to print or store: passwords in its URLs (and any
        secret-named override) replaced by `***` (`sim.runtime.urls.redact_mapping`)."""
        return self.with_overrides(**redact_mapping(self.to_dict()))

    def to_toml(self, *, redact: bool = True) -> str:
        """The value as TOML that `from_toml` reads back (None fields omitted).

        Secrets are redacted (see `redacted`) unless `redact=False`: the text is
        for printing and for the `config.toml` of an output directory, and a
        password read back is `***`.
        """
        d = redact_mapping(self.to_dict()) if redact else self.to_dict()
        return tomli_w.dumps(_sorted_tables({k: v for k, v in d.items() if v is not None}))


def is_scenario_file(name: str) -> bool:
    """A `--workloads` entry that names a scenario file (.py or .toml) of the
    user's rather than a built-in workload (`sim.load.scenarios.load` reads it)."""
    return name.endswith((".py", ".toml")) and Path(name).is_file()


def knobs_toml(cfg: RunConfig) -> str:
    """Every effective value of the run (`RunConfig.effective`) and of every
    configuration it compares — architecture, oracle, catalog, group-commit
    policy and interval, confirm_leadership, read_ts batching, cores, batch
    size, CPU costs, known-bad toggles — plus the latency profile's source:
    nothing a comparison depends on is left implicit (DESIGN.md §2, §10)."""
    head = cfg.effective().to_toml()
    out = [head.rstrip(), ""]
    out.append(f"# latency profile: {cfg.latency_profile or DEFAULT_PROFILE}")
    out.append("# costs no measurement backs (CPU costs, replica, catalog feed) and their sources:"
               " sim/model/unmeasured.py (`python -m sim.model.unmeasured`)")
    tables = {"configuration": {name: knobs(cfg.coordinator(name)) for name in cfg.configurations}}
    return "\n".join(out) + "\n\n" + tomli_w.dumps(tables)


def _sorted_tables(d: Mapping[str, Any], *, top: bool = True) -> dict[str, Any]:
    """`d` with every sub-table's keys sorted (the top level keeps its order), so
    the text is stable whatever order the overrides were given in."""
    items = d.items() if top else sorted(d.items())
    return {k: _sorted_tables(v, top=False) if isinstance(v, Mapping) else v for k, v in items}


_ENUMS: Final = {
    "architecture": Architecture,
    "oracle": OracleKind,
    "catalog": CatalogKind,
    "group_commit": GroupCommitPolicy,
    "oracle_calls": OracleCalls,
    "peek_stages": PeekStages,
    "frontend": Frontend,
    "persist_listen": PersistListen,
}


#: Bounds of the numeric `CoordinatorConfig` fields an `[overrides]` table may set.
_INT_OVERRIDES: Final = {"cores": MAX_CORES, "max_batch": MAX_BATCH, "adapters": MAX_ADAPTERS}
_BOOL_OVERRIDES: Final = ("confirm_leadership", "batch_read_ts", "ddl_round_trips", "stash_commit_reads")


def _coerce(key: str, v: Any) -> Any:
    """TOML values of `CoordinatorConfig` fields: enum names and the `known_bad`
    table, with numbers and switches checked (a NaN interval or a string for a
    switch would only fail deep inside a run)."""
    if key in _INT_OVERRIDES:
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidUsage(f"override {key} must be an integer, got {v!r}")
        check_int(f"override {key}", v, low=1, high=_INT_OVERRIDES[key])
    elif key == "commits_in_flight":
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidUsage(f"override {key} must be an integer (0: no bound), got {v!r}")
        check_int(f"override {key}", v, low=0, high=MAX_BATCH)
    elif key in ("group_commit_interval_s", "persist_poll_s"):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise InvalidUsage(f"override {key} must be a number of seconds, got {v!r}")
        check_float(f"override {key}", v, low=0, high=MAX_DURATION_S, unit="seconds", strict_low=True)
    elif key in _BOOL_OVERRIDES and not isinstance(v, bool):
        raise InvalidUsage(f"override {key} must be true or false, got {v!r}")
    elif key in ("name", "costs"):
        raise InvalidUsage(f"override {key} cannot be set here (costs go in the [costs] table)")
    try:
        if key in _ENUMS and isinstance(v, str):
            return _ENUMS[key](v)
        if key == "known_bad" and isinstance(v, dict):
            return KnownBad(**v)
    except (ValueError, TypeError) as exc:
        raise InvalidUsage(f"bad override {key} = {v!r}: {exc}") from exc
    return v


def coerce_override(key: str, v: Any) -> Any:
    """A `CoordinatorConfig` field's value as a TOML file or a facts file gives
    it (enum names as strings), checked; `InvalidUsage` if it cannot be one."""
    return _coerce(key, v)


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
