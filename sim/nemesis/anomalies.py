"""Anomaly scenarios: short, seeded client programs whose recorded histories the
checkers judge — seed 001's three steps (and its index variant), concurrent DDL
+ DML + reads, coordinator crash/restart, split brain, and busy batched reads —
optionally under a nemesis (`sim.nemesis.nemesis`).

`run_scenario` is the one entry point the regression suite, `coordsim anomalies`,
`coordsim shrink` and the Spark sweep call. In virtual mode (the default) same
arguments ⇒ same history; real mode runs the same bodies on the stock loop
against a fresh Postgres database, where the seed fixes the statements and the
fault plan but not the interleaving. Importing this module has no side effects.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final, final

import anyio

from coordinator.config import CoordinatorConfig, KnownBad, named
from sim.history.recorder import HistoryRecorder
from sim.load.deployment import switchable_latency
from sim.load.driver import drive
from sim.load.scenarios.builtin import PROGRAMS
from sim.nemesis.nemesis import Nemesis
from sim.nemesis.plan import (
    CLOCK_SHIFTS_MS,
    MODES,
    PAST_LEASE_SHIFTS_MS,
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
from sim.runtime.core import Runtime, run
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.latency import Constant, LatencyModel, LogNormal
from sim.runtime.schedule import parse_schedule

if TYPE_CHECKING:
    import random
    from collections.abc import Callable

    from sim.history.model import Event, History

__all__ = [
    "ADAPTER_CONFIG_NAMES",
    "CONFIG_NAMES",
    "MODES",
    "SCENARIOS",
    "Scenario",
    "Spec",
    "coordinator_config",
    "default_spec",
    "latency_model",
    "parse_known_bad",
    "rollout_config",
    "run_scenario",
    "run_spec",
]

CONFIG_NAMES: Final = ("event-loop", "event-loop+pg-oracle", "decoupled")
#: Decoupled with several adapters (issue 36), named as `compare --adapters`
#: names its variants: any `<configuration>-<N>-adapters` runs; these two are
#: the matrix's. Virtual mode only for now (real mode runs one process).
ADAPTER_CONFIG_NAMES: Final = ("decoupled-2-adapters", "decoupled-4-adapters")
_ADAPTERS_SUFFIX: Final = "-adapters"
#: Simulated seconds after which a virtual run counts as stuck: virtual time
#: only advances with the simulation, so this counts its progress, never the
#: host's speed (a scenario takes well under one simulated second).
STUCK_AFTER_S: Final = 30.0
#: Real mode's default stuck limit, in wall-clock seconds (`--stuck-after`):
#: generous, because a healthy real run on a loaded host takes minutes; a run
#: past it is reported as stuck (exit 1, with its last operations).
REAL_STUCK_AFTER_S: Final = 900.0
#: The largest `--stuck-after` (a day).
MAX_STUCK_AFTER_S: Final = 86_400.0
#: How many of a stuck run's last operations its report shows.
STUCK_LAST_OPS: Final = 5


class RunStuck(CoordsimError):
    """A run did not finish within its stuck limit: a result (a liveness
    failure, exit 1), not a crash. `last` describes its last operations."""

    def __init__(self, after_s: float, *, virtual: bool, last: list[str], ops: int) -> None:
        unit = "simulated s" if virtual else "s of wall time"
        shown = "; ".join(last) if last else "none"
        super().__init__(f"the run was stuck: not finished after {after_s:g} {unit} "
                         f"({ops} operations recorded; last: {shown})")  # fmt: skip
        self.after_s = after_s
        self.last = last
        self.ops = ops
#: Limits of `--clients` and `--size` (operations or rounds per client), and of
#: their product: a history row costs ~0.5 KiB while recorded, so 10^8
#: operations is already more than a 24 GiB machine holds; a scenario's defaults
#: are a few clients and a dozen operations each.
MAX_CLIENTS: Final = 100_000
MAX_SIZE: Final = 10**7
MAX_SCENARIO_OPS: Final = 10**8
#: A slow fault's factor: 10^4 turns a 1 ms round trip into 10 s.
MAX_FAULT_FACTOR: Final = 10_000.0


def latency_model() -> LatencyModel:
    """Round trips of the order measured on an embedded Postgres (a stash or
    oracle statement ~0.5-2 ms) and a replica hop (~0.25 ms, the replica's
    default), as the coordinator tests use."""
    return LatencyModel(
        {
            "stash.txn": LogNormal(0.0015, 0.4),
            "catalog.stash.txn": LogNormal(0.002, 0.4),
            "oracle.pg": LogNormal(0.0008, 0.4),
            "controller.catalog_feed": LogNormal(0.002, 0.5),
        },
        default=Constant(0.0),
    )


@final
@dataclass(frozen=True)
class Scenario:
    """A scenario's defaults: how many clients and operations, which faults the
    seed draws (`fault_kinds` that can act in the run's mode, `fault_count`
    over the first `horizon_s`), and latency overrides."""

    name: str
    doc: str
    clients: int
    size: int
    fault_kinds: tuple[FaultKind, ...] = ()
    fault_count: int = 0
    horizon_s: float = 0.05
    oracle_spread: float | None = None  # sigma of oracle.pg (busy-reads: queueing at the server)
    #: The program it runs (`sim.load.scenarios.builtin.PROGRAMS`); None: its name.
    runs: str | None = None
    #: A fixed fault plan (`FaultPlan.parse`) instead of one drawn from the seed.
    faults: str | None = None
    #: The longest fault a drawn plan holds.
    max_duration_s: float = 0.02
    #: With one adapter, a second coordinator starts at once (`split-brain@0ms`,
    #: added to the drawn plan), so that two processes call `write_ts`.
    two_processes: bool = False
    #: The steps a drawn clock-jump or clock-skew picks from (either way).
    shifts_ms: tuple[int, ...] = CLOCK_SHIFTS_MS

    @property
    def program(self) -> str:
        return self.runs or self.name


SCENARIOS: Final[dict[str, Scenario]] = {
    s.name: s
    for s in (
        Scenario(
            "seed001", "seed 001: c1 CREATE TABLE, c2 INSERT, c1 SELECT; pairs in parallel", 2, 4
        ),
        Scenario(
            "seed001-index",
            "seed 001 with an index on the table, so the SELECT reads a dataflow",
            2,
            3,
        ),
        Scenario(
            "ddl-dml",
            "clients insert into and read shared tables while creating and dropping their own; random replica, oracle and store faults",
            4,
            10,
            fault_kinds=(
                FaultKind.REPLICA_SLOW,
                FaultKind.ORACLE_SLOW,
                FaultKind.REPLICA_CRASH,
                FaultKind.STORE_ERRORS,
                # Last, so virtual mode (which drops it) draws the plans it always drew.
                FaultKind.PG_KILL,
            ),
            fault_count=2,
        ),
        Scenario(
            "crash-restart",
            "ddl-dml while the coordinator crashes and restarts on the same stores",
            4,
            10,
            fault_kinds=(FaultKind.CRASH_RESTART,),
            fault_count=2,
            runs="ddl-dml",
        ),
        Scenario(
            "split-brain",
            "readers and writers (ddl-dml) while a second coordinator starts beside the first; readers stay on the old one",
            4,
            10,
            fault_kinds=(FaultKind.SPLIT_BRAIN,),
            fault_count=1,
            horizon_s=0.03,
        ),
        # Issue 36: ddl-dml while one adapter of several crashes, is cut off
        # from the oracle, or pauses (configurations with adapters > 1). A
        # pause or partition of up to 100 ms outlasts many statements of the
        # other adapters (a run takes ~0.1-0.3 s): the paused adapter resumes
        # with timestamps, a catalog view and read holds from before it.
        *(
            Scenario(
                kind.value,
                f"ddl-dml on several adapters while {what}",
                4,
                10,
                fault_kinds=(kind,),
                fault_count=2,
                runs="ddl-dml",
                max_duration_s=0.1,
            )
            for kind, what in (
                (FaultKind.ADAPTER_CRASH, "one crashes (its statements end info, its clients reconnect) and restarts"),
                (FaultKind.ADAPTER_PARTITION, "one cannot reach the oracle (calls refused, or hung and timed out)"),
                (FaultKind.ADAPTER_PAUSE, "one stops the world (nothing on it runs), then resumes"),
            )
        ),
        # Issue 38: ddl-dml while one process's clock jumps, two processes'
        # clocks are skewed, or one clock stalls. Up to 100 ms of a run of
        # ~0.1-0.3 s: many group commits, catalog appends and lease renewals
        # (appends, since downgrades) happen on the moved clock.
        *(
            Scenario(
                kind.value,
                f"ddl-dml while {what}",
                4,
                10,
                fault_kinds=(kind,),
                fault_count=2,
                runs="ddl-dml",
                max_duration_s=0.1,
                two_processes=kind is FaultKind.CLOCK_SKEW,
            )
            for kind, what in (
                (FaultKind.CLOCK_JUMP, "the coordinator's clock (one adapter's) jumps forward or back, then back"),
                (FaultKind.CLOCK_SKEW, "two processes that call write_ts (a second coordinator beside the first, "
                                       "or two adapters) have clocks apart"),
                (FaultKind.CLOCK_STALL, "the coordinator's clock (one adapter's) runs slow or stops while it "
                                        "renews its leases, then steps to the right time"),
            )
        ),
        # Issue 36, item 6: seed 000's rollout. Two switches of up to 100 ms
        # each, in the first 50 ms of a run of ~0.1-0.3 s: the oracle flips to
        # the other implementation and back (overlapping switches flip in
        # turn) while group commits, peeks and DDL are in flight. The run keeps
        # confirm_leadership() on, as the rollout did (`rollout_config`).
        Scenario(
            "oracle-switch",
            "ddl-dml while the coordinator's timestamp oracle is switched live between the in-memory and "
            "the distributed implementation and back (seed 000's rollout; single-coordinator configurations)",
            4,
            10,
            fault_kinds=(FaultKind.ORACLE_SWITCH,),
            fault_count=2,
            runs="ddl-dml",
            max_duration_s=0.1,
        ),
        # The same while the coordinator also crashes and restarts: its
        # successor starts on the configured oracle, above what either
        # implementation holds (`coordinator.oracle_switch`, rule 3). Three
        # faults drawn from the two kinds.
        Scenario(
            "oracle-switch-restart",
            "oracle-switch while the coordinator also crashes and restarts, so that a coordinator starts "
            "after the oracle was switched (on the configured implementation)",
            4,
            10,
            fault_kinds=(FaultKind.ORACLE_SWITCH, FaultKind.CRASH_RESTART),
            fault_count=3,
            runs="ddl-dml",
            max_duration_s=0.1,
        ),
        # A step past persist's 60 s lease: the process's next state
        # transition expires its own writers' and readers' leases.
        Scenario(
            "clock-jump-past-lease",
            "ddl-dml while the coordinator's clock (one adapter's) steps 90 s forward or back, past "
            "persist's 60 s lease, then back",
            4,
            10,
            fault_kinds=(FaultKind.CLOCK_JUMP,),
            fault_count=2,
            runs="ddl-dml",
            max_duration_s=0.1,
            shifts_ms=PAST_LEASE_SHIFTS_MS,
        ),
        Scenario(
            "busy-reads",
            "background readers keep the read_ts batcher busy; insert n, then read it",
            8,
            12,
            oracle_spread=1.0,
        ),
        Scenario(
            "read-after-ack",
            "busy-reads, each read starting 1 µs after the insert it follows was acknowledged",
            8,
            12,
            oracle_spread=1.0,
        ),
        Scenario(
            "update-race",
            "clients add one to a shared counter row (UPDATE) or read it, concurrently",
            4,
            6,
        ),
        Scenario(
            "slow-reads",
            "a writer and readers over ~3 s while the replicas are 10^4 times slower for 2.5 s, "
            "so peeks stay in flight past the compaction window",
            3,
            12,
            faults="replica-slow@500ms+2500msx10000",
        ),
    )
}


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
                                   f"{STUCK_AFTER_S:g} simulated seconds")  # fmt: skip
            if not (math.isfinite(self.stuck_after_s) and 0 < self.stuck_after_s <= MAX_STUCK_AFTER_S):
                raise InvalidUsage(f"--stuck-after must be > 0 and <= {MAX_STUCK_AFTER_S:g} seconds, "
                                   f"got {self.stuck_after_s}")  # fmt: skip
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
    sc = _scenario(name)
    coordinator_config(config_name)  # unknown names fail here, with the list of known ones
    if mode not in MODES:
        raise InvalidUsage(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    if sc.faults is not None:
        plan = FaultPlan.parse(sc.faults)
    else:
        plan = FaultPlan.random(
            _plan_rng(seed), kinds_for(mode, sc.fault_kinds), count=sc.fault_count,
            horizon_s=sc.horizon_s, max_duration_s=sc.max_duration_s, shifts_ms=sc.shifts_ms,
        )  # fmt: skip
    if sc.two_processes and coordinator_config(config_name).adapters == 1:
        plan = FaultPlan((Fault(0.0, FaultKind.SPLIT_BRAIN), *plan.faults))
    return Spec(name, config_name, seed, known_bad or KnownBad(), sc.clients, sc.size, plan, mode, schedule)


def _plan_rng(seed: int) -> random.Random:
    return Runtime(seed=seed).derive("nemesis-plan").rng


def _scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise InvalidUsage(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def run_scenario(
    name: str,
    config_name: str,
    seed: int,
    *,
    known_bad: KnownBad = KnownBad(),  # noqa: B008 - frozen, never mutated
    faults: FaultPlan | None = None,
    size: int | None = None,
    clients: int | None = None,
    mode: Mode = "virtual",
    postgres_url: str | None = None,
) -> tuple[History, list[Event]]:
    """Runs one scenario and returns its history and internal events.

    Args:
        name: a key of `SCENARIOS`.
        config_name: a named coordinator configuration (`coordinator.config.named`).
        seed: drives every choice (jitter, operations, the default fault plan).
        known_bad: defects to switch on.
        faults: the nemesis plan; None: the scenario's default plan for `seed`.
        size: operations (or rounds) per client; None: the scenario's default.
        clients: None: the scenario's default.
        mode: "virtual" or "real" (see `run_spec`).
        postgres_url: real mode's server (see `run_spec`).
    """
    spec = default_spec(name, config_name, seed, known_bad=known_bad, mode=mode)
    spec = replace(
        spec,
        faults=spec.faults if faults is None else faults,
        size=spec.size if size is None else size,
        clients=spec.clients if clients is None else clients,
    )
    return run_spec(spec, postgres_url=postgres_url)


def run_spec(
    spec: Spec, *, postgres_url: str | None = None, on_death: Callable[[int], None] | None = None
) -> tuple[History, list[Event]]:
    """Runs `spec` (see `run_scenario`). `on_death` is told the pid of an
    embedded server's postmaster that dies under the run.

    Virtual mode: the virtual-time loop and in-memory stores with modeled
    latency. Real mode: the stock loop, and a fresh database (dropped
    afterwards) on `postgres_url`'s server — else `$COORDSIM_POSTGRES_URL`'s,
    else an embedded throwaway cluster started for this run — holding persist's
    Consensus, the oracle and the stashes, with Blob in files. Only the modeled
    parts (replica hops, the catalog feed, coordinator CPU) keep their latency
    model there.

    Raises:
        InvalidUsage: a bad spec.
        BackendUnavailable: real mode found no Postgres.
        RunStuck: the run did not finish within `spec.stuck_limit_s`.
    """
    if spec.mode == "virtual":
        if postgres_url is not None:
            raise InvalidUsage("postgres_url is for real mode; this spec is virtual")
        return _run(spec, None)
    if postgres_url is not None:
        return _run(spec, postgres_url)
    from sim.services.postgres import postgres_server

    with postgres_server(fsync=False, on_death=on_death) as url:
        return _run(spec, url)


def stuck_error(rec: HistoryRecorder, after_s: float, *, virtual: bool) -> RunStuck:
    """The report of a run stopped as stuck: its last operations, one line each."""
    history = rec.history()
    last = []
    for i in range(max(0, history.n - STUCK_LAST_OPS), history.n):
        op = history.op(i)
        what = f"{op.kind.value} {op.obj}" if op.obj is not None else op.kind.value
        last.append(f"process {op.process} {what}: {op.status.value}"
                    + (f" {op.error_code}" if op.error_code else ""))  # fmt: skip
    return RunStuck(after_s, virtual=virtual, last=last, ops=history.n)


def _run(spec: Spec, postgres_url: str | None) -> tuple[History, list[Event]]:
    sc = _scenario(spec.scenario)
    if spec.clients < 1 or spec.size < 1:
        raise InvalidUsage(f"a scenario needs clients >= 1 and size >= 1: {spec}")
    cfg = rollout_config(coordinator_config(spec.config).with_overrides(known_bad=spec.known_bad), spec.faults)
    base = latency_model()
    if sc.oracle_spread is not None:
        base = base.with_overrides({"oracle.pg": LogNormal(0.0008, sc.oracle_spread)})
    latency, switch = switchable_latency(base)
    body = PROGRAMS[sc.program]

    limit = spec.stuck_limit_s

    async def main(rt: Runtime) -> HistoryRecorder:
        rec = HistoryRecorder(rt.now)
        # Virtual seconds: a scenario takes well under one; a run that has not
        # finished after this long is stuck (a liveness bug), not slow. Real
        # mode: wall seconds, `--stuck-after`.
        with anyio.move_on_after(limit) as scope:
            await _scenario_main(rt, rec)
        if scope.cancelled_caught:
            raise stuck_error(rec, limit, virtual=postgres_url is None)
        return rec

    async def _scenario_main(rt: Runtime, rec: HistoryRecorder) -> None:
        sims = drive(rt, cfg, rec, switch=switch, postgres_url=postgres_url,
                     n_clients=spec.clients, size=spec.size)  # fmt: skip
        async with sims as sim, anyio.create_task_group() as tg:
            tg.start_soon(Nemesis(sim.dep, spec.faults).run)
            await body(sim)

    rec = run(main, seed=spec.seed, virtual=postgres_url is None, latency=latency, schedule=spec.schedule)
    return rec.history(), rec.events()
