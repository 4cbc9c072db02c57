"""What one anomaly run depends on (`Spec`): scenario, configuration, seed,
known-bad variants, sizes, fault plan, mode and schedule — same spec ⇒ same
history in virtual mode. With it, the configuration names a spec accepts and
the limits that refuse a spec before anything runs.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, final

from coordinator.config import CoordinatorConfig, KnownBad, named
from sim.load.limits import (
    MAX_CLIENTS,
    MAX_SCENARIO_OPS,
    MAX_SIZE,
    MAX_STUCK_AFTER_S,
    REAL_STUCK_AFTER_S,
    STUCK_AFTER_S,
)
from sim.nemesis.anomaly_scenarios import scenario_named
from sim.nemesis.plan import (
    MODES,
    SINGLE_COORDINATOR_FAULTS,
    Fault,
    FaultKind,
    FaultPlan,
    Mode,
    check_adapters,
    check_plan,
    check_single_coordinator,
    kinds_for,
)
from sim.runtime.core import Runtime
from sim.runtime.errors import InvalidUsage
from sim.runtime.schedule import parse_schedule

if TYPE_CHECKING:
    import random

__all__ = [
    "ADAPTER_CONFIG_NAMES",
    "CONFIG_NAMES",
    "MAX_FAULT_FACTOR",
    "Spec",
    "coordinator_config",
    "default_spec",
    "parse_known_bad",
    "rollout_config",
]

CONFIG_NAMES: Final = ("event-loop", "event-loop+pg-oracle", "decoupled")
#: Decoupled with several adapters (issue 36), named as `compare --adapters`
#: names its variants: any `<configuration>-<N>-adapters` runs; these two are
#: the matrix's. Virtual mode only for now (real mode runs one process).
ADAPTER_CONFIG_NAMES: Final = ("decoupled-2-adapters", "decoupled-4-adapters")
_ADAPTERS_SUFFIX: Final = "-adapters"
#: A slow fault's factor: 10^4 turns a 1 ms round trip into 10 s.
MAX_FAULT_FACTOR: Final = 10_000.0


def coordinator_config(name: str) -> CoordinatorConfig:
    """A named configuration, or `<configuration>-<N>-adapters`: that one with
    `adapters = N` (an event loop or an in-memory oracle refuses N > 1).

    Raises:
        InvalidUsage: an unknown name, or adapters that do not apply.
    """
    base, _, count = name.removesuffix(_ADAPTERS_SUFFIX).rpartition("-")
    if name.endswith(_ADAPTERS_SUFFIX) and count.isdigit() and base:
        n = int(count)
        if not 1 <= n <= 64:
            raise InvalidUsage(f"{name}: adapters must be between 1 and 64, got {n}")
        return named(base).with_overrides(name=name, adapters=n)
    try:
        return named(name)
    except InvalidUsage as exc:
        raise InvalidUsage(f"{exc}, or <configuration>-<N>-adapters (e.g. {ADAPTER_CONFIG_NAMES[0]})") from None


def rollout_config(config: CoordinatorConfig, plan: FaultPlan) -> CoordinatorConfig:
    """`config` as seed 000's rollout ran it while `plan` flips the oracle: with
    `confirm_leadership()` kept on the distributed oracle too ("we could
    produce linearization anomalies when switching in either direction"),
    though `event-loop+pg-oracle`, the rollout's end state, drops it. Other
    plans, and configurations that confirm already, are left as they are."""
    if config.confirm_leadership or not any(f.kind in SINGLE_COORDINATOR_FAULTS for f in plan.faults):
        return config
    return config.with_overrides(confirm_leadership=True)


def parse_known_bad(names: list[str] | tuple[str, ...]) -> KnownBad:
    """`KnownBad` with the named toggles on (`-` or `_` spelling)."""
    known = set(KnownBad.__dataclass_fields__)
    toggles = {}
    for n in names:
        key = n.replace("-", "_")
        if key not in known:
            raise InvalidUsage(
                f"unknown known-bad variant {n!r}; known: {', '.join(sorted(known))}"
            )
        toggles[key] = True
    return KnownBad(**toggles)


@final
@dataclass(frozen=True)
class Spec:
    """Everything one run depends on: same spec ⇒ same history (virtual mode;
    real mode replays the same statements and faults, not the same interleaving).

    Raises:
        InvalidUsage: an unknown mode, or a fault that cannot act in it
            (`pg-kill` needs real mode, `oracle-slow` virtual).
    """

    scenario: str
    config: str
    seed: int
    known_bad: KnownBad = field(default_factory=KnownBad)
    clients: int = 2
    size: int = 4
    faults: FaultPlan = field(default_factory=FaultPlan)
    mode: Mode = "virtual"
    #: The virtual loop's scheduling policy (`sim.runtime.schedule`).
    schedule: str = "fifo"
    #: Real mode's stuck limit in wall seconds (None: `REAL_STUCK_AFTER_S`);
    #: virtual mode's is always `STUCK_AFTER_S` simulated seconds.
    stuck_after_s: float | None = None

    @property
    def stuck_limit_s(self) -> float:
        """Seconds after which this run counts as stuck (simulated in virtual mode)."""
        if self.mode == "virtual":
            return STUCK_AFTER_S
        return REAL_STUCK_AFTER_S if self.stuck_after_s is None else self.stuck_after_s

    def __post_init__(self) -> None:
        check_plan(self.faults, self.mode)
        if self.faults.faults:
            check_adapters(self.faults, coordinator_config(self.config).adapters)
            check_single_coordinator(self.faults, coordinator_config(self.config).architecture.value)
        object.__setattr__(self, "schedule", parse_schedule(self.schedule))  # canonical spelling
        if self.stuck_after_s is not None:
            if self.mode == "virtual":
                raise InvalidUsage("--stuck-after is real mode's limit; a virtual run is stuck after "
                                   f"{STUCK_AFTER_S:g} simulated seconds")
            if not (math.isfinite(self.stuck_after_s) and 0 < self.stuck_after_s <= MAX_STUCK_AFTER_S):
                raise InvalidUsage(f"--stuck-after must be > 0 and <= {MAX_STUCK_AFTER_S:g} seconds, "
                                   f"got {self.stuck_after_s}")
        if self.mode != "virtual" and self.schedule != "fifo":
            raise InvalidUsage(f"--schedule {self.schedule} needs virtual mode; real mode runs asyncio's own order")
        # Lower bounds (>= 1) are `_run`'s: the shrinker steps down to them.
        if self.clients > MAX_CLIENTS:
            raise InvalidUsage(f"--clients {self.clients} exceeds the maximum {MAX_CLIENTS} clients")
        if self.size > MAX_SIZE:
            raise InvalidUsage(f"--size {self.size} exceeds the maximum {MAX_SIZE} operations per client")
        if self.clients * self.size > MAX_SCENARIO_OPS:
            raise InvalidUsage(
                f"--clients {self.clients} x --size {self.size} exceeds the maximum "
                f"{MAX_SCENARIO_OPS} operations in one run"
            )
        if not -(2**63) < self.seed < 2**63:
            raise InvalidUsage(f"--seed {self.seed} does not fit in 64 bits (a trace stores it as int64)")
        for fault in self.faults.faults:
            # A fault still pending when the run counts as stuck would turn a
            # typo (`@99999999ms`) into a "liveness bug" after 30 s.
            end = fault.at_s + fault.duration_s
            if not end < self.stuck_limit_s:
                raise InvalidUsage(
                    f"fault {fault} ends {end:g} s into the run; a run is stopped as stuck after {self.stuck_limit_s:g} s"
                )
            if not (math.isfinite(fault.factor) and 0 < fault.factor <= MAX_FAULT_FACTOR):
                raise InvalidUsage(f"fault {fault}: factor must be > 0 and <= {MAX_FAULT_FACTOR:g}, got {fault.factor}")

    def command(self) -> str:
        """A one-line shell command replaying this run."""
        parts = [
            "uv",
            "run",
            "coordsim",
            "anomalies",
            "run",
            self.scenario,
            "--config",
            self.config,
        ]
        parts += ["--seed", str(self.seed)]
        if self.mode != "virtual":
            parts += ["--mode", self.mode]
        for k in self.known_bad.enabled():
            parts += ["--known-bad", k.replace("_", "-")]
        parts += ["--clients", str(self.clients), "--size", str(self.size)]
        parts += ["--faults", str(self.faults)]
        if self.schedule != "fifo":
            parts += ["--schedule", self.schedule]
        if self.stuck_after_s is not None:
            parts += ["--stuck-after", f"{self.stuck_after_s:g}"]
        return shlex.join(parts)


def default_spec(
    name: str,
    config_name: str,
    seed: int,
    *,
    known_bad: KnownBad | None = None,
    mode: Mode = "virtual",
    schedule: str = "fifo",
) -> Spec:
    """The spec `run_scenario` uses when given only a scenario, config and seed:
    the scenario's sizes and a fault plan drawn from the seed (from the fault
    kinds that can act in `mode`)."""
    sc = scenario_named(name)
    coordinator_config(config_name)  # unknown names fail here, with the list of known ones
    if mode not in MODES:
        raise InvalidUsage(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    if sc.faults is not None:
        plan = FaultPlan.parse(sc.faults)
    else:
        plan = FaultPlan.random(
            _plan_rng(seed), kinds_for(mode, sc.fault_kinds), count=sc.fault_count,
            horizon_s=sc.horizon_s, max_duration_s=sc.max_duration_s, shifts_ms=sc.shifts_ms,
        )
    if sc.two_processes and coordinator_config(config_name).adapters == 1:
        plan = FaultPlan((Fault(0.0, FaultKind.SPLIT_BRAIN), *plan.faults))
    return Spec(name, config_name, seed, known_bad or KnownBad(), sc.clients, sc.size, plan, mode, schedule)


def _plan_rng(seed: int) -> random.Random:
    return Runtime(seed=seed).derive("nemesis-plan").rng
