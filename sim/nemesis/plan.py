"""Fault plans: which fault, when, for how long; parsed from and printed as
`kind@at+duration` so a failing run's replay command names them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Literal, final

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    import random
    from collections.abc import Iterable, Mapping, Sequence



__all__ = ['ADAPTER_FAULTS', 'CLOCK_SHIFTS_MS', 'MODES', 'PAST_LEASE_SHIFTS_MS', 'SINGLE_COORDINATOR_FAULTS', 'TIME_FAULTS',
           'Fault', 'FaultKind', 'FaultPlan', 'Mode', 'check_adapters', 'check_plan', 'check_single_coordinator',
           'kinds_for']

Mode = Literal["virtual", "real"]
MODES: Final[tuple[Mode, ...]] = ("virtual", "real")


class FaultKind(StrEnum):
    CRASH_RESTART = (
        "crash-restart"  # the oldest coordinator stops; a new one starts after `duration`
    )
    SPLIT_BRAIN = "split-brain"  # a second coordinator starts beside the first
    STORE_ERRORS = "store-errors"  # Blob/Consensus calls fail or time out for `duration`
    REPLICA_CRASH = "replica-crash"  # the default replica crashes; restarts after `duration`
    REPLICA_SLOW = "replica-slow"  # replica hops `factor` times slower for `duration`
    ORACLE_SLOW = "oracle-slow"  # oracle and timestamp-store round trips `factor` times slower
    PG_KILL = "pg-kill"  # the run's Postgres backends are terminated, repeatedly for `duration`
    PG_SIGKILL = "pg-sigkill"  # the embedded postmaster is SIGKILLed; restarted after `duration`
    # Issue 36: one adapter of several (a configuration with adapters > 1).
    ADAPTER_CRASH = "adapter-crash"  # one adapter crashes, the others run; it restarts after `duration`
    ADAPTER_PARTITION = "adapter-partition"  # one adapter cannot reach the oracle for `duration`
    ADAPTER_PAUSE = "adapter-pause"  # one adapter's process stops the world for `duration`
    # Issue 38: faults of time, on what one process believes is wall time
    # (`sim.runtime.core.ProcessClock`); a process is a coordinator or one
    # adapter of several. Each heals with an NTP step back to true time.
    CLOCK_JUMP = "clock-jump"  # one process's clock steps by `shift`, and back after `duration`
    CLOCK_SKEW = "clock-skew"  # two processes calling write_ts: one `shift`/2 ahead, one behind
    CLOCK_STALL = "clock-stall"  # one process's clock runs `factor` times slow (10^4: stopped)
    # Issue 36, item 6: seed 000's rollout flag, on a single coordinator
    # (`coordinator.oracle_switch`): its oracles flip between the in-memory and
    # the distributed implementation, and flip back after `duration` (none: for good).
    ORACLE_SWITCH = "oracle-switch"


#: The faults that act on one adapter of several: a plan holding one needs a
#: configuration with adapters > 1 (`check_adapters`).
ADAPTER_FAULTS: Final = frozenset(
    {FaultKind.ADAPTER_CRASH, FaultKind.ADAPTER_PARTITION, FaultKind.ADAPTER_PAUSE}
)


#: The faults that act on a single coordinator's own oracle: a plan holding
#: one needs the event-loop architecture (`check_single_coordinator`). The
#: in-memory oracle lives in one process, so a decoupled deployment, whose
#: adapters share the oracle, runs the distributed one and never switches.
SINGLE_COORDINATOR_FAULTS: Final = frozenset({FaultKind.ORACLE_SWITCH})


#: The faults of time (issue 38), which carry a `shift_ms`.
TIME_FAULTS: Final = frozenset({FaultKind.CLOCK_JUMP, FaultKind.CLOCK_SKEW, FaultKind.CLOCK_STALL})
#: The shifts a drawn clock-jump or clock-skew picks from, in ms, each either
#: way: a millisecond's rounding, a group commit's span, a second, and half of
#: persist's 60 s lease (`persist.machine.MachineConfig.lease_ms`), which a
#: step must not exceed for the process's own leases to survive it.
CLOCK_SHIFTS_MS: Final = (1, 5, 50, 1_000, 30_000)
#: Steps past that lease (the `clock-jump-past-lease` scenario): the process
#: expires its own persist leases on its next state transition.
PAST_LEASE_SHIFTS_MS: Final = (90_000,)
#: The slow-downs a drawn clock-stall picks from (10^4: stopped, in effect).
CLOCK_STALL_FACTORS: Final = (5.0, 50.0, 10_000.0)
#: The largest clock shift a plan may hold (a year).
MAX_SHIFT_MS: Final = 366 * 86_400_000


#: Which mode each fault needs, for the kinds that work in only one: pg-kill
#: and pg-sigkill need a server to kill; oracle-slow scales modeled round trips, and real
#: mode's oracle and timestamp-store round trips are real I/O that no model slows.
_ONLY_IN: Final[Mapping[FaultKind, Mode]] = {
    FaultKind.PG_KILL: "real",
    FaultKind.PG_SIGKILL: "real",
    FaultKind.ORACLE_SLOW: "virtual",
}


def kinds_for(mode: Mode, kinds: Iterable[FaultKind]) -> tuple[FaultKind, ...]:
    """`kinds` without those that cannot act in `mode` (random plans draw from these)."""
    return tuple(k for k in kinds if _ONLY_IN.get(k, mode) == mode)


def check_plan(plan: FaultPlan, mode: str) -> None:
    """Rejects a plan with a fault that would do nothing in `mode`.

    Raises:
        InvalidUsage: an unknown mode, or e.g. `pg-kill` in virtual mode.
    """
    if mode not in MODES:
        raise InvalidUsage(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    for fault in plan.faults:
        needs = _ONLY_IN.get(fault.kind, mode)
        if needs != mode:
            raise InvalidUsage(f"{fault.kind} needs --mode {needs} (fault {fault})")


def check_adapters(plan: FaultPlan, adapters: int) -> None:
    """Rejects a plan with an adapter fault on a configuration of one adapter.

    Raises:
        InvalidUsage: e.g. `adapter-crash` with adapters = 1.
    """
    if adapters > 1:
        return
    for fault in plan.faults:
        if fault.kind in ADAPTER_FAULTS:
            raise InvalidUsage(
                f"{fault.kind} needs a configuration with adapters > 1, e.g. decoupled-2-adapters (fault {fault})"
            )


def check_single_coordinator(plan: FaultPlan, architecture: str) -> None:
    """Rejects a plan with an oracle-switch on an architecture other than the
    event loop's (`architecture`: `coordinator.config.Architecture`'s value),
    or beside a split-brain (two coordinators, each on its own oracle).

    Raises:
        InvalidUsage: e.g. `oracle-switch` on decoupled.
    """
    switch = next((f for f in plan.faults if f.kind in SINGLE_COORDINATOR_FAULTS), None)
    if switch is None:
        return
    if architecture != "event-loop":
        raise InvalidUsage(
            f"{switch.kind} applies to the single-coordinator configurations (event-loop, "
            f"event-loop+pg-oracle): a {architecture} deployment's oracle is shared by its adapters, "
            f"and the in-memory one cannot be (fault {switch})"
        )
    brain = next((f for f in plan.faults if f.kind is FaultKind.SPLIT_BRAIN), None)
    if brain is not None:
        raise InvalidUsage(
            f"{switch.kind} switches one serving coordinator live; {brain} runs a deposed one beside it, "
            "serving from its own oracle, and no rule makes that linearizable (Materialize switched "
            "implementations only at start-up, and its comment there admits the window): use "
            "crash-restart, whose successor starts above both implementations"
        )


@final
@dataclass(frozen=True, order=True)
class Fault:
    """One fault at virtual time `at_s` (seconds after the scenario starts).
    `shift_ms` is a time fault's step (clock-jump; negative: backwards) or
    skew (clock-skew: between the two processes' clocks); others ignore it."""

    at_s: float
    kind: FaultKind
    duration_s: float = 0.0
    factor: float = 20.0
    shift_ms: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.at_s) and self.at_s >= 0 and self.duration_s >= 0):
            raise InvalidUsage(f"a fault needs at_s >= 0 and duration_s >= 0: {self}")
        if abs(self.shift_ms) > MAX_SHIFT_MS:
            raise InvalidUsage(f"a clock shift must be within ±{MAX_SHIFT_MS} ms (a year): {self}")

    def __str__(self) -> str:
        s = f"{self.kind}@{self.at_s * 1000:g}ms"
        if self.duration_s:
            s += f"+{self.duration_s * 1000:g}ms"
        if self.kind in (FaultKind.REPLICA_SLOW, FaultKind.ORACLE_SLOW, FaultKind.CLOCK_STALL):
            s += f"x{self.factor:g}"
        if self.kind in (FaultKind.CLOCK_JUMP, FaultKind.CLOCK_SKEW):
            s += f"by{self.shift_ms:+d}ms"
        return s

    @classmethod
    def parse(cls, text: str) -> Fault:
        """Reads `kind@AT ms[+DURATION ms][xFACTOR][by±SHIFT ms]`, the form `str()` writes."""
        try:
            kind, _, rest = text.strip().partition("@")
            shift = 0
            if "by" in rest:
                rest, _, by = rest.partition("by")
                shift = int(by.removesuffix("ms"))
            factor = 20.0
            if "x" in rest:
                rest, _, f = rest.partition("x")
                factor = float(f)
            at, _, dur = rest.partition("+")
            return cls(
                float(at.removesuffix("ms")) / 1000,
                FaultKind(kind),
                float(dur.removesuffix("ms")) / 1000 if dur else 0.0,
                factor,
                shift,
            )
        except ValueError as exc:
            raise InvalidUsage(
                f"bad fault {text!r}: expected kind@AT[+DUR][xFACTOR][by±SHIFTms] ({exc})"
            ) from exc


@final
@dataclass(frozen=True)
class FaultPlan:
    """The faults of one run, in time order."""

    faults: tuple[Fault, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", tuple(sorted(self.faults)))

    def __len__(self) -> int:
        return len(self.faults)

    def __str__(self) -> str:
        return ",".join(str(f) for f in self.faults) or "none"

    def without(self, index: int) -> FaultPlan:
        return FaultPlan(self.faults[:index] + self.faults[index + 1 :])

    @classmethod
    def parse(cls, text: str) -> FaultPlan:
        if text.strip() in ("", "none"):
            return cls()
        return cls(tuple(Fault.parse(t) for t in text.split(",")))

    @classmethod
    def random(
        cls,
        rng: random.Random,
        kinds: Sequence[FaultKind],
        *,
        count: int,
        horizon_s: float,
        max_duration_s: float = 0.02,
        shifts_ms: Sequence[int] = CLOCK_SHIFTS_MS,
    ) -> FaultPlan:
        """`count` faults of the given kinds at uniform times in `[0, horizon_s)`;
        a clock-jump or clock-skew shifts by one of `shifts_ms`, either way."""
        if not kinds:
            return cls()
        out = []
        for _ in range(count):
            kind = kinds[rng.randrange(len(kinds))]
            at = round(rng.uniform(0, horizon_s), 6)
            dur = round(rng.uniform(0.1, 1.0) * max_duration_s, 6)
            factor = float(rng.choice((5, 20, 50)))
            shift = 0
            # Drawn after the others, and only for the time faults: the plans
            # of every other kind stay what they were before these existed.
            if kind in (FaultKind.CLOCK_JUMP, FaultKind.CLOCK_SKEW):
                shift = rng.choice(shifts_ms) * rng.choice((-1, 1))
            elif kind is FaultKind.CLOCK_STALL:
                factor = rng.choice(CLOCK_STALL_FACTORS)
            out.append(Fault(at, kind, dur, factor, shift))
        return cls(tuple(out))


