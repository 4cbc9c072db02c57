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



__all__ = ['ADAPTER_FAULTS', 'MODES', 'Fault', 'FaultKind', 'FaultPlan', 'Mode', 'check_adapters', 'check_plan', 'kinds_for']

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
    ORACLE_SLOW = "oracle-slow"  # oracle and stash round trips `factor` times slower
    PG_KILL = "pg-kill"  # the run's Postgres backends are terminated, repeatedly for `duration`
    PG_SIGKILL = "pg-sigkill"  # the embedded postmaster is SIGKILLed; restarted after `duration`
    # Issue 36: one adapter of several (a configuration with adapters > 1).
    ADAPTER_CRASH = "adapter-crash"  # one adapter crashes, the others run; it restarts after `duration`
    ADAPTER_PARTITION = "adapter-partition"  # one adapter cannot reach the oracle for `duration`
    ADAPTER_PAUSE = "adapter-pause"  # one adapter's process stops the world for `duration`


#: The faults that act on one adapter of several: a plan holding one needs a
#: configuration with adapters > 1 (`check_adapters`).
ADAPTER_FAULTS: Final = frozenset(
    {FaultKind.ADAPTER_CRASH, FaultKind.ADAPTER_PARTITION, FaultKind.ADAPTER_PAUSE}
)


#: Which mode each fault needs, for the kinds that work in only one: pg-kill
#: and pg-sigkill need a server to kill; oracle-slow scales modeled round trips, and real
#: mode's oracle and stash round trips are real I/O that no model slows.
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


@final
@dataclass(frozen=True, order=True)
class Fault:
    """One fault at virtual time `at_s` (seconds after the scenario starts)."""

    at_s: float
    kind: FaultKind
    duration_s: float = 0.0
    factor: float = 20.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.at_s) and self.at_s >= 0 and self.duration_s >= 0):
            raise InvalidUsage(f"a fault needs at_s >= 0 and duration_s >= 0: {self}")

    def __str__(self) -> str:
        s = f"{self.kind}@{self.at_s * 1000:g}ms"
        if self.duration_s:
            s += f"+{self.duration_s * 1000:g}ms"
        if self.kind in (FaultKind.REPLICA_SLOW, FaultKind.ORACLE_SLOW):
            s += f"x{self.factor:g}"
        return s

    @classmethod
    def parse(cls, text: str) -> Fault:
        """Reads `kind@AT ms[+DURATION ms][xFACTOR]`, the form `str()` writes."""
        try:
            kind, _, rest = text.strip().partition("@")
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
            )
        except ValueError as exc:
            raise InvalidUsage(
                f"bad fault {text!r}: expected kind@AT[+DUR][xFACTOR] ({exc})"
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
    ) -> FaultPlan:
        """`count` faults of the given kinds at uniform times in `[0, horizon_s)`."""
        if not kinds:
            return cls()
        out = []
        for _ in range(count):
            kind = kinds[rng.randrange(len(kinds))]
            at = round(rng.uniform(0, horizon_s), 6)
            dur = round(rng.uniform(0.1, 1.0) * max_duration_s, 6)
            factor = float(rng.choice((5, 20, 50)))
            out.append(Fault(at, kind, dur, factor))
        return cls(tuple(out))


