"""Where a simulated deployment's durable state lives, and what one coordinator
process (an *incarnation*) opens on it.

An `Environment` outlives coordinators: a crash and restart, or a second
coordinator started beside the first (split brain), opens the same stores —
persist Blob/Consensus (tables and the persist catalog), the timestamp store or
the oracle's table, the catalog stash. In real mode they are PostgreSQL (and
files or S3); in virtual mode they are in-memory objects with modeled latency,
held by the `Environment` so a restarted coordinator finds them again.

`open_incarnation` builds everything one coordinator runs on, in dependency
order, and tears it down in reverse: persist client → oracles → catalog (opened:
this bumps its epoch and fences older incarnations) → controllers (rebuilt from
the catalog with the deterministic commands of `controllers.derive`). The
oracles and the catalog are opened by their one opening function
(`oracle.open.open_oracles`, `catalog.open.open_catalog`) from the specs the
`Environment` resolves (`Environment.oracle_spec`, `Environment.catalog_spec`).
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

import anyio

from catalog.open import CatalogFlavor, CatalogSpec, open_catalog
from catalog.stash_catalog import MemStashStore
from controllers.commands import AdvanceCatalogFrontier
from controllers.compute import ComputeConfig, ComputeController
from controllers.derive import derive
from controllers.storage import StorageConfig, StorageController
from coordinator.config import Architecture, CatalogKind, OracleKind, PersistListen
from coordinator.events import CoordinatorEvent
from coordinator.oracle_switch import OracleSwitch, start_above_other
from coordinator.statements import SqlError, SqlState
from oracle.api import CATALOG_TIMELINE, REALTIME_TIMELINE
from oracle.batching import BatchingOracle
from oracle.gated import GatedOracle
from oracle.memory import MemoryOracle
from oracle.modeled import ModeledOracleRows
from oracle.observed import ObservedOracle, OracleCall
from oracle.open import OracleBackend, OracleSpec, open_oracles
from oracle.timestamp_store import MemTimestampStore
from persist.client import PersistClient
from persist.open import Location, open_location
from sim.runtime.errors import ExternalError, InvalidUsage
from sim.runtime.tasks import AsyncExitStack

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from catalog.api import DurableCatalog
    from controllers.compute import ResponseSink
    from coordinator.config import CoordinatorConfig, KnownBad
    from coordinator.events import EventSink
    from coordinator.oracle_switch import Flip
    from oracle.api import TimestampOracle
    from oracle.gated import ProcessGate
    from persist.location import Blob, Consensus
    from sim.runtime.core import Runtime

__all__ = ["CATALOG_SHARD", "Environment", "Incarnation", "open_adapter_incarnation", "open_incarnation"]

#: The persist shard of the persist-backed catalog (tables use `u<id>`).
CATALOG_SHARD = "catalog"


@final
class Environment:
    """The durable stores of one deployment (see the module docstring).

    Args:
        blob, consensus: persist's location (tables, persist catalog); None
            (virtual mode only): one in memory, opened on first use
            (`location`).
        postgres_url: real mode: the database of the oracle, the timestamp store
            and the catalog stash; None: virtual mode, everything in memory.
        blob_url: real mode: where `blob` is, for adapter processes that open
            it themselves (`coordinator.process_adapters`).
        name: keeps deployments apart in one database (stash names, timelines).
    """

    def __init__(
        self,
        rt: Runtime,
        *,
        blob: Blob | None = None,
        consensus: Consensus | None = None,
        postgres_url: str | None = None,
        name: str | None = None,
        blob_url: str | None = None,
    ) -> None:
        if (blob is None) != (consensus is None) or (blob is None and postgres_url is not None):
            raise InvalidUsage("an Environment takes both halves of persist's location, or (virtual mode) neither")
        self._location = None if blob is None or consensus is None else Location(blob, consensus)
        self.postgres_url = postgres_url
        self.blob_url = blob_url
        # Derived from the Runtime's seed in virtual mode, so traces stay identical.
        self.name = (
            name or f"env-{uuid.UUID(int=rt.derive('environment').rng.getrandbits(128)).hex[:12]}"
        )
        # Virtual mode's in-memory stand-ins, shared by every incarnation.
        self.timestamp_store: MemTimestampStore | None = None
        self.catalog_store: MemStashStore | None = None
        self.oracle_rows: ModeledOracleRows | None = None
        #: A coordinator's oracle was switched live (`coordinator.oracle_switch`):
        #: from then on a starting coordinator catches up with both implementations.
        self.oracle_switched = False
        if postgres_url is None:
            self.timestamp_store = MemTimestampStore(rt)
            self.catalog_store = MemStashStore(rt)
            self.oracle_rows = ModeledOracleRows()

    @property
    def virtual(self) -> bool:
        return self.postgres_url is None

    async def location(self) -> Location:
        """persist's location, shared by every incarnation: the one given, or
        (virtual mode) one in memory, opened on first use."""
        if self._location is None:
            self._location = await open_location()
        return self._location

    def timeline(self, timeline: str) -> str:
        """The oracle timeline name of this deployment (unique per database)."""
        return timeline if self.virtual else f"{self.name}.{timeline}"

    def oracle_spec(self, kind: OracleKind, known_bad: KnownBad | None = None) -> OracleSpec:
        """The oracle of implementation `kind` on this deployment's stores, with
        the known-bad variants of `known_bad` that change it."""
        unguarded = known_bad is not None and known_bad.unguarded_wall_clock
        if kind is OracleKind.MEMORY:
            unfenced = known_bad is not None and known_bad.skip_epoch_fencing
            if self.postgres_url is None:
                return OracleSpec(
                    OracleBackend.MEMORY, store=self.timestamp_store, unguarded_clock=unguarded,
                    skip_epoch_fencing=unfenced,
                )
            return OracleSpec(
                OracleBackend.MEMORY_POSTGRES, url=self.postgres_url, pool_size=2,
                application_name="coordsim-oracle-timestamp-store", store_name=self.name, unguarded_clock=unguarded,
                skip_epoch_fencing=unfenced,
            )
        if self.postgres_url is None:
            return OracleSpec(OracleBackend.MODELED, rows=self.oracle_rows, unguarded_clock=unguarded)
        return OracleSpec(OracleBackend.POSTGRES, url=self.postgres_url, unguarded_clock=unguarded)

    def catalog_spec(self, kind: CatalogKind, *, fencing: bool = True) -> CatalogSpec:
        """The durable catalog of implementation `kind` on this deployment's
        stores (the persist one on the incarnation's `PersistClient`)."""
        if kind is CatalogKind.PERSIST:
            return CatalogSpec(CatalogFlavor.PERSIST, shard=CATALOG_SHARD, fencing=fencing)
        return CatalogSpec(
            CatalogFlavor.STASH, stash=self.postgres_url or "mem://", stash_env=self.name,
            store=self.catalog_store, fencing=fencing,
        )


@final
@dataclass
class Incarnation:
    """What one coordinator process runs on (see `open_incarnation`)."""

    persist: PersistClient
    oracle: TimestampOracle  # realtime; batching in front if the config says so
    catalog_oracle: TimestampOracle  # the `catalog` timeline (batching likewise)
    memory_oracle: MemoryOracle | None  # today's oracle, for confirm_leadership
    catalog: DurableCatalog
    storage: StorageController
    compute: ComputeController
    rt: Runtime
    events: EventSink | None = None
    actor: str = "coordinator"
    #: The event loop's oracle flag (`coordinator.oracle_switch`); None: decoupled.
    oracle_switch: OracleSwitch | None = None

    async def switch_oracle(self) -> Flip:
        """Flips the oracle flag (the `oracle-switch` fault). From then on
        `confirm_leadership()` goes through the catalog's epoch, which every
        coordinator bumps whichever oracle it runs (rule 2 of
        `coordinator.oracle_switch`)."""
        if self.oracle_switch is None:
            raise InvalidUsage("only a single coordinator's oracle is switched (the event-loop architecture)")
        flip = await self.oracle_switch.flip()
        self.memory_oracle = None
        return flip

    def emit(self, kind: str, component: str, start_s: float, **fields: Any) -> None:
        """Reports an internal event that started at `start_s` and ends now."""
        if self.events is not None:
            self.events(
                CoordinatorEvent(
                    kind, component, start_s, self.rt.now(), actor=self.actor, **fields
                )
            )

    def oracle_calls(self) -> int:
        """Backing-store oracle operations so far (both timelines; batched read_ts
        calls count once per backing call)."""
        total = 0
        for o in (self.oracle, self.catalog_oracle):
            if isinstance(o, ObservedOracle):
                o = o.inner
            stats = (o.inner if isinstance(o, BatchingOracle) else o).statistics()
            total += sum(stats.op(name).start_count for name in _ORACLE_OPS)
        return total


_ORACLE_OPS = ("write_ts", "peek_write_ts", "read_ts", "apply_write")


@contextlib.asynccontextmanager
async def open_incarnation(
    env: Environment,
    config: CoordinatorConfig,
    rt: Runtime,
    respond: ResponseSink,
    *,
    derive_commands: bool = True,
    events: EventSink | None = None,
    actor: str = "coordinator",
    join_epoch: int | None = None,
) -> AsyncIterator[Incarnation]:
    """Opens one coordinator's components on `env` (see the module docstring).

    Args:
        respond: where the compute controller's responses go.
        derive_commands: feed the catalog's current contents to the controllers
            (today's coordinator; the decoupled adapter's command tasks do it
            from a subscription instead).
        events, actor: where internal events go (every oracle call the
            coordinator makes, as its callers see it, is one), and who made them.
        join_epoch: an adapter in an OS process of its own
            (`coordinator.adapter_process`): join the catalog at the
            deployment's epoch instead of opening it (which would fence the
            deployment's other adapters).

    Raises:
        sim.runtime.errors.Fenced: with `join_epoch`, the catalog's epoch moved on.
    """
    bad = config.known_bad
    async with AsyncExitStack() as stack:
        persist = await stack.enter_async_context(
            PersistClient(*await env.location(), rt.derive("persist"))
        )
        raw_realtime, raw_catalog, memory = await _open_oracles(env, config, rt, stack)
        switch = None
        if config.architecture is Architecture.EVENT_LOOP:
            if env.oracle_switched:
                await start_above_other(env, config.oracle, rt, (raw_realtime, raw_catalog))
            # Seed 000's rollout flag: a pass-through until the first flip. The
            # new oracles start at 0 to be fast-forwarded (the known-bad flip,
            # which does not, leaves an in-memory one at its timestamp store's upper).
            async def reopen(kind: OracleKind) -> tuple[TimestampOracle, TimestampOracle]:
                cfg = config.with_overrides(oracle=kind)
                env.oracle_switched = True
                a, b, _ = await _open_oracles(env, cfg, rt, stack, at_upper=bad.unsynced_oracle_switch)
                return a, b

            switch = OracleSwitch(config.oracle, raw_realtime, raw_catalog, reopen, unsynced=bad.unsynced_oracle_switch)
            raw_realtime, raw_catalog = switch.realtime, switch.catalog
        oracle, catalog_oracle, raw_catalog = await _client_oracles(
            raw_realtime, raw_catalog, config, rt, stack, events, actor
        )
        catalog = await _open_catalog(env, config, rt, persist, raw_catalog, stack)
        if join_epoch is None:
            await catalog.open()
        else:
            await catalog.join(join_epoch)
        storage = await stack.enter_async_context(
            StorageController(
                persist,
                rt.derive("storage"),
                config=StorageConfig(
                    ignore_catalog_ts=bad.peeks_ignore_catalog_ts, table_setup=config.ddl_round_trips
                ),
            )
        )
        compute = await stack.enter_async_context(
            ComputeController(
                persist,
                rt.derive("compute"),
                respond,
                config=ComputeConfig(
                    ignore_catalog_ts=bad.peeks_ignore_catalog_ts,
                    listen_poll_s=config.persist_poll_s if config.persist_listen is PersistListen.POLL else None,
                ),
            )
        )
        inc = Incarnation(
            persist, oracle, catalog_oracle, memory, catalog, storage, compute, rt, events, actor, switch
        )
        if derive_commands:
            await feed_catalog(inc, catalog.cached_upper)
        yield inc


async def _client_oracles(
    raw_realtime: TimestampOracle,
    raw_catalog: TimestampOracle,
    config: CoordinatorConfig,
    rt: Runtime,
    stack: AsyncExitStack,
    events: EventSink | None,
    actor: str,
) -> tuple[TimestampOracle, TimestampOracle, TimestampOracle]:
    """One process's oracle clients over the raw oracles: batching in front
    if the config says so (its workers on a task group of `stack`), every
    call observed as an event of `actor`. Returns (realtime, catalog, the raw
    catalog oracle the durable catalog calls, observed likewise)."""
    bad = config.known_bad
    # After the oracles: on exit the batching workers stop before their
    # backends close.
    tg = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(tg.cancel_scope.cancel)
    oracle: TimestampOracle = raw_realtime
    catalog_oracle: TimestampOracle = raw_catalog
    if config.batch_read_ts:
        oracle = BatchingOracle(
            raw_realtime,
            rt,
            known_bad_join_in_flight=bad.batching_joins_in_flight,
            owns_inner=False,
        )
        catalog_oracle = BatchingOracle(raw_catalog, rt, owns_inner=False)
        for o in (oracle, catalog_oracle):
            stack.push_async_callback(o.close)
            await tg.start(o.serve)
    if events is not None:

        def observe(call: OracleCall) -> None:
            events(
                CoordinatorEvent(
                    f"oracle.{call.op}", f"oracle:{call.timeline}", call.start_s, call.end_s,
                    ok=call.ok, timeline=call.timeline, ts=call.ts, actor=actor,
                )
            )

        oracle = ObservedOracle(oracle, rt, observe)
        catalog_oracle = ObservedOracle(catalog_oracle, rt, observe)
        raw_catalog = ObservedOracle(raw_catalog, rt, observe)
    return oracle, catalog_oracle, raw_catalog


@contextlib.asynccontextmanager
async def open_adapter_incarnation(
    env: Environment,
    config: CoordinatorConfig,
    rt: Runtime,
    shared: Incarnation,
    *,
    epoch: int,
    events: EventSink | None = None,
    actor: str = "coordinator",
    gate: ProcessGate | None = None,
) -> AsyncIterator[Incarnation]:
    """What one more serving process (adapter) of a deployment runs on
    (issue 36, `coordinator/adapters.py`): its own oracle clients (own
    connections, own read_ts batching) and its own handle on the durable
    catalog, joined at the deployment's `epoch` (never bumping it: adapters
    do not fence each other); persist and the controllers are `shared`'s.
    With `gate`, every oracle call of the process (the catalog's
    `apply_write` too) passes it, so a nemesis can pause the process or cut
    it off from the oracle (`oracle.gated`).

    Raises:
        sim.runtime.errors.Fenced: the catalog's epoch is no longer `epoch`.
    """
    async with AsyncExitStack() as stack:
        raw_realtime, raw_catalog, _ = await _open_oracles(env, config, rt, stack)
        if gate is not None:
            raw_realtime = GatedOracle(raw_realtime, gate, rt.derive("oracle-gate").rng)
            raw_catalog = GatedOracle(raw_catalog, gate, rt.derive("catalog-oracle-gate").rng)
        oracle, catalog_oracle, raw_catalog = await _client_oracles(
            raw_realtime, raw_catalog, config, rt, stack, events, actor
        )
        catalog = await _open_catalog(env, config, rt, shared.persist, raw_catalog, stack)
        await catalog.join(epoch)
        yield Incarnation(
            shared.persist, oracle, catalog_oracle, None, catalog, shared.storage, shared.compute,
            rt, events, actor,
        )


async def feed_catalog(inc: Incarnation, upper: int) -> None:
    """Brings both controllers to the catalog's cached state (at `upper - 1`)."""
    if upper <= 0:
        return
    for cmd in derive(inc.catalog.state().as_updates(upper - 1)):
        await inc.storage.apply(cmd)
        inc.compute.send(cmd)
    await advance_catalog_frontier(inc, upper)


async def write_builtin_tables(inc: Incarnation) -> None:
    """A DDL's builtin-table rows, written as Materialize's DDL awaits them: a
    write timestamp from the oracle (the group commit's `write_ts`), then the
    write itself (`StorageController.append_builtin`). Two round trips; the
    commit's `apply_write` is left to the next group commit (the model has no
    txn-wal to make every table readable at once).

    Raises:
        SqlError: INDETERMINATE, the oracle or persist kept failing: the DDL
            itself has committed, but is not acknowledged as such.
    """
    try:
        ts = (await inc.oracle.write_ts()).ts
        await inc.storage.append_builtin(ts)
    except ExternalError as exc:
        raise SqlError(SqlState.INDETERMINATE, f"builtin tables: {exc}") from exc


async def advance_catalog_frontier(inc: Incarnation, upper: int) -> None:
    cmd = AdvanceCatalogFrontier(upper)
    if upper > inc.storage.catalog_frontier:
        await inc.storage.apply(cmd)
    if upper > inc.compute.catalog_frontier:
        inc.compute.send(cmd)


async def _open_oracles(
    env: Environment, config: CoordinatorConfig, rt: Runtime, stack: AsyncExitStack, *, at_upper: bool = True
) -> tuple[TimestampOracle, TimestampOracle, MemoryOracle | None]:
    """The raw oracles of both timelines, on one backend (an in-memory
    oracle's process bumps the timestamp store's epoch here, fencing every older one).
    `at_upper`: see `MemoryOracle.open` (False for an oracle switch's new oracle)."""
    oracles = await open_oracles(env.oracle_spec(config.oracle, config.known_bad), rt)
    stack.push_async_callback(oracles.close)
    realtime = await oracles.timeline(env.timeline(REALTIME_TIMELINE), at_upper=at_upper)
    catalog = await oracles.timeline(env.timeline(CATALOG_TIMELINE), at_upper=at_upper)
    return realtime, catalog, realtime if isinstance(realtime, MemoryOracle) else None


async def _open_catalog(
    env: Environment,
    config: CoordinatorConfig,
    rt: Runtime,
    persist: PersistClient,
    catalog_oracle: TimestampOracle,
    stack: AsyncExitStack,
) -> DurableCatalog:
    spec = env.catalog_spec(config.catalog, fencing=not config.known_bad.skip_epoch_fencing)
    # The pv2 catalog is a pTVC in the `catalog` timeline: each append applies
    # its write on the catalog oracle (seed 001). Today's stash catalog takes
    # its timestamps from the coordinator and calls no oracle.
    oracle = catalog_oracle if spec.flavor is CatalogFlavor.PERSIST else None
    return await stack.enter_async_context(open_catalog(spec, rt, oracle=oracle, persist=persist))
