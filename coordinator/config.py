"""The coordinator's configuration as one value: architecture, oracle, catalog,
modeled costs and the known-bad toggles.

Every configuration users compare is a named value here, not a code path picked
by `if` somewhere else; the known-bad variants exist so the checker can prove it
catches them (DESIGN.md §2). `sim.load.run_config.RunConfig` embeds this value
together with the locations and workloads of a run: it lives here, not in `sim`, because the
coordinator may not import upward (DESIGN.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, final

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "APPLIES_TO",
    "CONFIGURATIONS",
    "KNOWN_BAD_INERT",
    "LOOP_S_PER_SELECT",
    "Architecture",
    "CatalogKind",
    "CoordinatorConfig",
    "Costs",
    "Frontend",
    "GroupCommitPolicy",
    "Interpreter",
    "KnownBad",
    "OracleCalls",
    "OracleKind",
    "PeekStages",
    "PersistListen",
    "check_applies",
    "check_known_bad",
    "knobs",
    "named",
    "staged_select_loop_s",
]


class Architecture(StrEnum):
    EVENT_LOOP = "event-loop"
    DECOUPLED = "decoupled"


class OracleKind(StrEnum):
    MEMORY = "memory"  # today's: in memory, durably backed by the timestamp store
    POSTGRES = "postgres"  # seed 000: one row per timeline in Postgres/CockroachDB


class CatalogKind(StrEnum):
    STASH = "stash"  # today's store: tables in Postgres, transactions
    PERSIST = "persist"  # seed 004/001: a persist shard, a pTVC in the `catalog` timeline


class GroupCommitPolicy(StrEnum):
    """When a write triggers its group commit; how many writes a commit takes
    is an outcome of the loop, not a setting."""

    IMMEDIATE = "immediate"  # the write posts the trigger at once (seed 000: "barely batches")
    AFTER_DRAINING = "after-draining"  # the trigger waits until no client message is queued


class OracleCalls(StrEnum):
    """Where an event loop runs the oracle's calls: the two eras of Materialize's
    group commit (PR #37363, "adapter: apply group commits off the coordinator
    loop", and `src/adapter/src/coord/appends.rs`), and the peeks' read_ts.

    - `on-loop` (before #37363): the loop awaits `peek_write_ts` (the wall-clock
      throttle) and `write_ts` to allocate the commit's timestamp, the append
      and `apply_write` run in a task, and the completion handler awaits
      `read_ts` on the loop to downgrade read holds: 4 oracle calls, 3 of them
      on the loop. SUBSCRIBE's linearized `read_ts` is awaited on the loop too
      (before PR #37355, opened with its measurements on the day #37363 was,
      which was still in review two weeks later: one era holds both). A peek's `read_ts` is awaited in its handler only
      with the in-memory oracle (seed 000's loop); a Postgres oracle's is read
      in a task, as Materialize's peek `LinearizeTimestamp` stage did.
    - `off-loop` (#37363): one committer task does `peek_write_ts`, `write_ts`,
      the append and `apply_write`; the completion message needs no oracle
      call (read holds go down to the applied write timestamp): 3 calls, none
      on the loop. A peek's and a SUBSCRIBE's `read_ts` are awaited in a task
      (seed 000; PR #37355).
    """

    ON_LOOP = "on-loop"
    OFF_LOOP = "off-loop"


class PeekStages(StrEnum):
    """Which messages the event loop handles per statement.

    - `staged`: as Materialize's loop in "A Small Coordinator"
      (doc/developer/design/20250717_a_small_coordinator_more_scalable_isolated_materialize.md,
      'Benchmarks'): a SELECT is `command-catalog_snapshot`, `command-execute`,
      two `peek_stage_ready` (the optimizer stage and the timestamp stage, each
      work off the loop that posts back), `controller_ready` (the peek's
      response) and `command-commit`: six. A constant `SELECT 1` takes
      catalog_snapshot, execute, the optimizer stage and commit (4); an INSERT
      catalog_snapshot, execute, commit plus its share of a group commit's
      trigger and completion; a DDL catalog_snapshot, execute and commit.
    - `combined`: the loop of seed 000's description (a statement is one client
      message; a peek adds its timestamp message when read_ts runs off the
      loop, and its response): 3 per SELECT. Kept to reproduce earlier runs.
    """

    STAGED = "staged"
    COMBINED = "combined"


class Frontend(StrEnum):
    """What a statement crosses before and after the coordinator.

    - `in-process`: nothing; the client calls `Session.execute` in the
      coordinator's process (coordsim's own clients, in both modes).
    - `pgwire`: a pgwire client over a network: the client's round trip and
      the adapter frontend's per-connection task (parse, describe, bind,
      encode rows) off the loop, one draw of the profile's `frontend.pgwire`
      per statement, half before and half after. Its value comes from a
      published unloaded `SELECT 1` (see `sim/model/unmeasured.py`).
    """

    IN_PROCESS = "in-process"
    PGWIRE = "pgwire"


class PersistListen(StrEnum):
    """How a persist reader (a replica's listen, a snapshot waiting for an
    upper, a controller's catalog subscription) learns that a shard moved.

    - `pubsub`: the writer's process pushes the new state to the shard's
      readers (Materialize's persist PubSub, `persist_pubsub_client_enabled`
      and `persist_pubsub_push_diff_enabled`, both on by default): a reader
      wakes at once. (Modeled as instant: the push is one RPC hop; no
      published figure says more. Across real-mode OS processes there is no
      PubSub server, so a reader polls Consensus every 50 ms,
      `persist.machine.MachineConfig.poll_interval_s`.)
    - `poll`: no push: a reader polls Consensus, sleeping `persist_poll_s`
      between polls (Materialize's `persist_next_listen_batch_retryer_fixed_sleep`,
      1,200 ms by default, the fallback that covers a missed push), so a
      change reaches it after up to that long.

    Seed 002's readers learn of new data one way or the other; this knob
    shows what the push buys (a peek waits for its replica to see the write).
    """

    PUBSUB = "pubsub"
    POLL = "poll"


#: Materialize's `persist_next_listen_batch_retryer_fixed_sleep` default
#: (src/persist-client, "pubsub is on by default!"): a polling reader's sleep.
PERSIST_POLL_S: Final = 1.2


@final
@dataclass(frozen=True)
class Interpreter:
    """The Python interpreter of a real-mode coordsim process, as a profile
    built from a real run (`coordsim calibrate --from`) measured it, so that
    virtual mode can predict that run. All of a real process's Python runs on
    one thread (CPython's GIL), whatever the architecture's modeled cores: the
    coordinator's handlers, the clients, the drivers, the simulated replica
    and persist. Virtual mode models it as one core that this Python holds.
    Unset (None) for the published system, which is not Python.

    - `python_share`: of each modeled CPU cost, the part that is this host's
      Python (the rest is the modeled cost that real mode sleeps, which needs
      no interpreter).
    - `base_cores`: interpreter time per second whatever the load (background
      tasks: the keepalive, persist maintenance, the replica's upkeep).
    - `per_op_s`: interpreter time per statement outside the handlers (the
      client, the driver's protocol work, the replica and persist).
    - `slice_s`: how long one step of that background work holds the
      interpreter. asyncio runs a task step to its next await, so a step
      that becomes ready waits behind at most one such step: the run's
      measured loop lag (a 1 ms timer's lateness, less the timer's own
      overshoot) is about half a step.
    """

    python_share: float = 0.0
    base_cores: float = 0.0
    per_op_s: float = 0.0
    slice_s: float = 0.01

    def __post_init__(self) -> None:
        if not 0.0 <= self.python_share <= 1.0:
            raise InvalidUsage(f"interpreter python_share must be in [0, 1], got {self.python_share}")
        if not 0.0 <= self.base_cores < 1.0:
            raise InvalidUsage(f"interpreter base_cores must be in [0, 1), got {self.base_cores}")
        if not 0.0 <= self.per_op_s < 1.0:
            raise InvalidUsage(f"interpreter per_op_s must be in [0, 1) s, got {self.per_op_s}")
        if not 1e-5 <= self.slice_s <= 0.1:
            raise InvalidUsage(f"interpreter slice_s must be in [10 us, 100 ms], got {self.slice_s}")


#: Loop time per SELECT, calibrated on fact `select-throughput-loop-bound`:
#: "A Small Coordinator" ('Benchmarks') runs SELECTs from 128 connections at
#: about 5000 qps with the loop's message-processing time "very near" 1 s per
#: second, so one SELECT holds the loop about 1/5000 s.
LOOP_S_PER_SELECT: Final = 1 / 5000

#: Assumed relative weights of the handlers (microseconds before scaling):
#: order-of-magnitude guesses, not measurements (`sim/model/unmeasured.py`).
#: Only their proportions matter: `_SCALE` fixes the level.
_WEIGHT_US: Final = {
    "parse_plan": 100.0,
    "peek_sequence": 50.0,
    "peek_finish": 20.0,
    "per_row": 0.5,
    "write_sequence": 40.0,
    "group_commit": 60.0,
    "ddl_sequence": 500.0,
    "controller_response": 10.0,
    "loop_dispatch": 5.0,
    "catalog_snapshot": 10.0,
    "peek_stage": 10.0,
    "commit": 10.0,
}


def staged_select_loop_s(w: dict[str, float]) -> float:
    """Loop time of one staged one-row SELECT with read_ts off the loop, from
    per-handler costs `w`: six dispatches plus each handler (see `PeekStages`)."""
    return (
        6 * w["loop_dispatch"] + w["catalog_snapshot"] + w["parse_plan"] + w["peek_sequence"]
        + 2 * w["peek_stage"] + w["controller_response"] + w["peek_finish"] + w["per_row"] + w["commit"]
    )


#: Every weight times this: the staged SELECT then holds the loop for
#: exactly `LOOP_S_PER_SELECT`.
_SCALE: Final = LOOP_S_PER_SELECT / staged_select_loop_s({k: v * 1e-6 for k, v in _WEIGHT_US.items()})


def _cost(name: str) -> float:
    return _WEIGHT_US[name] * 1e-6 * _SCALE


#: CPU of a catalog transaction per entry already in the catalog, calibrated
#: on fact `ddl-create-table-grows-with-catalog`: Materialize's DDL
#: scalability audit (test/envd-ddl-scalability/NOTES.md, 2026-05-15, tables
#: padding, local environmentd) measured CREATE TABLE's p50 23 ms higher with
#: 5,000 tables in the catalog, and every DDL kind growing at a similar slope
#: (shared O(N) walks: OID allocation, resource-limit counts, the durable
#: transaction's scans of every row), so one slope for every DDL.
DDL_S_PER_CATALOG_ENTRY: Final = 0.023 / 5000


@final
@dataclass(frozen=True)
class Costs:
    """Modeled coordinator CPU per handler, in seconds.

    The level is calibrated (`LOOP_S_PER_SELECT`, a published loop-bound
    SELECT rate); the split between handlers is assumed (`_WEIGHT_US`). Each
    field's source is in `sim/model/unmeasured.py`; a config file's [costs]
    table overrides them.
    """

    parse_plan: float = _cost("parse_plan")  # per statement: name resolution, planning
    peek_sequence: float = _cost("peek_sequence")  # choose timestamps, build and send the peek
    peek_finish: float = _cost("peek_finish")  # per peek response: buffer and route the rows
    per_row: float = _cost("per_row")  # per result or written row
    write_sequence: float = _cost("write_sequence")  # queue a write for group commit
    group_commit: float = _cost("group_commit")  # per group commit, plus per_row for its rows
    ddl_sequence: float = _cost("ddl_sequence")  # plan a catalog change and derive its commands
    ddl_per_entry: float = DDL_S_PER_CATALOG_ENTRY  # per DDL, per entry already in the catalog
    controller_response: float = _cost("controller_response")  # per controller message the loop handles
    loop_dispatch: float = _cost("loop_dispatch")  # per message the event loop takes off a queue
    catalog_snapshot: float = _cost("catalog_snapshot")  # staged: hand the session a catalog snapshot
    peek_stage: float = _cost("peek_stage")  # staged: resume a peek at its next stage
    commit: float = _cost("commit")  # staged: end the statement's implicit transaction


@final
@dataclass(frozen=True)
class KnownBad:
    """Deliberate defects, each off by default; the checker must catch every one."""

    peeks_ignore_catalog_ts: bool = False  # controllers serve peeks before catching up
    apply_write_before_append: bool = False  # reads may see a write_ts before its data
    fifo_event_loop: bool = False  # the event loop without its priorities
    skip_confirm_leadership: bool = False  # in-memory oracle, no fencing check on reads
    batching_joins_in_flight: bool = False  # read_ts requests join an in-flight call
    # Issue 21's matrix: one toggle per invariant that had none.
    no_write_lock: bool = False  # UPDATE/DELETE read-then-write without the global write lock
    unbounded_group_commits: bool = False  # more than one group commit in flight at once
    skip_epoch_fencing: bool = False  # catalog stash and timestamp store accept a deposed process
    blind_catalog_append: bool = False  # decoupled DDL overwrites the catalog, no compare
    coordinator_joins_read_ts: bool = False  # the coordinator shares an in-flight read_ts
    peeks_skip_read_holds: bool = False  # peeks choose a timestamp but hold nothing
    # Issue 36: the cross-adapter rules (`coordinator/adapters.py`).
    ack_lost_race: bool = False  # a write another adapter's append beat is acknowledged, unwritten
    stale_adapter_catalog: bool = False  # an adapter plans without syncing its catalog to catalog_ts
    # Issue 38: write_ts takes the caller's wall clock without `GREATEST`'s
    # floor (only a repeat of the last timestamp is bumped), so a clock behind
    # the stored write_ts (jumped back, stalled, skewed) hands out the past.
    unguarded_wall_clock: bool = False
    # Issue 36, item 6: a live oracle switch (`oracle-switch`) serves from the
    # new oracle at once, neither draining the old one's calls in flight nor
    # fast-forwarding the new one to the old one's timestamps.
    unsynced_oracle_switch: bool = False

    def enabled(self) -> list[str]:
        """The names of the defects switched on, in declaration order."""
        return [f.name for f in fields(self) if getattr(self, f.name)]


@final
@dataclass(frozen=True)
class CoordinatorConfig:
    """One coordinator configuration (see `CONFIGURATIONS` for the named ones)."""

    name: str
    architecture: Architecture
    oracle: OracleKind
    catalog: CatalogKind
    confirm_leadership: bool  # a durable check per batch of peek results (today)
    batch_read_ts: bool  # coalesce concurrent read_ts calls (BatchingOracle)
    oracle_calls: OracleCalls = OracleCalls.OFF_LOOP  # event loop: where oracle calls run
    group_commit: GroupCommitPolicy = GroupCommitPolicy.AFTER_DRAINING
    group_commit_interval_s: float = 1.0  # periodic group commit that advances idle tables
    #: Event loop: group commits allowed in flight at once (0: no bound, as the
    #: loop before seed 000's rollout, which started one per trigger). Other
    #: than 1 only with `oracle_calls = on-loop`: the loop then allocates
    #: write timestamps in the order storage receives the appends.
    commits_in_flight: int = 1
    #: Decoupled: the adapter's CPU pool. 1 here, as the event loop's one
    #: core, so no configuration gets more by default; a run takes the
    #: latency profile's cores (`sim.load.latency_profile.profile_cores`: the machine
    #: it was measured on, or its `[cpu] cores`),
    #: and `--ablate` shows it as a step of its own.
    cores: int = 1
    #: Decoupled: serving processes ("adapters", issue 36) sharing one oracle,
    #: one durable catalog, the table shards and the controllers; each has its
    #: own sessions, peek batching, group commit and pool of `cores` (so N
    #: adapters have N x `cores`). See `coordinator/adapters.py`.
    adapters: int = 1
    #: Event loop: the messages per statement (`PeekStages`).
    peek_stages: PeekStages = PeekStages.STAGED
    #: What a statement crosses outside the coordinator (`Frontend`).
    frontend: Frontend = Frontend.IN_PROCESS
    #: How persist readers learn of new data (`PersistListen`), and a polling
    #: reader's sleep.
    persist_listen: PersistListen = PersistListen.PUBSUB
    persist_poll_s: float = PERSIST_POLL_S
    #: A DDL's metadata-store round trips beyond its catalog transaction, as
    #: Materialize makes them (PR #35786 counts ~27 per CREATE TABLE): the
    #: event loop's id allocation (an oracle `write_ts` and a catalog
    #: transaction) and the statement's `write_ts`, a new table's shard set-up
    #: (`controllers.storage`) and the builtin-table write
    #: (`coordinator.environment.write_builtin_tables`). False: the catalog
    #: transaction and the shard's writer and reader only. Off by default, as
    #: `frontend`: the statements a comparison measures are not DDL, and the
    #: anomaly suites' seeds and bounds were measured without it; the
    #: validation facts about DDL turn it on (docs/model-mechanisms.md).
    ddl_round_trips: bool = False
    #: The 2024 stash-backed durable catalog's reads around a DDL's catalog
    #: transaction, the event loop's (Materialize's
    #: `catalog/src/durable/impls/stash.rs` at 009e19a, January 2024):
    #: `transaction()` began with a snapshot of the catalog, and
    #: `commit_transaction` checked `is_stash_initialized` (the stash's
    #: collections, then its config collection) before its write. So three read
    #: transactions before the write (`sync` and `is_initialized` twice). An era
    #: knob: the persist catalog that replaced the stash reads from its cache.
    stash_commit_reads: bool = False
    #: Virtual mode predicting a real run: the process's Python interpreter
    #: (`Interpreter`), from a profile built by `calibrate --from`.
    interpreter: Interpreter | None = None
    max_batch: int = 64  # event loop: client messages per wake, unless a handler posts an internal one
    costs: Costs = field(default_factory=Costs)
    known_bad: KnownBad = field(default_factory=KnownBad)

    def __post_init__(self) -> None:
        if self.architecture is Architecture.DECOUPLED and self.confirm_leadership:
            raise InvalidUsage(
                f"{self.name}: confirm_leadership does not apply to the decoupled architecture "
                "(its reads are linearized by the oracle and fenced by catalog_ts)"
            )
        if self.stash_commit_reads and (self.architecture is not Architecture.EVENT_LOOP
                                        or self.catalog is not CatalogKind.STASH):
            raise InvalidUsage(
                f"{self.name}: stash_commit_reads applies to the event loop on the stash catalog "
                "(the 2024 durable catalog's reads before a DDL's write)"
            )
        if self.cores < 1:
            raise InvalidUsage(f"cores must be >= 1, got {self.cores}")
        if self.adapters < 1:
            raise InvalidUsage(f"adapters must be >= 1, got {self.adapters}")
        if self.adapters > 1 and self.architecture is Architecture.EVENT_LOOP:
            raise InvalidUsage(
                f"{self.name}: adapters = {self.adapters} does not apply to the event loop "
                "(a single loop is single by design)"
            )
        if self.adapters > 1 and self.oracle is OracleKind.MEMORY:
            raise InvalidUsage(
                f"{self.name}: adapters = {self.adapters} needs a shareable oracle (oracle = postgres); "
                "the in-memory oracle lives in one process"
            )
        if self.commits_in_flight < 0:
            raise InvalidUsage(f"commits_in_flight must be >= 0 (0: no bound), got {self.commits_in_flight}")
        if (
            self.architecture is Architecture.EVENT_LOOP
            and self.commits_in_flight != 1
            and self.oracle_calls is OracleCalls.OFF_LOOP
        ):
            raise InvalidUsage(
                f"{self.name}: commits_in_flight = {self.commits_in_flight} needs oracle_calls = on-loop "
                "(off the loop, write timestamps can reach storage out of order and fence the coordinator)"
            )
        if self.max_batch < 1:
            raise InvalidUsage(f"max_batch must be >= 1, got {self.max_batch}")
        if self.group_commit_interval_s <= 0:
            raise InvalidUsage("group_commit_interval_s must be > 0")
        if not self.persist_poll_s > 0:
            raise InvalidUsage("persist_poll_s must be > 0")

    def with_overrides(self, **changes: Any) -> CoordinatorConfig:
        """A copy with fields replaced; unknown names are an `InvalidUsage`."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InvalidUsage(f"unknown configuration field(s): {', '.join(unknown)}")
        return replace(self, **changes)


#: Fields that mean something for one architecture only: setting one on the
#: other is a mistake (it would be silently ignored), so overrides refuse it.
APPLIES_TO: Final[dict[str, frozenset[Architecture]]] = {
    "confirm_leadership": frozenset({Architecture.EVENT_LOOP}),
    "max_batch": frozenset({Architecture.EVENT_LOOP}),  # client messages per loop wake
    "oracle_calls": frozenset({Architecture.EVENT_LOOP}),  # the decoupled design has no loop
    "commits_in_flight": frozenset({Architecture.EVENT_LOOP}),  # decoupled: one commit task
    "cores": frozenset({Architecture.DECOUPLED}),  # the event loop has exactly one
    "peek_stages": frozenset({Architecture.EVENT_LOOP}),  # the decoupled design has no loop
}


def check_applies(config: CoordinatorConfig, field_name: str, value: object = None) -> None:
    """`InvalidUsage` if `field_name` does not apply to `config`'s architecture
    and holds another value than that architecture's named configuration
    does (setting it to that value is how a variant leaves it off, as an
    ablation step from the event loop to the decoupled design must).
    `value`: the value about to be set (None: the one `config` holds)."""
    archs = APPLIES_TO.get(field_name)
    if archs is not None and config.architecture not in archs:
        reference = named(config.architecture.value)
        if (getattr(config, field_name) if value is None else value) == getattr(reference, field_name):
            return
        only = ", ".join(sorted(a.value for a in archs))
        raise InvalidUsage(
            f"{field_name} does not apply to {config.name} ({config.architecture.value}); only to {only}"
        )


#: Why a known-bad toggle changes nothing in a configuration (None: it acts).
#: Switching one on there would pass every check and prove nothing, so it is
#: refused (issue 37). Each entry follows the one place the toggle is read;
#: the toggles not listed act in every configuration. (`stale_adapter_catalog`
#: acts with one adapter too: it skips the catalog sync a restarted or deposed
#: coordinator needs.)
KNOWN_BAD_INERT: Final[dict[str, Callable[[CoordinatorConfig], str | None]]] = {
    "fifo_event_loop": lambda c: (
        None if c.architecture is Architecture.EVENT_LOOP else "the decoupled architecture has no event loop"
    ),
    "skip_confirm_leadership": lambda c: (
        None if c.confirm_leadership else "it has no confirm_leadership to skip (confirm_leadership = false)"
    ),
    "batching_joins_in_flight": lambda c: (
        None if c.batch_read_ts else "it does not batch read_ts calls (batch_read_ts = false)"
    ),
    "unbounded_group_commits": lambda c: (
        None if c.architecture is Architecture.DECOUPLED or c.commits_in_flight != 0
        else "its group commits are unbounded already (commits_in_flight = 0)"
    ),
    "blind_catalog_append": lambda c: (
        None if c.architecture is Architecture.DECOUPLED else "only the decoupled architecture appends DDL itself"
    ),
    "ack_lost_race": lambda c: (
        None if c.adapters > 1 else "an append race is lost only to another adapter (adapters = 1)"
    ),
    # It acts only under the oracle-switch fault, which only a single coordinator takes.
    "unsynced_oracle_switch": lambda c: (
        None if c.architecture is Architecture.EVENT_LOOP
        else "its oracle is never switched (oracle-switch applies to the single-coordinator configurations)"
    ),
}


def check_known_bad(config: CoordinatorConfig) -> None:
    """`InvalidUsage` if a known-bad toggle switched on in `config` has no
    effect there (`KNOWN_BAD_INERT`), with the reason."""
    for name in config.known_bad.enabled():
        why = KNOWN_BAD_INERT[name](config) if name in KNOWN_BAD_INERT else None
        if why is not None:
            raise InvalidUsage(
                f"known-bad {name.replace('_', '-')} has no effect on {config.name}: {why}; "
                "`coordsim anomalies matrix` lists where each one acts"
            )


def knobs(config: CoordinatorConfig) -> dict[str, Any]:
    """Every effective value of `config` that applies to its architecture, as
    plain data (what `coordsim config show` prints for it)."""
    out: dict[str, Any] = {}
    for f in fields(config):
        if f.name in ("name", "costs", "known_bad", "interpreter"):
            continue
        archs = APPLIES_TO.get(f.name)
        if archs is not None and config.architecture not in archs:
            continue
        v = getattr(config, f.name)
        out[f.name] = v.value if isinstance(v, StrEnum) else v
    if config.architecture is Architecture.EVENT_LOOP:
        out["cores"] = 1
    out["costs"] = {f.name: getattr(config.costs, f.name) for f in fields(config.costs)}
    if config.interpreter is not None:
        out["interpreter"] = {f.name: getattr(config.interpreter, f.name) for f in fields(config.interpreter)}
    enabled = config.known_bad.enabled()
    if enabled:
        out["known_bad"] = dict.fromkeys(enabled, True)
    return out


CONFIGURATIONS: Final[dict[str, CoordinatorConfig]] = {
    c.name: c
    for c in (
        CoordinatorConfig(
            "event-loop",
            Architecture.EVENT_LOOP,
            OracleKind.MEMORY,
            CatalogKind.STASH,
            confirm_leadership=True,
            batch_read_ts=False,
            # Seed 000: today's loop awaits the (in-memory) oracle in its
            # handlers and triggers a group commit per write.
            oracle_calls=OracleCalls.ON_LOOP,
            group_commit=GroupCommitPolicy.IMMEDIATE,
            commits_in_flight=0,
        ),
        CoordinatorConfig(
            "event-loop+pg-oracle",
            Architecture.EVENT_LOOP,
            OracleKind.POSTGRES,
            CatalogKind.STASH,
            confirm_leadership=False,
            batch_read_ts=True,
        ),
        CoordinatorConfig(
            "decoupled",
            Architecture.DECOUPLED,
            OracleKind.POSTGRES,
            CatalogKind.PERSIST,
            confirm_leadership=False,
            batch_read_ts=True,
        ),
    )
}


def named(name: str) -> CoordinatorConfig:
    """The named configuration; unknown names are an `InvalidUsage` listing the known."""
    try:
        return CONFIGURATIONS[name]
    except KeyError:
        raise InvalidUsage(
            f"unknown configuration {name!r}; known: {', '.join(CONFIGURATIONS)}"
        ) from None
