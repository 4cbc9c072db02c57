"""The anomaly scenarios: short, seeded client programs
(`sim.load.scenarios.builtin.PROGRAMS`) whose recorded histories the checkers
judge — seed 001's three steps (and its index variant), concurrent DDL + DML
+ reads, coordinator crash/restart, split brain, busy batched reads and more —
each with its defaults (clients, operations, the faults a seed draws), and the
latency model they all run under.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, final

from sim.nemesis.plan import CLOCK_SHIFTS_MS, PAST_LEASE_SHIFTS_MS, FaultKind
from sim.runtime.errors import InvalidUsage
from sim.runtime.latency import Constant, LatencyModel, LogNormal

__all__ = ["SCENARIOS", "Scenario", "latency_model", "scenario_named"]


def latency_model() -> LatencyModel:
    """Round trips of the order measured on an embedded Postgres (a timestamp-store, catalog-stash or
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


def scenario_named(name: str) -> Scenario:
    """The scenario `name` (a key of `SCENARIOS`).

    Raises:
        InvalidUsage: an unknown name, with the known ones.
    """
    try:
        return SCENARIOS[name]
    except KeyError:
        raise InvalidUsage(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
